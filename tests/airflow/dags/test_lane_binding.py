"""The lanes of a background DAG run are bound to the round that mapped them.

On ``dag.test()`` against a real mongod: between the ``coordinate`` task and the
lanes it mapped, a takeover starts a newer round (the stall watch's move); the
lanes end as ``superseded`` without claiming anything, the run succeeds, and its
``continue`` starts no run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_airflow.targets import dag_id_for
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.dags import load_dags, task_states, xcom
from tests.support.lane_takeover import TAKEOVER_DAG_FILE

pytestmark = pytest.mark.airflow


def test_lanes_of_a_round_taken_over_after_mapping_claim_nothing(
    dags_folder: Path,
    migronaut_connection: str,
    mongo_uri: str,
    db: Database[dict[str, Any]],
    capfd: pytest.CaptureFixture[str],
) -> None:
    # Over the session's DAG file (the dags_folder fixture removes it after the test).
    dag_file = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"]) / "migronaut_test_dags.py"
    dag_file.write_text(TAKEOVER_DAG_FILE)
    seed_users(db, 300)
    write_background(dags_folder, batch_size=50, max_parallel=2)
    with make_kit(mongo_uri, db, dags_folder) as kit:
        kit.runs.up()

    run = load_dags()[dag_id_for(SPLIT_NAME)].test()

    states = task_states(run)
    assert run.state == "success", states
    assert xcom(run, "coordinate", key="round") == 1
    lanes = sorted(index for task, index in states if task == "lane")
    assert lanes  # one per claimable partition
    for index in lanes:
        assert states[("lane", index)] == "success"
        result = xcom(run, "lane", map_index=index)
        assert (result["outcome"], result["reason"]) == ("superseded", "round"), result
    assert db.users.count_documents({"_v": 2}) == 0
    assert db.migronaut_background_partitions.count_documents({"status": {"$ne": "pending"}}) == 0
    assert xcom(run, "continue")["next"] == "superseded"
    state = db.migronaut_background.find_one({"_id": SPLIT_NAME})
    assert state is not None and state["round"] == 1 + len(lanes)  # a takeover per lane
    assert "superseded (its round changed since the lane was mapped" in "".join(capfd.readouterr())
