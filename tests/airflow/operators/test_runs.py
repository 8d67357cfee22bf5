"""The operators of the CLI's operations, each in a DAG of its own run with ``dag.test()``.

A real replica set and Airflow's metadata DB; the run's triggering user is
``dag_test``, a user of the simple auth manager who may edit DAGs (tests/airflow/
conftest.py). What is asserted is what users rely on: the changelog as the kit's
``status()`` reports it, the result in XCom and the task's log.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_airflow.operators.runs import (
    AuditOperator,
    BaselineOperator,
    ConvergeOperator,
    DryRunOperator,
    MigrateDownOperator,
    MigrateUpOperator,
    PlanOperator,
)
from tests.support.airflow import task_logs_at_info
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.dags import run_one_task, task_states, xcom
from tests.support.runner import write_migration

pytestmark = pytest.mark.airflow

FIRST, SECOND, THIRD = "20230101000000_first", "20230102000000_second", "20230103000000_third"


@pytest.fixture
def migrations(dags_folder: Path, migronaut_connection: str) -> Path:
    for name in (FIRST, SECOND, THIRD):
        write_migration(dags_folder, name)
    return dags_folder


def run_task(operator_class: type, migrations: Path, **arguments: Any) -> Any:
    """Run a one-task DAG (``one_<class>``) holding ``operator_class(**arguments)``."""
    return run_one_task(
        operator_class.__module__,
        operator_class.__name__,
        migrations_dir=str(migrations),
        **arguments,
    )


def result(run: Any) -> Any:
    """The operation's result: the XCom ``result`` of the task."""
    return xcom(run, "op", key="result")


def applied(mongo_uri: str, db: Database[dict[str, Any]], migrations: Path) -> dict[str, str]:
    with make_kit(mongo_uri, db, migrations) as kit:
        return {row.name: row.status for row in kit.runs.status()}


def test_up_to_applies_through_the_named_migration(
    migrations: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    run = run_task(MigrateUpOperator, migrations, to=SECOND, reason="release 7")
    assert run.state == "success"
    assert applied(mongo_uri, db, migrations) == {
        FIRST: "applied",
        SECOND: "applied",
        THIRD: "pending",
    }
    ran = result(run)
    assert ran["operation"] == "up"
    assert [item["name"] for item in ran["migrations"]] == [FIRST, SECOND]
    assert xcom(run, "op") == []  # the DAG ids to start: no background migration


def test_up_only_applies_that_migration(
    migrations: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    assert run_task(MigrateUpOperator, migrations, only=SECOND).state == "success"
    assert applied(mongo_uri, db, migrations) == {
        FIRST: "pending",
        SECOND: "applied",
        THIRD: "pending",
    }


def test_down_to_reverts_what_was_applied_after_it(
    migrations: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up()
    run = run_task(MigrateDownOperator, migrations, to=FIRST)
    assert run.state == "success"
    assert applied(mongo_uri, db, migrations) == {
        FIRST: "applied",
        SECOND: "pending",
        THIRD: "pending",
    }
    assert [item["name"] for item in result(run)["migrations"]] == [THIRD, SECOND]


def test_plans_are_in_xcom_and_the_log_and_change_nothing(
    migrations: Path,
    mongo_uri: str,
    db: Database[dict[str, Any]],
    capfd: pytest.CaptureFixture[str],
) -> None:
    with task_logs_at_info():
        run = run_task(PlanOperator, migrations, direction="up", to=SECOND)
    assert run.state == "success"
    plan = result(run)
    assert json.loads(json.dumps(plan)) == plan
    assert (plan["operation"], plan["direction"], plan["refused"]) == ("plan", "up", None)
    assert [(item["name"], item["action"]) for item in plan["migrations"]] == [
        (FIRST, "apply"),
        (SECOND, "apply"),
    ]
    assert "plan of up: 2 migration(s); the run would go" in "".join(capfd.readouterr())
    assert set(applied(mongo_uri, db, migrations).values()) == {"pending"}

    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up()
    down = result(run_task(PlanOperator, migrations, direction="down"))
    assert down["direction"] == "down"
    assert [item["name"] for item in down["migrations"]] == [THIRD]
    assert set(applied(mongo_uri, db, migrations).values()) == {"applied"}


def test_baseline_adopts_without_running(
    migrations: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    run = run_task(BaselineOperator, migrations, to=SECOND)
    assert run.state == "success"
    assert result(run)["adopted"] == [FIRST, SECOND]
    with make_kit(mongo_uri, db, migrations) as kit:
        rows = {row.name: row for row in kit.runs.status()}
    assert rows[SECOND].adopted and rows[SECOND].status == "applied"
    assert rows[THIRD].status == "pending"
    assert db.runs.count_documents({}) == 0  # nothing ran


def test_converge_creates_and_prune_drops_its_version_index(
    migrations: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    seed_users(db, 5)
    created = run_task(
        ConvergeOperator, migrations, migronaut_config={"collections": {"users": _versioned()}}
    )
    assert created.state == "success"
    assert result(created)["created"] == 1
    assert "_v_1__id_1" in db.users.index_information()

    pruned = run_task(
        ConvergeOperator, migrations, prune=True, migronaut_config={"collections": {}}
    )
    assert pruned.state == "success"
    assert result(pruned)["dropped"] == 1
    assert "_v_1__id_1" not in db.users.index_information()


def _versioned() -> dict[str, Any]:
    return {"versioning": {"field": "_v"}}


def test_a_dry_run_reports_field_names_and_counts_never_ids(
    dags_folder: Path,
    migronaut_connection: str,
    mongo_uri: str,
    db: Database[dict[str, Any]],
    capfd: pytest.CaptureFixture[str],
) -> None:
    seed_users(db, 20)
    write_background(dags_folder)
    with task_logs_at_info():
        run = run_task(DryRunOperator, dags_folder, migration=SPLIT_NAME, first=5)
    assert run.state == "success"
    report = result(run)
    assert report["operation"] == "dry_run" and report["migration"] == SPLIT_NAME
    assert report["totals"] == {"documents": 5, "would_change": 5, "unchanged": 0, "errors": 0}
    assert all("id" not in doc for doc in report["documents"])
    assert report["documents"][0] == {
        "changes": {"set": ["first", "last", "_v"], "unset": ["name"]}
    }
    output = "".join(capfd.readouterr())
    assert "5 would change" in output and "First0" not in output
    assert db.users.count_documents({"_v": 1}) == 20  # nothing written


def test_audit_succeeds_on_warnings_and_fails_on_an_error(
    migrations: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    pending = run_task(AuditOperator, migrations)
    assert pending.state == "success"
    findings = result(pending)
    assert (findings["errors"], findings["warnings"]) == (0, 3)
    assert {item["kind"] for item in findings["findings"]} == {"pending"}

    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up()
    write_migration(migrations, FIRST, "def up(ctx):\n    pass\n")  # changed since applied
    changed = run_task(AuditOperator, migrations)
    assert changed.state == "failed"
    assert result(changed)["findings"][0]["kind"] == "checksum_mismatch"
    assert run_task(AuditOperator, migrations, fail_on_errors=False).state == "success"


def test_a_typed_error_fails_the_task_with_its_code_and_changes_nothing(
    migrations: Path,
    mongo_uri: str,
    db: Database[dict[str, Any]],
    capfd: pytest.CaptureFixture[str],
) -> None:
    run = run_task(MigrateUpOperator, migrations, to="20990101000000_nothing")
    assert run.state == "failed"
    assert task_states(run)[("op", -1)] == "failed"
    assert "MIGRATION_FILE_NOT_FOUND" in "".join(capfd.readouterr())
    assert set(applied(mongo_uri, db, migrations).values()) == {"pending"}


def test_a_user_who_may_not_edit_the_dag_changes_nothing(
    migrations: Path,
    mongo_uri: str,
    db: Database[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin,dag_test:viewer")
    run = run_task(MigrateUpOperator, migrations)
    assert run.state == "failed"
    output = "".join(capfd.readouterr())
    assert (
        "FORBIDDEN" in output and "'dag_test' may not edit the DAG one_MigrateUpOperator" in output
    )
    assert set(applied(mongo_uri, db, migrations).values()) == {"pending"}


def test_migronaut_ups_operator_applies_all_and_names_the_background_dags(
    migrations: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    from migronaut_airflow.operators.background import MigrationsUpOperator
    from migronaut_airflow.targets import dag_id_for

    seed_users(db, 10)
    write_background(migrations)
    run = run_task(MigrationsUpOperator, migrations)
    assert run.state == "success"
    assert xcom(run, "op") == [dag_id_for(SPLIT_NAME)]
    assert set(applied(mongo_uri, db, migrations).values()) == {"applied"}


def test_a_plan_the_run_would_refuse_fails_with_the_refusals_code_after_reporting(
    migrations: Path,
    mongo_uri: str,
    db: Database[dict[str, Any]],
    capfd: pytest.CaptureFixture[str],
) -> None:
    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up(only=FIRST)
    write_migration(migrations, FIRST, "def up(ctx):\n    pass\n")  # changed since applied
    run = run_task(PlanOperator, migrations)
    assert run.state == "failed"
    plan = result(run)
    assert plan["refused"]["code"] == "CHECKSUM_MISMATCH"
    assert [item["name"] for item in plan["migrations"]] == [SECOND, THIRD]
    assert "CHECKSUM_MISMATCH" in "".join(capfd.readouterr())
    assert applied(mongo_uri, db, migrations) == {
        FIRST: "applied",
        SECOND: "pending",
        THIRD: "pending",
    }
