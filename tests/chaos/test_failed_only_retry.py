"""A failed-only retry whose lane process is killed with SIGKILL after a written batch.

The retry's pass is leased like any other: the dead lane's partition is taken
over once its lease lapses, the batch it noted but never wrote is settled, and
every retried document is transformed exactly once; no other document is read
or written (their revisions stay as the first pass left them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pymongo.database import Database

from tests.support.chaos import (
    NAME,
    LaneFleet,
    make_kit,
    register,
    seed,
    status_of,
    write_migration,
)

TOTAL = 20_000
#: Every tenth document has a name the transform cannot split (an int).
BROKEN = {"_id": {"$mod": [10, 3]}}
BUDGET = '"max_document_errors": 5000,'


def test_a_killed_lane_of_a_failed_only_retry_is_taken_over_and_each_document_migrates_once(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    migrations = tmp_path / "migrations"
    write_migration(migrations, batch_size=50, max_parallel=2, doc_seconds=0.0, extra=BUDGET)
    seed(db, TOTAL)
    db.users.update_many(BROKEN, {"$set": {"name": 7}})
    register(mongo_uri, db.name, migrations)
    with make_kit(mongo_uri, db.name, migrations) as kit:
        kit.background.run(NAME, concurrency=2)
        assert kit.background.failed(NAME).total == TOTAL // 10
    assert db.users.count_documents({"_v": 2, "rev": 1}) == TOTAL - TOTAL // 10
    # The data is fixed (by the application: its revision moves); the transform slows
    # down, so the retry's pass outlasts a lane's few batches (a new file: repinned).
    db.users.update_many(
        BROKEN,
        [{"$set": {"name": {"$concat": ["Fixed", {"$toString": "$_id"}, " X"]}, "rev": 1}}],
    )
    write_migration(migrations, batch_size=50, max_parallel=2, doc_seconds=0.003, extra=BUDGET)
    with make_kit(mongo_uri, db.name, migrations) as kit:
        assert kit.background.control(NAME, "retry", failed_only=True, repin=True).failed == 2_000

    fleet = LaneFleet(mongo_uri, db.name, migrations, tmp_path, concurrency=1)
    try:
        doomed = fleet.spawn(die_after_checkpoint=3)
        survivor = fleet.spawn()
        codes = fleet.wait_all(timeout=180)
    finally:
        fleet.close()

    assert codes[doomed.pid] == -9, fleet.outputs()
    assert codes[survivor.pid] == 0, fleet.outputs()
    view = status_of(mongo_uri, db.name, migrations)
    assert view["status"] == "completed"
    assert view["failed_documents"] == 0
    assert view["totals"]["migrated"] == TOTAL
    assert db.users.count_documents({"_v": 2}) == TOTAL
    assert db.users.count_documents({"migrated_times": {"$ne": 1}}) == 0
    # The others were not written again; the retried ones once, after the fix.
    assert db.users.count_documents({"rev": 1}) == TOTAL - TOTAL // 10
    assert db.users.count_documents({"rev": 2, "first": {"$regex": "^Fixed"}}) == TOTAL // 10
