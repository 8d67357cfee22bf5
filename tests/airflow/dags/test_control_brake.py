"""The control DAG brakes and releases the whole target, for a user who may edit it.

``dag.test()`` runs are triggered by the user ``dag_test``, whose role comes from
the real simple auth manager (``[core] simple_auth_manager_users``), as in
``test_control_permissions.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from tests.support.background import make_kit
from tests.support.dags import load_dags, task_states, xcom

pytestmark = pytest.mark.airflow

BRAKE = {
    "migration": "",
    "action": "brake",
    "reason": "incident 99",
    "until": "2099-01-01T00:00:00+00:00",
}


def as_user(monkeypatch: pytest.MonkeyPatch, role: str) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", f"admin:admin,dag_test:{role}")


def test_brake_and_release_through_the_control_dag(
    dags_folder: Path,
    migronaut_connection: str,
    mongo_uri: str,
    db: Database[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    as_user(monkeypatch, "user")
    dags = load_dags()
    braked = dags["migronaut_control"].test(run_conf=BRAKE)
    assert braked.state == "success"
    assert task_states(braked)[("start_migration", -1)] == "skipped"
    result = xcom(braked, "control", "result")
    assert result["on"] and result["reason"] == "incident 99"
    assert result["requested_by"] == "dag_test"
    with make_kit(mongo_uri, db, dags_folder) as kit:
        status = kit.background.brake_status()
        assert status.on and status.until is not None and status.until.year == 2099
    released = dags["migronaut_control"].test(
        run_conf={"migration": "", "action": "release", "reason": "over", "until": ""}
    )
    assert released.state == "success"
    with make_kit(mongo_uri, db, dags_folder) as kit:
        assert not kit.background.brake_status().on
        log = kit.background.brake_log()
    assert [(e.action, e.requested_by, e.reason) for e in log] == [
        ("brake", "dag_test", "incident 99"),
        ("release", "dag_test", "over"),
    ]


@pytest.mark.parametrize(
    ("role", "conf", "said"),
    [
        ("viewer", BRAKE, "may not edit the DAG migronaut_control"),
        ("user", {**BRAKE, "reason": ""}, "CONFIG_INVALID"),
        ("user", {**BRAKE, "until": "next week"}, "CONFIG_INVALID"),
    ],
    ids=["viewer", "no reason", "bad until"],
)
def test_a_refused_brake_changes_nothing(
    dags_folder: Path,
    migronaut_connection: str,
    mongo_uri: str,
    db: Database[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    role: str,
    conf: dict[str, str],
    said: str,
) -> None:
    as_user(monkeypatch, role)
    run = load_dags()["migronaut_control"].test(run_conf=conf)
    assert run.state == "failed"
    assert said in "".join(capfd.readouterr())
    with make_kit(mongo_uri, db, dags_folder) as kit:
        assert not kit.background.brake_status().on
        assert kit.background.brake_log() == []
