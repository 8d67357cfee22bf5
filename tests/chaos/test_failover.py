"""The primary of a three-member replica set is killed (SIGKILL) mid-migration.

Lanes in two processes and an application keep going through the election:
operations in flight fail or are retried by the driver on the new primary,
lanes back off and resume. Writes are majority-acknowledged (MongoDB's default
on a replica set), so nothing acknowledged is rolled back with the old primary.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from migronaut_dev.mongod import LocalReplicaSet
from tests.support.app_writer import AppWriter
from tests.support.chaos import (
    MODES,
    LaneFleet,
    assert_nothing_lost,
    drive_remaining,
    lanes_mid_batch,
    migrated_count,
    poll,
    register,
    seed,
    write_migration,
)

TOTAL = 20_000
DB_NAME = "chaos_failover"


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_lanes_ride_out_the_primary_being_killed(
    replica_set_3: Callable[..., LocalReplicaSet], tmp_path: Path, mode: str
) -> None:
    replica_set = replica_set_3(election_timeout_ms=1500)
    uri = replica_set.uri
    client: MongoClient[dict[str, Any]] = MongoClient(uri, w="majority")
    db = client[DB_NAME]
    migrations = tmp_path / "migrations"
    seed(db, TOTAL)
    write_migration(migrations, batch_size=200, max_parallel=4, doc_seconds=0.0005, mode=mode)
    register(uri, DB_NAME, migrations)
    fleet = LaneFleet(uri, DB_NAME, migrations, tmp_path, concurrency=2)
    app = AppWriter(uri, DB_NAME, TOTAL)
    try:
        app.start()
        fleet.spawn()
        fleet.spawn()
        assert poll(lambda: migrated_count(db) >= TOTAL // 3, timeout=90), fleet.outputs()
        assert poll(lambda: lanes_mid_batch(db), timeout=10, interval=0.005)
        old_primary = replica_set.wait_for_primary()
        killed_at = time.monotonic()
        before_kill = migrated_count(db)
        replica_set.kill(old_primary, signal.SIGKILL)
        new_primary = replica_set.wait_for_primary(timeout=60)
        elected_at = time.monotonic()
        after_election = poll(lambda: migrated_count(db), timeout=30)
        assert poll(lambda: migrated_count(db) > after_election, timeout=60), fleet.outputs()
        resumed_at = time.monotonic()
        assert poll(lambda: app.acknowledged_between(elected_at, time.monotonic()) > 20, timeout=60)
        app.stop()
        codes = fleet.wait_all(timeout=180)
    finally:
        app.stop()
        fleet.close()
    assert new_primary != old_primary
    assert before_kill < TOTAL, "the migration was over before the failover"
    assert set(codes.values()) == {0}, fleet.outputs()
    assert app.acknowledged_between(0, killed_at) > 20
    reopened = drive_remaining(uri, DB_NAME, migrations)
    view = assert_nothing_lost(db, uri, migrations, app, TOTAL)
    retries = fleet.outputs().count("retrying")
    print(
        f"killed member {old_primary}, member {new_primary} primary after "
        f"{elected_at - killed_at:.1f}s, progress again after {resumed_at - killed_at:.1f}s; "
        f"migrated before kill={before_kill} lane retries={retries} "
        f"app_writes={app.acknowledged} uncertain={app.uncertain} inserted={len(app.inserted)} "
        f"reopened={reopened} totals={view['totals']}"
    )
    client.close()
