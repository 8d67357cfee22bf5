"""Update-pipeline migrations end to end on a real MongoDB: one ``update_many`` per batch."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core import Migronaut
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background


@pytest.fixture
def migrations(tmp_path: Path) -> Path:
    return tmp_path / "migrations"


@pytest.fixture
def kit(mongo_uri: str, db: Database[dict[str, Any]], migrations: Path) -> Iterator[Migronaut]:
    with make_kit(mongo_uri, db, migrations, lock_ttl_seconds=5) as kit:
        yield kit


def assert_all_split(db: Database[dict[str, Any]], count: int) -> None:
    assert db.users.count_documents({"_v": 2}) == count
    assert db.users.count_documents({"name": {"$exists": True}}) == 0
    for doc in db.users.find({"n": {"$exists": True}}):
        assert (doc["first"], doc["last"]) == (f"First{doc['n']}", f"Last{doc['n']}")


def test_a_pipeline_migration_runs_in_lanes_with_exact_totals(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 6_000)
    write_background(migrations, update=True, batch_size=700, max_parallel=3)
    kit.up()
    batches: list[dict[str, Any]] = []
    kit.on("background:batch", lambda event, payload: batches.append(payload))
    view = kit.run_background(SPLIT_NAME, concurrency=3)
    assert view["status"] == "completed"
    print(view)
    totals = view["totals"]
    assert totals["migrated"] == 6_000
    assert_all_split(db, 6_000)
    assert batches
