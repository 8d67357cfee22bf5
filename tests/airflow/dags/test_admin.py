"""``migronaut_admin``: every CLI operation from a trigger form, with ``dag.test()``.

The DAGs come from the session's DAG file (tests/airflow/conftest.py) over a real
replica set; runs are triggered by ``dag_test``, whose role the real simple auth
manager reads from ``[core] simple_auth_manager_users``. What is asserted is what
users rely on: the changelog through the kit's ``status()``, the background
migration's status, the run's XCom and the DAG runs it started.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_airflow.targets import dag_id_for
from tests.support import kit_json
from tests.support.airflow import task_logs_at_info
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.dags import load_dags, task_states, xcom
from tests.support.runner import write_migration

pytestmark = pytest.mark.airflow

ADMIN = "migronaut_admin"
BG_DAG = dag_id_for(SPLIT_NAME)
FIRST, LAST = "20230101000000_first", "20250101000000_last"


@pytest.fixture
def migrations(dags_folder: Path, migronaut_connection: str, db: Database[dict[str, Any]]) -> Path:
    """A regular migration, the background one (``SPLIT_NAME``), a later regular one."""
    seed_users(db, 50)
    write_migration(dags_folder, FIRST)
    write_background(dags_folder, batch_size=100, max_parallel=2)
    write_migration(dags_folder, LAST)
    return dags_folder


def admin(**conf: Any) -> Any:
    """Trigger the admin DAG with ``conf`` as its form; the DAG run."""
    return load_dags()[ADMIN].test(run_conf=conf)


def statuses(mongo_uri: str, db: Database[dict[str, Any]], migrations: Path) -> dict[str, str]:
    with make_kit(mongo_uri, db, migrations) as kit:
        return {row.name: row.status for row in kit.runs.status()}


def started_runs(dag_id: str) -> int:
    """How many runs of ``dag_id`` the session's metadata DB holds."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        return session.query(DagRun).filter(DagRun.dag_id == dag_id).count()


def test_up_to_registers_the_background_migration_and_starts_its_dag(
    migrations: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    before = started_runs(BG_DAG)  # the metadata DB is the session's
    run = admin(operation="up", to=SPLIT_NAME, reason="release 7")
    assert run.state == "success"
    assert statuses(mongo_uri, db, migrations) == {
        FIRST: "applied",
        SPLIT_NAME: "applied",
        LAST: "pending",
    }
    assert xcom(run, "run") == [BG_DAG]
    assert xcom(run, "run", key="result")["operation"] == "up"
    assert task_states(run)[("start_migrations", 0)] == "success"
    assert started_runs(BG_DAG) == before + 1
    with make_kit(mongo_uri, db, migrations) as kit:
        assert kit_json.status(kit, SPLIT_NAME)["status"] == "pending"


def test_plans_of_up_and_down_change_nothing(
    migrations: Path,
    mongo_uri: str,
    db: Database[dict[str, Any]],
    capfd: pytest.CaptureFixture[str],
) -> None:
    with task_logs_at_info():
        up = admin(operation="up", plan=True, only=FIRST)
    assert up.state == "success"
    plan = xcom(up, "run", key="result")
    assert (plan["operation"], plan["direction"], plan["refused"]) == ("plan", "up", None)
    assert [item["name"] for item in plan["migrations"]] == [FIRST]
    assert task_states(up)[("start_migrations", -1)] == "skipped"
    assert "plan of up: 1 migration(s); the run would go" in "".join(capfd.readouterr())
    assert set(statuses(mongo_uri, db, migrations).values()) == {"pending"}

    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up(only=FIRST)
    down = admin(operation="down", plan=True)
    assert [item["name"] for item in xcom(down, "run", key="result")["migrations"]] == [FIRST]
    assert statuses(mongo_uri, db, migrations)[FIRST] == "applied"


def test_down_to_reverts_and_baseline_adopts(
    migrations: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up(only=FIRST)
    assert admin(operation="down").state == "success"
    assert statuses(mongo_uri, db, migrations)[FIRST] == "pending"

    baseline = admin(operation="baseline", to=FIRST, reason="adopted from the old tool")
    assert baseline.state == "success"
    assert xcom(baseline, "run", key="result")["adopted"] == [FIRST]
    with make_kit(mongo_uri, db, migrations) as kit:
        [row] = [row for row in kit.runs.status() if row.name == FIRST]
    assert (row.status, row.adopted) == ("applied", True)


def test_a_dry_run_reports_in_xcom_and_writes_nothing(
    migrations: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    run = admin(operation="dry_run", migration=SPLIT_NAME, sample=10)
    assert run.state == "success"
    report = xcom(run, "run", key="result")
    assert report["totals"]["would_change"] == 10
    assert all("id" not in doc for doc in report["documents"])
    assert db.users.count_documents({"_v": 1}) == 50
    assert set(statuses(mongo_uri, db, migrations).values()) == {"pending"}


def test_audit_reports_findings_and_converge_prunes(
    migrations: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    audit = admin(operation="audit")
    assert audit.state == "success"  # pending migrations are warnings
    findings = xcom(audit, "run", key="result")
    assert findings["errors"] == 0
    assert {item["migration"] for item in findings["findings"]} == {FIRST, SPLIT_NAME, LAST}

    converge = admin(operation="converge", prune=True)
    assert converge.state == "success"
    assert xcom(converge, "run", key="result")["dropped"] == 0


@pytest.mark.parametrize(
    ("conf", "code"),
    [
        ({"operation": "up", "to": "20990101000000_nothing"}, "MIGRATION_FILE_NOT_FOUND"),
        ({"operation": "baseline"}, "CONFIG_INVALID: baseline needs to"),
        ({"operation": "audit", "plan": True}, "CONFIG_INVALID: plan applies to up and down"),
        ({"operation": "up", "to": FIRST, "only": FIRST}, "CONFIG_INVALID"),
    ],
    ids=["unknown to", "baseline without to", "plan of an audit", "to with only"],
)
def test_a_typed_error_fails_the_run_with_its_code_and_changes_nothing(
    migrations: Path,
    mongo_uri: str,
    db: Database[dict[str, Any]],
    capfd: pytest.CaptureFixture[str],
    conf: dict[str, Any],
    code: str,
) -> None:
    run = admin(**conf)
    assert run.state == "failed"
    assert task_states(run)[("run", -1)] == "failed"
    assert code in "".join(capfd.readouterr())
    assert set(statuses(mongo_uri, db, migrations).values()) == {"pending"}


def test_an_unknown_operation_is_refused_by_the_form(migrations: Path) -> None:
    from airflow.sdk.exceptions import ParamValidationError

    # Airflow 3.3 raises ParamValidationError, 3.2 a ValueError.
    with pytest.raises((ParamValidationError, ValueError), match="explode"):
        admin(operation="explode")


def test_a_viewer_changes_nothing(
    migrations: Path,
    mongo_uri: str,
    db: Database[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin,dag_test:viewer")
    before = started_runs(BG_DAG)
    run = admin(operation="up")
    assert run.state == "failed"
    output = "".join(capfd.readouterr())
    assert "FORBIDDEN" in output and f"'dag_test' may not edit the DAG {ADMIN}" in output
    assert "nothing was changed" in output
    assert set(statuses(mongo_uri, db, migrations).values()) == {"pending"}
    assert started_runs(BG_DAG) == before


def test_a_dry_run_asks_for_the_migrations_dag_and_the_rest_for_the_admin_dag(
    migrations: Path,
    mongo_uri: str,
    db: Database[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The callable lets release managers edit migration DAGs, and nothing else.
    monkeypatch.setenv(
        "AIRFLOW__MIGRONAUT__AUTHORIZE_RUNS", "tests.support.authorization:only_release_managers"
    )
    monkeypatch.setattr("tests.support.authorization.RELEASE_MANAGERS", frozenset({"dag_test"}))
    assert admin(operation="dry_run", migration=SPLIT_NAME, first=3).state == "success"
    assert admin(operation="up").state == "failed"
    assert admin(operation="audit").state == "failed"
    assert set(statuses(mongo_uri, db, migrations).values()) == {"pending"}
