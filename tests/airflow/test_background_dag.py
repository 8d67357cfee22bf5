"""A generated background-migration DAG run with ``dag.test()`` against a real mongod."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_airflow.operators.background import dag_id_for
from tests.airflow.dag_support import load_dags, task_states, xcom
from tests.integration.background_support import SPLIT_NAME, make_kit, seed_users, write_background


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
    write_background(dags_folder, batch_size=50, max_parallel=3)
    with make_kit(mongo_uri, db, dags_folder) as kit:
        kit.up()
    dag = load_dags()[dag_id_for(SPLIT_NAME)]
    reasons = []
    for _ in range(20):
        run = dag.test()
        states = task_states(run)
        reasons.append(xcom(run, "wait_for_lanes"))
        with make_kit(mongo_uri, db, dags_folder) as kit:
            status = kit.background_status(SPLIT_NAME)
        if status["status"] == "completed":
            break
        assert run.state == "success", states
        assert states[("lane", 0)] == "success"
        assert {key[1] for key in states if key[0] == "lane"} == {0, 1, 2}
    assert status["status"] == "completed"
    assert status["totals"]["migrated"] == 5_000
    assert db.users.count_documents({"_v": 2}) == 5_000
    print("sensor reasons:", reasons)
    assert "no-live-lease" in reasons  # the sensor deferred and its trigger fired
