"""Connections dropped mid-migration: on the batch read, the write, the checkpoint, the claim
and a transaction's commit, several times each, while an application writes.

The server closes the connection of the migration's own commands (``failCommand``
with ``closeConnection``, aimed at the kit's ``appName`` and, where the command
names one, at one collection), twice in a row each time, so the driver's single
retry fails too and the error reaches the engine. Lanes run in two processes. A
dropped connection is the network's fault, not the partition's: it must be ridden
out — by the transaction's retry, the lane's back-off and a new slice, the
coordinator's retry — without spending the partition's ``max_slice_failures``
(one here, so a single dropped connection counted against it would fail the run).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.database import Database

from tests.support.app_writer import AppWriter
from tests.support.chaos import (
    LaneFleet,
    assert_nothing_lost,
    drive_remaining,
    migrated_count,
    poll,
    register,
    seed,
    write_migration,
)
from tests.support.network_faults import FaultInjector, NetworkFault

TOTAL = 8_000
#: Each fault is injected this many times over one run.
ROUNDS = 3
PARTITIONS = "migronaut_background_partitions"
#: One failed slice fails a partition; short slices, so lanes claim often.
BUDGET = '"max_slice_failures": 1, "slice_ms": 1000,'
TRANSACTION = '"transaction": {"timeout_ms": 10000, "max_retries": 8},'


def faults_for(database: str, *, transactional: bool) -> list[NetworkFault]:
    """The faults of one run; the commit only where batches commit transactions."""
    users, partitions = f"{database}.users", f"{database}.{PARTITIONS}"
    faults = [
        NetworkFault("batch read", ("find", "aggregate"), users, times=4),
        NetworkFault("write", ("update",), users, times=4),
        # Checkpoints, and the intent notes, renewals and releases beside them.
        NetworkFault("checkpoint", ("update",), partitions, times=4),
        NetworkFault("claim", ("findAndModify",), partitions, times=4),
    ]
    if transactional:
        faults.append(NetworkFault("commit", ("commitTransaction",), None, times=4))
    return faults


def all_exited(fleet: LaneFleet) -> bool:
    return not any(lane.alive() for lane in fleet.lanes)


def seeded_left(db: Database[dict[str, Any]]) -> int:
    """Seeded documents not migrated yet (the application's inserts aside)."""
    return db.users.count_documents({"_id": {"$lt": TOTAL}, "_v": 1})


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["plain", "transactional"])
def test_dropped_connections_are_retried_and_nothing_is_lost(
    mode: str,
    mongo_uri: str,
    mongo_client: MongoClient[dict[str, Any]],
    db: Database[dict[str, Any]],
    tmp_path: Path,
) -> None:
    transactional = mode == "transactional"
    faults = faults_for(db.name, transactional=transactional)
    migrations = tmp_path / "migrations"
    seed(db, TOTAL)
    write_migration(
        migrations,
        batch_size=100,
        max_parallel=4,
        doc_seconds=0.001,
        extra=BUDGET + (TRANSACTION if transactional else ""),
    )
    register(mongo_uri, db.name, migrations)
    fleet = LaneFleet(mongo_uri, db.name, migrations, tmp_path, concurrency=2)
    app = AppWriter(mongo_uri, db.name, TOTAL)
    injector = FaultInjector(mongo_client, faults, rounds=ROUNDS)
    started = time.monotonic()
    try:
        app.start()
        fleet.spawn()
        fleet.spawn()
        assert poll(lambda: migrated_count(db), timeout=60), fleet.outputs()
        injector.start()
        # Lanes that all gave up leave nothing for the faults to hit: their exits tell why.
        assert poll(lambda: injector.finished() or all_exited(fleet), timeout=120)
        left_at_last_fault = seeded_left(db)
        injector.stop()
        app.stop()
        codes = fleet.wait_all(timeout=120)
    finally:
        injector.stop()
        app.stop()
        fleet.close()
    outputs = fleet.outputs()
    assert set(codes.values()) == {0}, outputs
    for fault in faults:
        assert injector.dropped(fault.label) >= fault.times * ROUNDS, (fault, injector.fired)
    assert left_at_last_fault > 0, "the seeded documents were all migrated before the last fault"
    # Plain batches have no transaction to retry in: dropped connections cut slices off.
    cut_off = outputs.count("a slice was cut off")
    assert transactional or cut_off > 0, "no dropped connection reached a lane mid-slice"
    reopened = drive_remaining(mongo_uri, db.name, migrations)
    view = assert_nothing_lost(db, mongo_uri, migrations, app, TOTAL)
    print(
        f"{mode}: {len(injector.fired)} faults from {injector.fired[0].at - started:.1f}s "
        f"to {injector.fired[-1].at - started:.1f}s ({left_at_last_fault} seeded documents "
        f"left), run {time.monotonic() - started:.1f}s; slices cut off={cut_off}, "
        f"lane retries={outputs.count('retrying')} "
        f"app_writes={app.acknowledged} inserted={len(app.inserted)} reopened={reopened} "
        f"totals={view['totals']}"
    )
