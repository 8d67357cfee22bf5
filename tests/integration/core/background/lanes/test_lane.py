"""Lanes in a deploy and a shutdown: a changed file defers, a cancelled slice lets go."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core import CancelToken, Migronaut, SliceResult
from migronaut_core.errors import ChecksumMismatchError
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, seed_users, wait_until, write_background

#: A lease TTL no test here could outwait: a claim that comes sooner was released, not reaped.
LONG_TTL_SECONDS = 60


@pytest.fixture
def kit(mongo_uri: str, db: Database[dict[str, Any]], migrations: Path) -> Iterator[Migronaut]:
    with make_kit(mongo_uri, db, migrations, lock_ttl_seconds=LONG_TTL_SECONDS) as kit:
        yield kit


def _leased(db: Database[dict[str, Any]]) -> int:
    return db.migronaut_background_partitions.count_documents({"lease": {"$exists": True}})


def test_a_lane_meeting_a_changed_file_defers_then_works_once_the_deploy_lands(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 2_000)
    path = write_background(migrations, batch_size=100, max_parallel=2)
    kit.runs.up()
    assert kit.background.coordinate(SPLIT_NAME).next == "process"
    registered = path.read_text()
    # The new release reached this worker first: same migration, a different file.
    path.write_text(registered + "\n# release 2\n")

    deferred = kit.background.run_slice(SPLIT_NAME)

    assert (deferred.outcome, deferred.reason) == ("deferred", "checksum_mismatch")
    assert deferred.retry_after_ms is not None and deferred.retry_after_ms > 0
    assert deferred.counters == {}
    assert deferred.checksums is not None
    short_registered, short_on_disk = (
        deferred.checksums["registered"],
        deferred.checksums["on_disk"],
    )
    assert len(short_registered) == len(short_on_disk) == 12
    assert short_registered != short_on_disk
    assert _leased(db) == 0  # it claimed nothing
    assert db.users.count_documents({"_v": 2}) == 0
    assert deferred.to_dict()["reason"] == "checksum_mismatch"

    error = deferred.deferred_too_long(SPLIT_NAME, 901.4)
    assert isinstance(error, ChecksumMismatchError)
    assert error.code == "CHECKSUM_MISMATCH"
    assert SPLIT_NAME in error.message
    assert short_registered in error.message and short_on_disk in error.message
    assert "901 s" in error.message
    assert error.context == {
        "migration": SPLIT_NAME,
        "waited_seconds": 901,
        "registered": short_registered,
        "on_disk": short_on_disk,
    }

    path.write_text(registered)  # the deploy is over (here: rolled back to what is registered)
    resumed = kit.background.run_slice(SPLIT_NAME)
    assert resumed.outcome in ("yielded", "exhausted"), resumed
    assert resumed.counters["migrated"] > 0
    status = kit_json.run(kit, SPLIT_NAME, concurrency=2)
    assert status["status"] == "completed"
    assert status["totals"]["migrated"] == 2_000
    assert db.users.count_documents({"_v": 2}) == 2_000


def test_a_lane_whose_file_is_missing_defers_with_its_own_reason(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 300)
    path = write_background(migrations, batch_size=100)
    kit.runs.up()
    assert kit.background.coordinate(SPLIT_NAME).next == "process"
    path.unlink()

    deferred = kit.background.run_slice(SPLIT_NAME)

    assert (deferred.outcome, deferred.reason, deferred.checksums) == (
        "deferred",
        "file_missing",
        None,
    )
    error = deferred.deferred_too_long(SPLIT_NAME, 60)
    assert error.code == "MIGRATION_FILE_NOT_FOUND"
    assert SPLIT_NAME in error.message
    assert _leased(db) == 0


def test_a_cancelled_slice_checkpoints_and_releases_its_lease_for_the_next_claim(
    kit: Migronaut,
    mongo_uri: str,
    db: Database[dict[str, Any]],
    migrations: Path,
) -> None:
    seed_users(db, 1_500)
    # One lane at a time (max_parallel 1): a second claim gets the slot only if it was released.
    write_background(migrations, batch_size=50, max_parallel=1, per_document_seconds=0.002)
    kit.runs.up()
    assert kit.background.coordinate(SPLIT_NAME).next == "process"
    token = CancelToken()
    results: list[SliceResult] = []
    worker = threading.Thread(
        target=lambda: results.append(
            kit.background.run_slice(SPLIT_NAME, slice_ms=600_000, cancel=token)
        )
    )
    worker.start()
    wait_until(lambda: db.users.count_documents({"_v": 2}) >= 100, 30, "the slice to work")

    cancelled_at = time.monotonic()
    token.cancel("worker shutting down")
    worker.join(timeout=30)
    assert not worker.is_alive()
    stopped_within = time.monotonic() - cancelled_at
    [stopped] = results
    assert stopped.outcome == "stopped"
    assert _leased(db) == 0
    partition = db.migronaut_background_partitions.find_one({})
    assert partition is not None and partition["status"] == "running"
    # Checkpointed: its cursor and counters cover exactly what it wrote.
    assert partition["counters"]["migrated"] == stopped.counters["migrated"]
    assert stopped.counters["migrated"] == db.users.count_documents({"_v": 2})

    with make_kit(mongo_uri, db, migrations, lock_ttl_seconds=LONG_TTL_SECONDS) as successor:
        claimed = successor.background.run_slice(SPLIT_NAME, slice_ms=200)
        claimed_within = time.monotonic() - cancelled_at
        assert claimed.outcome in ("yielded", "exhausted"), claimed
        assert claimed.counters["migrated"] > 0
        print(f"\nstopped {stopped_within:.2f} s and reclaimed {claimed_within:.2f} s after cancel")
        # Well before the 60 s TTL could have lapsed: the lease was given back, not reaped.
        assert claimed_within < LONG_TTL_SECONDS / 4
        status = kit_json.run(successor, SPLIT_NAME)
    assert status["totals"]["migrated"] == 1_500
    assert db.users.count_documents({"_v": 2}) == 1_500
