"""A generated background-migration DAG run with ``dag.test()`` against a real mongod."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_airflow.operators.background import dag_id_for
from migronaut_core.config import CONFIG_FILE, BackgroundCollections
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.dags import load_dags, task_states, xcom

#: A ``background_collection`` other than the default, set in ``migronaut.toml``.
CUSTOM_PREFIX = "ops_bg"


def run_until_completed(
    mongo_uri: str, db: Database[dict[str, Any]], migrations: Path, **config: Any
) -> tuple[dict[str, Any], list[Any]]:
    """Run the migration's DAG round after round; its final status and the sensor's reasons."""
    dag = load_dags()[dag_id_for(SPLIT_NAME)]
    reasons = []
    for round_number in range(40):
        run = dag.test()
        states = task_states(run)
        reasons.append(xcom(run, "wait_for_lanes"))
        with make_kit(mongo_uri, db, migrations, **config) as kit:
            status = kit_json.status(kit, SPLIT_NAME)
        if status["status"] == "completed":
            break
        assert run.state == "success", states
        assert states[("lane", 0)] == "success"
        lanes = {key[1] for key in states if key[0] == "lane"}
        # The first round maps one lane per slot; later ones, one per open partition.
        assert lanes == {0, 1, 2} if round_number == 0 else lanes <= {0, 1, 2}
    print("sensor reasons:", reasons)
    return status, reasons


def test_generated_dag_migrates_with_three_mapped_lanes(
    dags_folder: Path,
    migronaut_connection: str,
    mongo_uri: str,
    db: Database[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MIGRONAUT_TEST_LANE_MAX_SLICES", "1")
    seed_users(db, 5_000)
    db.users.create_index([("_v", 1), ("_id", 1)])
    # 0.5 ms a document: 300 ms slices of 3 lanes cannot drain 5,000 in one round, however fast
    # the machine, so a round ends with open partitions and no live lease.
    write_background(dags_folder, batch_size=50, max_parallel=3, per_document_seconds=0.0005)
    with make_kit(mongo_uri, db, dags_folder) as kit:
        kit.runs.up()
    status, reasons = run_until_completed(mongo_uri, db, dags_folder)
    assert status["status"] == "completed"
    assert status["totals"]["migrated"] == 5_000
    assert db.users.count_documents({"_v": 2}) == 5_000
    assert "no-live-lease" in reasons  # the sensor deferred and its trigger fired


def test_generated_dag_waits_on_a_configured_collection_prefix(
    dags_folder: Path,
    migronaut_connection: str,
    mongo_uri: str,
    db: Database[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The hook reads migronaut.toml beside the migrations; the DAG file sets no prefix.
    (dags_folder.parent / CONFIG_FILE).write_text(f'background_collection = "{CUSTOM_PREFIX}"\n')
    monkeypatch.setenv("MIGRONAUT_TEST_LANE_MAX_SLICES", "1")
    seed_users(db, 5_000)
    db.users.create_index([("_v", 1), ("_id", 1)])
    write_background(dags_folder, batch_size=50, max_parallel=3, per_document_seconds=0.0005)
    with make_kit(mongo_uri, db, dags_folder, background_collection=CUSTOM_PREFIX) as kit:
        kit.runs.up()
    status, reasons = run_until_completed(
        mongo_uri, db, dags_folder, background_collection=CUSTOM_PREFIX
    )
    assert status["status"] == "completed"
    assert status["totals"]["migrated"] == 5_000
    assert db.users.count_documents({"_v": 2}) == 5_000
    custom = BackgroundCollections.from_prefix(CUSTOM_PREFIX)
    assert db[custom.state].count_documents({"_id": SPLIT_NAME}) == 1
    assert BackgroundCollections.from_prefix("migronaut_background").state not in (
        db.list_collection_names()
    )
    # Reading the default collections, the sensor saw no state and stopped at once
    # ("left-running"); on the configured ones it waited for the lanes.
    assert "left-running" not in reasons
    assert "no-live-lease" in reasons
