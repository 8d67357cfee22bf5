"""The control DAG acts only for a triggering user who may edit the migration's DAG.

``dag.test()`` runs are triggered by the user ``dag_test``; its role comes from the
real simple auth manager's ``[core] simple_auth_manager_users``, set per test.
Nothing of Airflow's auth is mocked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core import ConfigInvalidError
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.dags import load_dags, task_states

pytestmark = pytest.mark.airflow

PAUSE = {"migration": SPLIT_NAME, "action": "pause", "reason": "peak hours"}


@pytest.fixture
def registered(
    dags_folder: Path, migronaut_connection: str, mongo_uri: str, db: Database[dict[str, Any]]
) -> Path:
    seed_users(db, 200)
    write_background(dags_folder, batch_size=100, max_parallel=2)
    with make_kit(mongo_uri, db, dags_folder) as kit:
        kit.runs.up()
    return dags_folder


def pause_as(
    role: str | None, monkeypatch: pytest.MonkeyPatch, registered: Path, mongo_uri: str, db: Any
) -> tuple[Any, str]:
    """Trigger a pause as ``dag_test`` with ``role`` (None: not a user); the run and status."""
    users = "admin:admin" + (f",dag_test:{role}" if role else "")
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", users)
    run = load_dags()["migronaut_control"].test(run_conf=PAUSE)
    with make_kit(mongo_uri, db, registered) as kit:
        status = kit_json.status(kit, SPLIT_NAME)
    return run, str(status["status"])


@pytest.mark.parametrize(
    ("role", "why"),
    [
        ("viewer", "'dag_test' may not edit the DAG migronaut_bg__"),
        (None, "'dag_test' is not a user of the auth manager"),
    ],
    ids=["viewer", "unknown user"],
)
def test_a_user_who_may_not_edit_the_migrations_dag_changes_nothing(
    registered: Path,
    mongo_uri: str,
    db: Database[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    role: str | None,
    why: str,
) -> None:
    run, status = pause_as(role, monkeypatch, registered, mongo_uri, db)
    assert run.state == "failed"
    assert task_states(run)[("control", -1)] == "failed"
    output = "".join(capfd.readouterr())
    assert "FORBIDDEN" in output and why in output and "nothing was changed" in output
    assert status == "pending"


def test_a_user_who_may_edit_it_acts(
    registered: Path, mongo_uri: str, db: Database[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    run, status = pause_as("user", monkeypatch, registered, mongo_uri, db)
    assert run.state == "success"
    assert status == "paused"


def test_a_callable_decides_when_the_setting_names_one(
    registered: Path, mongo_uri: str, db: Database[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "AIRFLOW__MIGRONAUT__AUTHORIZE_RUNS", "tests.support.authorization:only_release_managers"
    )
    # An admin of the auth manager, but not a release manager: the callable says no.
    run, status = pause_as("admin", monkeypatch, registered, mongo_uri, db)
    assert (run.state, status) == ("failed", "pending")

    monkeypatch.setattr("tests.support.authorization.RELEASE_MANAGERS", frozenset({"dag_test"}))
    run, status = pause_as(None, monkeypatch, registered, mongo_uri, db)
    assert (run.state, status) == ("success", "paused")


def test_off_leaves_it_to_airflows_trigger_permission(
    registered: Path, mongo_uri: str, db: Database[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__MIGRONAUT__AUTHORIZE_RUNS", "off")
    run, status = pause_as("viewer", monkeypatch, registered, mongo_uri, db)
    assert (run.state, status) == ("success", "paused")


@pytest.mark.parametrize("value", ["everyone", "module:", ":callable", "a-b:c"])
def test_a_bad_setting_is_refused_when_the_dags_are_built(
    dags_folder: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    write_background(dags_folder)
    monkeypatch.setenv("AIRFLOW__MIGRONAUT__AUTHORIZE_RUNS", value)
    with pytest.raises(ConfigInvalidError) as refused:
        load_dags()
    assert refused.value.context == {"key": "authorize_runs"}
