"""A generated background-migration DAG run with ``dag.test()`` against a real mongod."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_airflow.dags.assets import completed_asset
from tests.support.background import SPLIT_NAME, make_kit, seed_users
from tests.support.background_dag import DOCUMENTS, run_until_completed, write_migration
from tests.support.dags import asset_events


def test_generated_dag_migrates_with_three_mapped_lanes(
    dags_folder: Path,
    migronaut_connection: str,
    mongo_uri: str,
    db: Database[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MIGRONAUT_TEST_LANE_MAX_SLICES", "1")
    seed_users(db, DOCUMENTS)
    db.users.create_index([("_v", 1), ("_id", 1)])
    write_migration(dags_folder)
    with make_kit(mongo_uri, db, dags_folder) as kit:
        kit.runs.up()
    status, reasons = run_until_completed(mongo_uri, db, dags_folder)
    assert status["status"] == "completed"
    assert status["totals"]["migrated"] == DOCUMENTS
    assert db.users.count_documents({"_v": 2}) == DOCUMENTS
    assert "no-live-lease" in reasons  # the sensor deferred and its trigger fired
    # One "completed" event, from the run that completed it, for deploy DAGs to run on.
    events = asset_events(completed_asset(SPLIT_NAME).uri)
    assert [(event["migration"], event["totals"]["migrated"]) for event in events] == [
        (SPLIT_NAME, DOCUMENTS)
    ]
