"""Background migrations end to end on a real MongoDB: the engine's promises."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core import Migronaut
from tests.integration.background_support import SPLIT_NAME, make_kit, seed_users, write_background


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
    for doc in db.users.aggregate([{"$sample": {"size": 50}}]):
        assert doc["first"] == f"First{doc['n']}"
        assert doc["last"] == f"Last{doc['n']}"


def test_twenty_thousand_documents_with_four_lanes(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 20_000)
    db.users.create_index([("_v", 1), ("_id", 1)])
    write_background(migrations, max_parallel=4)
    result = kit.up()
    assert [(m.name, m.status) for m in result.migrations] == [(SPLIT_NAME, "registered")]
    assert kit.background_status(SPLIT_NAME)["status"] == "pending"

    leases: list[int] = []
    stop = threading.Event()

    def sample_leases() -> None:
        while not stop.is_set():
            leases.append(
                db.migronaut_background_partitions.count_documents({"lease": {"$exists": True}})
            )
            time.sleep(0.02)

    sampler = threading.Thread(target=sample_leases)
    sampler.start()
    try:
        view = kit.run_background(SPLIT_NAME, concurrency=4)
    finally:
        stop.set()
        sampler.join()
    assert view["status"] == "completed"
    assert view["totals"]["migrated"] == 20_000
    assert max(leases) <= 4
    assert max(leases) >= 2, "the lanes never overlapped"
    assert_all_split(db, 20_000)
    rows = {row.name: row for row in kit.status()}
    assert rows[SPLIT_NAME].kind == "background"
