"""``MigrateDownOperator`` names the DAG of the revert it registered, for a trigger to start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_airflow.targets import dag_id_for
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.dags import run_one_task, xcom

pytestmark = pytest.mark.airflow


def test_a_down_returns_the_reverted_migration_s_dag(
    dags_folder: Path, migronaut_connection: str, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    seed_users(db, 20)
    write_background(dags_folder, batch_size=100, max_parallel=2)
    with make_kit(mongo_uri, db, dags_folder) as kit:
        kit.runs.up()
        kit.background.run(SPLIT_NAME)

    run = run_one_task(
        "migronaut_airflow.operators.runs", "MigrateDownOperator", authorize_runs="off"
    )

    assert run.state == "success"
    assert xcom(run, "op") == [dag_id_for(SPLIT_NAME)]
    assert xcom(run, "op", key="result")["operation"] == "down"
