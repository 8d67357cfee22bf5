"""``migronaut_up`` goes on once the background migration it stopped for completes.

The seeds' sync tick: it stops before a migration that waits for background ones,
"and the line goes on once they complete". On ``dag.test()`` against a real mongod:
``migronaut_up`` stops before ``LAST`` (it requires the background migration), the
background DAG's run that completes the migration starts ``migronaut_up`` again
(``resume_up``), and that run applies ``LAST``.
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
from tests.support.runner import COUNTING_MIGRATION, write_migration

pytestmark = pytest.mark.airflow

UP = "migronaut_up"
FIRST, LAST = "20230101000000_first", "20250101000000_last"


def run_ids(dag_id: str) -> set[str]:
    """The run ids of ``dag_id`` the session's metadata DB holds."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        return {run.run_id for run in session.query(DagRun).filter(DagRun.dag_id == dag_id)}


def statuses(mongo_uri: str, db: Database[dict[str, Any]], migrations: Path) -> dict[str, str]:
    with make_kit(mongo_uri, db, migrations) as kit:
        return {row.name: row.status for row in kit.runs.status()}


def test_the_run_that_completes_the_awaited_migration_starts_up_again(
    dags_folder: Path, migronaut_connection: str, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    seed_users(db, 60)
    write_migration(dags_folder, FIRST)
    write_background(dags_folder, batch_size=100, max_parallel=2)
    write_migration(dags_folder, LAST, f"requires = [{SPLIT_NAME!r}]\n{COUNTING_MIGRATION}")
    dags = load_dags()

    first_up = dags[UP].test()
    assert first_up.state == "success"
    assert xcom(first_up, "up", key="result")["stopped_at"] == LAST
    assert statuses(mongo_uri, db, dags_folder)[LAST] == "pending"

    before = run_ids(UP)
    for _ in range(10):
        run = dags[dag_id_for(SPLIT_NAME)].test()
        assert run.state == "success", task_states(run)
        with make_kit(mongo_uri, db, dags_folder) as kit:
            done = kit_json.status(kit, SPLIT_NAME)["status"] == "completed"
        if done:
            break
        assert xcom(run, "resume_up") == {"resumed": False, "migration": SPLIT_NAME}
        assert run_ids(UP) == before
    assert done
    assert task_states(run)[("resume_up", -1)] == "success"
    [started] = run_ids(UP) - before  # one migronaut_up run, queued for the scheduler

    assert started.startswith("manual__")
    again = dags[UP].test()
    assert again.state == "success"
    assert statuses(mongo_uri, db, dags_folder) == {
        FIRST: "applied",
        SPLIT_NAME: "applied",
        LAST: "applied",
    }
    assert db.runs.find_one({"_id": LAST}) == {"_id": LAST, "n": 1}
