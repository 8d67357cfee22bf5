"""The control DAG's ``failed_only`` retry, then the migration's own DAG, with ``dag.test()``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pymongo.database import Database

from migronaut_airflow.operators.background import dag_id_for
from tests.support import kit_json
from tests.support.background import FLAKY_NAME, fix_flaky, make_kit, seed_users, write_flaky
from tests.support.dags import load_dags, sync_dags_to_airflow, task_states, xcom

FLAKY_DAG = dag_id_for(FLAKY_NAME)
FAILING = [n for n in range(200) if n % 10 == 3]


def test_a_failed_only_retry_through_the_control_dag_runs_on_the_migrations_dag(
    dags_folder: Path, migronaut_connection: str, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    seed_users(db, 200)
    path = write_flaky(dags_folder)
    with make_kit(mongo_uri, db, dags_folder) as kit:
        kit.runs.up()
        assert kit_json.run(kit, FLAKY_NAME)["status"] == "completed"
        assert kit.background.failed(FLAKY_NAME).total == len(FAILING)
    fix_flaky(path)
    with make_kit(mongo_uri, db, dags_folder) as kit:
        kit.background.control(FLAKY_NAME, "repin")
    migrated = {doc["_id"]: doc for doc in db.users.find({"_v": 2})}
    dags = load_dags()
    sync_dags_to_airflow()  # the migration's DAG in the DB, for the control DAG to start

    refused = dags["migronaut_control"].test(
        run_conf={"migration": FLAKY_NAME, "action": "resume", "failed_only": True}
    )
    assert refused.state == "failed"  # failed_only goes with retry only: nothing changed

    run = dags["migronaut_control"].test(
        run_conf={
            "migration": FLAKY_NAME,
            "action": "retry",
            "failed_only": True,
            "reason": "transform fixed",
        }
    )

    assert run.state == "success"
    assert xcom(run, "control") == [FLAKY_DAG]  # the migration's DAG was started
    assert xcom(run, "control", key="result")["failed"] == len(FAILING)
    for _ in range(5):
        round_ = dags[FLAKY_DAG].test()
        assert task_states(round_)[("coordinate", -1)] == "success"
        with make_kit(mongo_uri, db, dags_folder) as kit:
            status = kit_json.status(kit, FLAKY_NAME)
            if status["status"] == "completed":
                break
    assert status["status"] == "completed"
    with make_kit(mongo_uri, db, dags_folder) as kit:
        assert [row.id for row in kit.background.failed(FLAKY_NAME).documents] == [13]
        retry = next(
            e for e in kit_json.history(kit, FLAKY_NAME) if e.get("reason") == "transform fixed"
        )
    assert (retry["action"], retry["failed_only"], retry["by"]) == ("reopen", True, "dag_test")
    assert db.users.count_documents({"_v": 1}) == 1
    assert all(db.users.find_one({"_id": key}) == doc for key, doc in migrated.items())
