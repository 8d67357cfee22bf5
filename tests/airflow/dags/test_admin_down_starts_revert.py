"""A ``down`` from ``migronaut_admin`` starts the reverted background migration's DAG at once.

The seeds: "what an ``up`` (or ``down``) job registers gets its coordinator there
at once". A ``down`` from the CLI cannot reach Airflow: its revert is started by
the drift DAG's heal (docs/airflow.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_airflow.targets import dag_id_for
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.dags import load_dags, task_states, xcom

pytestmark = pytest.mark.airflow

BG_DAG = dag_id_for(SPLIT_NAME)


def started_runs(dag_id: str) -> list[str]:
    """The run ids of ``dag_id`` the session's metadata DB holds."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        return [run.run_id for run in session.query(DagRun).filter(DagRun.dag_id == dag_id)]


def test_a_down_registers_the_revert_and_starts_its_dag(
    dags_folder: Path, migronaut_connection: str, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    seed_users(db, 50)
    write_background(dags_folder, batch_size=100, max_parallel=2)
    with make_kit(mongo_uri, db, dags_folder) as kit:
        kit.runs.up()
        assert kit_json.run(kit, SPLIT_NAME)["status"] == "completed"
    before = set(started_runs(BG_DAG))

    run = load_dags()["migronaut_admin"].test(run_conf={"operation": "down", "reason": "rollback"})

    assert run.state == "success"
    assert xcom(run, "run") == [BG_DAG]
    assert task_states(run)[("start_migrations", 0)] == "success"
    [started] = set(started_runs(BG_DAG)) - before
    assert started.startswith("manual__")
    with make_kit(mongo_uri, db, dags_folder) as kit:
        state = kit_json.status(kit, SPLIT_NAME)
    assert (state["status"], state["direction"]) == ("pending", "revert")
