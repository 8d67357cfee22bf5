"""A generated DAG finalizes a migration's validator through its coordinate step's waits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_airflow.operators.background import dag_id_for
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.dags import load_dags, task_states
from tests.support.validator import validation


def test_the_generated_dag_soaks_then_enforces_the_validator(
    dags_folder: Path,
    migronaut_connection: str,
    mongo_uri: str,
    db: Database[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seed_users(db, 300)
    write_background(
        dags_folder,
        batch_size=100,
        max_parallel=2,
        extra='"validator": "version", "validator_soak": {"passes": 2},',
    )
    with make_kit(mongo_uri, db, dags_folder) as kit:
        kit.runs.up()
    dag = load_dags()[dag_id_for(SPLIT_NAME)]
    seen: list[str | None] = []
    for _ in range(10):
        run = dag.test()
        assert run.state == "success", task_states(run)
        with make_kit(mongo_uri, db, dags_folder) as kit:
            status = kit_json.status(kit, SPLIT_NAME)
        seen.append((status.get("validator") or {}).get("phase"))
        if status["status"] == "completed":
            break
    assert status["status"] == "completed", seen
    assert status["validator"]["phase"] == "error"
    assert validation(db, "users") == {
        "validator": {"_v": 2},
        "validationLevel": "strict",
        "validationAction": "error",
    }
    assert db.users.count_documents({"_v": 2}) == 300
