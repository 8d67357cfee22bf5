"""A lane task run with the bindings of an earlier registration claims nothing (``dag.test()``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core import Driver
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.dags import run_one_task, xcom

pytestmark = pytest.mark.airflow


def test_a_lane_of_an_earlier_registration_ends_superseded(
    dags_folder: Path, migronaut_connection: str, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    seed_users(db, 100)
    write_background(dags_folder, batch_size=50)
    with make_kit(mongo_uri, db, dags_folder) as kit:
        kit.runs.up()
        mapped = kit.background.coordinate(SPLIT_NAME, driver=Driver("airflow", rounds=True))
        kit.runs.down()  # registered again: the revert, then the next up
        kit.runs.up()
        current = kit.background.coordinate(SPLIT_NAME, driver=Driver("airflow", rounds=True))
    assert current.next == "process" and current.registration != mapped.registration

    run = run_one_task(
        "migronaut_airflow.operators.background",
        "BackgroundLaneOperator",
        migration=SPLIT_NAME,
        registration=mapped.registration,
        generation=mapped.generation,
        round=mapped.round,
    )

    assert run.state == "success"
    result = xcom(run, "op")
    assert (result["outcome"], result["reason"], result["counters"]) == (
        "superseded",
        "registration",
        {},
    )
    assert db.users.count_documents({"_v": 2}) == 0
    assert db.migronaut_background_partitions.count_documents({"status": {"$ne": "pending"}}) == 0
