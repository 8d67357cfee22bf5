"""The only mongod of a replica set is killed (SIGKILL) mid-migration and started again.

A dedicated single-node set, not the session's shared server. It stays down
longer than the lanes' server selection timeout (10 s), so the driver's own
retry gives up and the failures reach the engine: lanes count the failed slice,
back off and try again. The server comes back on the same port and dbpath,
recovers from its journal (majority-acknowledged writes are journaled first, so
none is lost), elects itself, and the lanes go on from their fenced
checkpoints. A lane process that gave up while the server was away is run
again; the test records whether that was needed.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from migronaut_dev.errors import ServerUnavailableError
from migronaut_dev.mongod import LocalReplicaSet, find_mongod, start_replica_set
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
DB_NAME = "chaos_restart"
#: Seconds between the kill and the restart: past the lanes' 10 s server selection timeout.
DOWN_SECONDS = 11.0


@pytest.fixture
def dedicated_server() -> Iterator[LocalReplicaSet]:
    """A single-node replica set of this test's own, in a temporary directory."""
    try:
        find_mongod()
    except ServerUnavailableError as exc:
        pytest.fail(f"ServerUnavailableError: {exc.message}", pytrace=False)
    replica_set = start_replica_set(1)
    yield replica_set
    replica_set.stop()


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_lanes_survive_their_mongod_being_restarted(
    dedicated_server: LocalReplicaSet, tmp_path: Path, mode: str
) -> None:
    server = dedicated_server
    uri = server.uri
    client: MongoClient[dict[str, Any]] = MongoClient(uri, w="majority")
    db = client[DB_NAME]
    migrations = tmp_path / "migrations"
    seed(db, TOTAL)
    write_migration(migrations, batch_size=200, max_parallel=4, doc_seconds=0.0005, mode=mode)
    register(uri, DB_NAME, migrations)
    fleet = LaneFleet(uri, DB_NAME, migrations, tmp_path, concurrency=2)
    app = AppWriter(uri, DB_NAME, TOTAL)
    rerun = 0
    try:
        app.start()
        fleet.spawn()
        fleet.spawn()
        assert poll(lambda: migrated_count(db) >= TOTAL // 3, timeout=90), fleet.outputs()
        assert poll(lambda: lanes_mid_batch(db), timeout=10, interval=0.005)
        before_kill = migrated_count(db)
        killed_at = time.monotonic()
        server.kill(0, signal.SIGKILL)
        time.sleep(DOWN_SECONDS)
        server.restart(0)
        server.wait_for_primary(timeout=60)
        back_at = time.monotonic()
        after_restart = poll(lambda: migrated_count(db), timeout=30)
        assert poll(lambda: migrated_count(db) > after_restart, timeout=60), fleet.outputs()
        resumed_at = time.monotonic()
        assert poll(lambda: app.acknowledged_between(back_at, time.monotonic()) > 20, timeout=60)
        app.stop()
        codes = fleet.wait_all(timeout=180)
        if set(codes.values()) != {0}:
            rerun = 1
            fleet.spawn()
            codes = fleet.wait_all(timeout=180)
    finally:
        app.stop()
        fleet.close()
    assert before_kill < TOTAL, "the migration was over before the restart"
    backed_off = fleet.outputs().count("slice failed")
    assert backed_off or rerun, "no failure reached the lanes: the outage was too short"
    assert fleet.lanes[-1].process.returncode == 0, fleet.outputs()
    assert app.acknowledged_between(0, killed_at) > 20
    reopened = drive_remaining(uri, DB_NAME, migrations)
    view = assert_nothing_lost(db, uri, migrations, app, TOTAL)
    print(
        f"down {back_at - killed_at:.1f}s, progress again after {resumed_at - killed_at:.1f}s; "
        f"migrated before kill={before_kill} lane exits={codes} rerun={rerun} "
        f"failed slices={backed_off} app_writes={app.acknowledged} "
        f"uncertain={app.uncertain} inserted={len(app.inserted)} reopened={reopened} "
        f"totals={view['totals']}"
    )
    client.close()
