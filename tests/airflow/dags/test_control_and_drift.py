"""The control, drift and up DAGs, the superseded round and bad inputs, with ``dag.test()``."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_airflow.operators.background import dag_id_for
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.dags import load_dags, task_states, xcom

BG_DAG = dag_id_for(SPLIT_NAME)


@pytest.fixture
def registered(
    dags_folder: Path, migronaut_connection: str, mongo_uri: str, db: Database[dict[str, Any]]
) -> Path:
    seed_users(db, 1_000)
    write_background(dags_folder, batch_size=100, max_parallel=2)
    with make_kit(mongo_uri, db, dags_folder) as kit:
        kit.runs.up()
    return dags_folder


def queued_runs(dag_id: str) -> list[Any]:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        runs = session.query(DagRun).filter(DagRun.dag_id == dag_id, DagRun.state == "queued").all()
        session.expunge_all()
        return runs


def consume_queued_runs(dag_id: str) -> int:
    """Drop queued runs: the tests run the DAG with ``dag.test()`` in the scheduler's stead."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        return (
            session.query(DagRun).filter(DagRun.dag_id == dag_id, DagRun.state == "queued").delete()
        )


def run_until_done(
    dags: dict[str, Any], mongo_uri: str, db: Database[dict[str, Any]], migrations: Path
) -> dict[str, Any]:
    for _ in range(10):
        dags[BG_DAG].test()
        consume_queued_runs(BG_DAG)
        with make_kit(mongo_uri, db, migrations) as kit:
            status = kit_json.status(kit, SPLIT_NAME)
        if status["status"] in ("completed", "failed", "paused", "cancelled"):
            return status
    raise AssertionError("the migration did not finish")


def test_pause_and_resume_through_the_control_dag(
    registered: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    dags = load_dags()
    paused = dags["migronaut_control"].test(
        run_conf={"migration": SPLIT_NAME, "action": "pause", "reason": "peak hours"}
    )
    assert paused.state == "success"
    assert task_states(paused)[("start_migration", -1)] == "skipped"
    with make_kit(mongo_uri, db, registered) as kit:
        assert kit_json.status(kit, SPLIT_NAME)["status"] == "paused"
    skipped = dags[BG_DAG].test()
    assert task_states(skipped)[("coordinate", -1)] == "skipped"
    assert db.users.count_documents({"_v": 2}) == 0

    before = len(queued_runs(BG_DAG))
    resumed = dags["migronaut_control"].test(
        run_conf={"migration": SPLIT_NAME, "action": "resume", "reason": "quiet again"}
    )
    assert resumed.state == "success"
    assert xcom(resumed, "control") == [BG_DAG]
    assert len(queued_runs(BG_DAG)) == before + 1  # the migration's DAG was started
    status = run_until_done(dags, mongo_uri, db, registered)
    assert status["status"] == "completed"
    with make_kit(mongo_uri, db, registered) as kit:
        history = kit_json.history(kit, SPLIT_NAME)
    pause = next(entry for entry in history if entry["action"] == "pause")
    resume = next(entry for entry in history if entry["action"] == "resume")
    assert (pause["by"], pause["reason"]) == ("dag_test", "peak hours")
    assert (resume["by"], resume["reason"]) == ("dag_test", "quiet again")


def test_a_repin_of_a_cancelled_migration_starts_no_run(
    registered: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    """The core says whether the migration may run: a repin leaves a cancelled one cancelled."""
    with make_kit(mongo_uri, db, registered) as kit:
        kit.background.control(SPLIT_NAME, "cancel")
    before = len(queued_runs(BG_DAG))
    run = load_dags()["migronaut_control"].test(
        run_conf={"migration": SPLIT_NAME, "action": "repin"}
    )
    assert run.state == "success"
    assert xcom(run, "control") == []
    assert task_states(run)[("start_migration", -1)] == "skipped"
    assert len(queued_runs(BG_DAG)) == before
    with make_kit(mongo_uri, db, registered) as kit:
        assert kit_json.status(kit, SPLIT_NAME)["status"] == "cancelled"


@pytest.mark.parametrize(
    ("conf", "fragment"),
    [
        ({"migration": "20990101000000_unknown", "action": "pause"}, "NOT_APPLIED"),
        ({"migration": "../etc", "action": "pause"}, "MIGRATION_INVALID_NAME"),
    ],
)
def test_bad_control_input_fails_the_task_and_changes_nothing(
    registered: Path,
    mongo_uri: str,
    db: Database[dict[str, Any]],
    conf: dict[str, str],
    fragment: str,
    capfd: pytest.CaptureFixture[str],
) -> None:
    run = load_dags()["migronaut_control"].test(run_conf=conf)
    assert run.state == "failed"
    assert task_states(run)[("control", -1)] == "failed"
    assert fragment in "".join(capfd.readouterr())
    with make_kit(mongo_uri, db, registered) as kit:
        assert kit_json.status(kit, SPLIT_NAME)["status"] == "pending"


def test_an_unknown_action_is_refused_by_the_form(
    registered: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    from airflow.sdk.exceptions import ParamValidationError

    # Airflow 3.3 raises ParamValidationError, 3.2 a ValueError.
    with pytest.raises((ParamValidationError, ValueError), match="explode"):
        load_dags()["migronaut_control"].test(
            run_conf={"migration": SPLIT_NAME, "action": "explode"}
        )
    with make_kit(mongo_uri, db, registered) as kit:
        assert kit_json.status(kit, SPLIT_NAME)["status"] == "pending"


def test_an_action_that_does_not_fit_the_state_fails(
    registered: Path,
    mongo_uri: str,
    db: Database[dict[str, Any]],
    capfd: pytest.CaptureFixture[str],
) -> None:
    dags = load_dags()
    assert run_until_done(dags, mongo_uri, db, registered)["status"] == "completed"
    run = dags["migronaut_control"].test(run_conf={"migration": SPLIT_NAME, "action": "pause"})
    assert run.state == "failed"
    assert "BACKGROUND_CONFLICT" in "".join(capfd.readouterr())


def test_a_missing_connection_fails_clearly(
    dags_folder: Path, airflow_db: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    write_background(dags_folder)
    run = load_dags()["migronaut_control"].test(
        run_conf={"migration": SPLIT_NAME, "action": "pause"}
    )
    assert run.state == "failed"
    assert "migronaut_default" in "".join(capfd.readouterr())


def test_drift_dag_reopens_and_heals(
    registered: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    dags = load_dags()
    assert run_until_done(dags, mongo_uri, db, registered)["status"] == "completed"
    seed_users(db, 50, start=50_000)  # an old release still writing the old shape
    drift = dags["migronaut_drift"].test()
    assert drift.state == "success"
    verify = xcom(drift, "verify")
    assert verify["drifted"] == [
        {"migration": SPLIT_NAME, "collection": "users", "action": "reopened"}
    ]
    assert xcom(drift, "heal") == [BG_DAG]
    assert queued_runs(BG_DAG)
    status = run_until_done(dags, mongo_uri, db, registered)
    assert status["status"] == "completed"
    assert status["totals"]["migrated"] == 1_050
    assert db.users.count_documents({"_v": 1}) == 0


def test_a_run_whose_round_was_taken_over_ends_superseded(
    registered: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    from migronaut_core.background.coordinator import Driver

    path = registered / f"{SPLIT_NAME}.py"
    path.write_text(path.read_text() + "\n# edited mid-deploy\n")  # its first step waits
    taken_over = threading.Event()

    def newer_driver() -> None:
        with make_kit(mongo_uri, db, registered) as kit:
            deadline = time.monotonic() + 60
            while (db.migronaut_background.find_one({"_id": SPLIT_NAME}) or {}).get("round") != 1:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            kit.background.control(SPLIT_NAME, "repin", reason="deploy finished")
            answer = kit.background.coordinate(
                SPLIT_NAME, driver=Driver("airflow", "other", rounds=True)
            )
            assert answer.round == 2
            taken_over.set()

    thread = threading.Thread(target=newer_driver)
    thread.start()
    run = load_dags()[BG_DAG].test()
    thread.join()
    assert taken_over.is_set()
    states = task_states(run)
    assert states[("coordinate", -1)] == "skipped"
    assert states[("wait_for_lanes", -1)] == "skipped"
    assert db.users.count_documents({"_v": 2}) == 0
