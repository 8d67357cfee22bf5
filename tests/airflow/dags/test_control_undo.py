"""An undo through ``migronaut_control``: it registers the undo and starts the migration's
DAG, whose lanes restore the journal's before-images like any pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_airflow.dags.assets import completed_asset
from migronaut_airflow.targets import dag_id_for
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.dags import asset_events, load_dags, sync_dags_to_airflow, task_states, xcom

pytestmark = pytest.mark.airflow

BG_DAG = dag_id_for(SPLIT_NAME)
JOURNALED = '"revision_field": "rev", "undo": "journal",'


def test_the_control_dag_starts_an_undo_that_the_migrations_dag_runs(
    dags_folder: Path, migronaut_connection: str, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    seed_users(db, 400)
    seeded = {doc["_id"]: doc for doc in db.users.find()}
    write_background(dags_folder, batch_size=50, max_parallel=2, extra=JOURNALED)
    with make_kit(mongo_uri, db, dags_folder) as kit:
        kit.runs.up()
        kit.background.run(SPLIT_NAME, concurrency=2)
    db.users.update_one({"_id": 3}, {"$set": {"first": "App"}, "$inc": {"rev": 1}})
    dags = load_dags()
    sync_dags_to_airflow()  # the migration's DAG in the DB, for the control DAG to start
    announced = asset_events(completed_asset(SPLIT_NAME).uri)  # this session's, so far

    run = dags["migronaut_control"].test(
        run_conf={"migration": SPLIT_NAME, "action": "undo", "reason": "bad release"}
    )

    assert run.state == "success"
    assert task_states(run)[("start_migration", 0)] == "success", task_states(run)
    assert xcom(run, "control", key="result") == {"applied": "changed", "status": "pending"}
    for _ in range(10):
        bg_run = dags[BG_DAG].test()
        # An undo's completion is no milestone: no "completed" event for deploy DAGs.
        assert task_states(bg_run)[("announce_completed", -1)] == "skipped"
        with make_kit(mongo_uri, db, dags_folder) as kit:
            status = kit_json.status(kit, SPLIT_NAME)
        if status["status"] == "completed":
            break
    assert (status["status"], status["direction"], status["undo"]) == (
        "completed",
        "revert",
        "journal",
    )
    assert [sample["id"] for sample in status["failed_document_samples"]] == [3]
    for doc in db.users.find():
        if doc["_id"] == 3:
            assert (doc["_v"], doc["first"]) == (2, "App")
        else:
            assert doc == {**seeded[doc["_id"]], "rev": 2}
    assert asset_events(completed_asset(SPLIT_NAME).uri) == announced  # none added
