"""Lanes killed with SIGKILL mid-slice: the migration still completes with exact totals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from tests.integration.background_support import SPLIT_NAME, make_kit, seed_users, write_background

SLOWISH = """
import time

background = {"collection": "users", "from": 1, "to": 2, "batch_size": 100, "max_parallel": 4}

def migrate(doc, ctx):
    time.sleep(0.0005)
    first, _, last = doc.pop("name").partition(" ")
    return {**doc, "first": first, "last": last}
"""

TTL_SECONDS = 2


def start_lane(mongo_uri: str, db_name: str, migrations: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.integration.lane_process",
            mongo_uri,
            db_name,
            str(migrations),
            SPLIT_NAME,
            "2",
            str(TTL_SECONDS),
        ],
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )


@pytest.mark.slow
def test_repeatedly_killed_lanes_finish_with_exact_totals(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    total = 20_000
    migrations = tmp_path / "migrations"
    seed_users(db, total)
    db.users.create_index([("_v", 1), ("_id", 1)])
    write_background(migrations, body=SLOWISH)
    with make_kit(mongo_uri, db, migrations, lock_ttl_seconds=TTL_SECONDS) as kit:
        kit.up()
    survivor = start_lane(mongo_uri, db.name, migrations)
    kills = 0
    try:
        while kills < 6:
            victim = start_lane(mongo_uri, db.name, migrations)
            before = db.users.count_documents({"_v": 2})
            deadline = time.monotonic() + 30
            # Kill it once it has rewritten something, i.e. mid-slice.
            while db.users.count_documents({"_v": 2}) - before < 300:
                if victim.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.02)
            if victim.poll() is not None:
                break  # the work ran out before this kill
            os.killpg(victim.pid, signal.SIGKILL)
            victim.wait()
            kills += 1
        assert survivor.wait(timeout=240) == 0
    finally:
        for process in (survivor,):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    assert kills >= 3
    with make_kit(mongo_uri, db, migrations, lock_ttl_seconds=TTL_SECONDS) as kit:
        view = kit.background_status(SPLIT_NAME)
    assert view["status"] == "completed"
    assert db.users.count_documents({"_v": 2}) == total
    assert view["totals"]["migrated"] == total


@pytest.mark.slow
def test_a_lane_killed_between_its_writes_and_its_checkpoint_is_counted_exactly(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    total = 2_000
    migrations = tmp_path / "migrations"
    seed_users(db, total)
    write_background(migrations, body=SLOWISH.replace('"max_parallel": 4', '"max_parallel": 1'))
    with make_kit(mongo_uri, db, migrations, lock_ttl_seconds=TTL_SECONDS) as kit:
        kit.up()
    command = [
        sys.executable,
        "-m",
        "tests.integration.lane_process",
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
        view = kit.background_status(SPLIT_NAME)
    assert view["status"] == "completed"
    assert db.users.count_documents({"_v": 2}) == total
    assert view["totals"]["migrated"] == total
