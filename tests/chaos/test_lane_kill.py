"""Lane processes killed with SIGKILL mid-batch: the migration completes, each document once.

The repeated-kill test runs four lane processes over one 50,000-document
migration while an application writes, and keeps killing whichever lane is in
the middle of a batch — half of the kills at a random point of the batch, half
after its writes reached MongoDB and before its checkpoint (the lanes pause
there to widen that window). Every kill is checked against the victim's own log
of fenced writes: its intent for the batch was noted and never checkpointed.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from tests.support import kit_json
from tests.support.app_writer import AppWriter
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.chaos import (
    MODES,
    Lane,
    LaneFleet,
    assert_nothing_lost,
    drive_remaining,
    held_partition,
    poll,
    read_fence_logs,
    register,
    rewritten_in_flight,
    seed,
    write_migration,
)

TOTAL = 50_000
LANES = 4
KILLS = 20
#: Seconds a lane sleeps between a batch's writes and its checkpoint.
CHECKPOINT_PAUSE = 0.06

SLOWISH = """
import time

background = {"collection": "users", "from": 1, "to": 2, "batch_size": 100, "max_parallel": 4}

def migrate(doc, ctx):
    time.sleep(0.0005)
    first, _, last = doc.pop("name").partition(" ")
    return {**doc, "first": first, "last": last}
"""

TTL_SECONDS = 2


@dataclass(frozen=True)
class Kill:
    """One SIGKILL: the partition its victim was working and what the batch had written."""

    pid: int
    partition: Any
    batch: tuple[Any, ...]
    mid_batch: bool
    rewritten: int


def kill_mid_batch(
    db: Database[dict[str, Any]], fleet: LaneFleet, after_writes: bool, rng: random.Random
) -> Kill | None:
    """Kill a lane whose batch is under way; None when no lane got that far in time."""
    found = poll(lambda: _lane_in_batch(db, fleet), timeout=15)
    if found is None:
        return None
    lane, partition = found
    if after_writes:
        written = poll(lambda: _written_not_recorded(db, lane), timeout=2, interval=0.005)
        partition = written or partition
    else:
        time.sleep(rng.uniform(0, 0.1))
    fleet.kill(lane)
    time.sleep(0.5)  # a bulk write the server was applying when the client died lands now
    return _judge(db, lane, partition)


def _lane_in_batch(
    db: Database[dict[str, Any]], fleet: LaneFleet
) -> tuple[Lane, dict[str, Any]] | None:
    for lane in fleet.lanes:
        if lane.alive():
            partition = held_partition(db, lane.pid)
            if partition is not None:
                return lane, partition
    return None


def _written_not_recorded(db: Database[dict[str, Any]], lane: Lane) -> dict[str, Any] | None:
    partition = held_partition(db, lane.pid)
    if partition is not None and rewritten_in_flight(db, partition) > 0:
        return partition
    return None


def _notes_intent(entry: dict[str, Any]) -> bool:
    """A fenced write that noted the ids of a batch about to be written."""
    return entry["method"] == "record_intent" or entry.get("intent", 0) > 0


def _judge(db: Database[dict[str, Any]], lane: Lane, seen: dict[str, Any]) -> Kill:
    """Was the victim mid-batch? Its last fenced write under that lease must be its intent."""
    after = db.migronaut_background_partitions.find_one({"_id": seen["_id"]}) or {}
    token = seen["lease"]["token"]
    writes = [
        entry
        for entry in read_fence_logs([lane.fence_log])
        if entry["token"] == token and entry["method"] != "renew"
    ]
    intent_open = bool(writes) and writes[-1]["ok"] and _notes_intent(writes[-1])
    still_held = (after.get("lease") or {}).get("token") == token and "inflight" in after
    batch = tuple((after.get("inflight") or {}).get("ids") or ())
    return Kill(
        pid=lane.pid,
        partition=seen["_id"],
        batch=batch,
        mid_batch=intent_open and still_held,
        rewritten=rewritten_in_flight(db, after) if still_held else 0,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "total", "kills"),
    # An update pipeline, paced like the transform, over fewer documents and kills:
    # its batches are the same ranges, noted and settled the same way.
    [("python", TOTAL, KILLS), ("update", 20_000, 8)],
)
def test_repeated_kills_over_one_migration_leave_each_document_migrated_once(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path, mode: str, total: int, kills: int
) -> None:
    migrations = tmp_path / "migrations"
    seed(db, total)
    write_migration(migrations, batch_size=200, max_parallel=6, doc_seconds=0.0015, mode=mode)
    register(mongo_uri, db.name, migrations)
    fleet = LaneFleet(mongo_uri, db.name, migrations, tmp_path, checkpoint_pause=CHECKPOINT_PAUSE)
    app = AppWriter(mongo_uri, db.name, total)
    rng = random.Random(11)
    killed: list[Kill] = []
    try:
        for _ in range(LANES):
            fleet.spawn()
        app.start()
        chaos_started = time.monotonic()
        for attempt in range(2 * kills):
            if sum(kill.mid_batch for kill in killed) >= kills:
                break
            kill = kill_mid_batch(db, fleet, after_writes=attempt % 2 == 0, rng=rng)
            if kill is None:
                break  # the work ran out
            killed.append(kill)
            fleet.spawn()
        chaos_ended = time.monotonic()
        app.stop()
        codes = fleet.wait_all(timeout=180)
    finally:
        app.stop()
        fleet.close()
    reopened = drive_remaining(mongo_uri, db.name, migrations)
    mid_batch = [kill for kill in killed if kill.mid_batch]
    torn = [kill for kill in mid_batch if kill.rewritten > 0]
    assert len(mid_batch) >= kills, (len(killed), len(mid_batch), fleet.outputs())
    assert len(torn) >= kills // 4, [kill.rewritten for kill in mid_batch]
    survivors = [code for code in codes.values() if code != -signal.SIGKILL]
    assert survivors and all(code == 0 for code in survivors), fleet.outputs()
    # Each torn batch was counted by whoever next held its partition, from the intent note.
    settled = sum(
        entry.get("migrated", 0)
        for entry in fleet.fence_entries()
        if entry["method"] == "settle_inflight" and entry["ok"]
    )
    left_behind = {(kill.partition, kill.batch): kill.rewritten for kill in mid_batch}
    assert settled == sum(left_behind.values())
    assert app.acknowledged_between(chaos_started, chaos_ended) > 200
    view = assert_nothing_lost(db, mongo_uri, migrations, app, total)
    print(
        f"kills={len(killed)} mid_batch={len(mid_batch)} torn={len(torn)} settled={settled} "
        f"over {chaos_ended - chaos_started:.0f}s "
        f"app_writes={app.acknowledged} inserted={len(app.inserted)} passes={view['pass']} "
        f"reopened={reopened} totals={view['totals']}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_a_lane_killed_between_its_writes_and_its_checkpoint_is_counted_exactly(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path, mode: str
) -> None:
    """For an update pipeline: killed between its ``update_many`` and its checkpoint."""
    total = 2_000
    migrations = tmp_path / "migrations"
    seed_users(db, total)
    if mode == "update":
        write_background(migrations, update=True, batch_size=100, max_parallel=1)
    else:
        write_background(migrations, body=SLOWISH.replace('"max_parallel": 4', '"max_parallel": 1'))
    with make_kit(mongo_uri, db, migrations, lock_ttl_seconds=TTL_SECONDS) as kit:
        kit.runs.up()
    command = [
        sys.executable,
        "-m",
        "tests.support.lane_process",
        mongo_uri,
        db.name,
        str(migrations),
        SPLIT_NAME,
        "1",
        str(TTL_SECONDS),
    ]
    for die_at in (3, 2):
        dying = subprocess.run(
            command,
            env={**os.environ, "MIGRONAUT_TEST_DIE_AT_CHECKPOINT": str(die_at)},
            stdout=subprocess.DEVNULL,
            check=False,
            timeout=120,
        )
        assert dying.returncode == -signal.SIGKILL
    written = db.users.count_documents({"_v": 2})
    recorded = sum(
        p.get("counters", {}).get("migrated", 0) for p in db.migronaut_background_partitions.find()
    )
    assert written > recorded  # the dead lanes' last batches were written, not recorded
    finished = subprocess.run(command, stdout=subprocess.DEVNULL, check=False, timeout=120)
    assert finished.returncode == 0
    with make_kit(mongo_uri, db, migrations) as kit:
        view = kit_json.status(kit, SPLIT_NAME)
    assert view["status"] == "completed"
    assert db.users.count_documents({"_v": 2}) == total
    assert view["totals"]["migrated"] == total
