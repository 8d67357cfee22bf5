"""A driver frozen (SIGSTOP) mid-migration is found stalled only once nothing moved for the
stall time, another driver takes the migration over, and the thawed one counts nothing twice.

The frozen process is a whole driver (coordinator and lane, ``tests.support.lane_process``):
nothing records progress or a coordinator step while it is stopped, and its lease lapses
after the 2 s TTL, which is what the seeds' ``stallMs`` takeover is for.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core import Migronaut
from migronaut_core.errors import ConfigInvalidError
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, seed_users, wait_until, write_background

DOCUMENTS = 2_000
TTL_SECONDS = 2
STALL_SECONDS = 4


@pytest.fixture
def migrations(tmp_path: Path) -> Path:
    return tmp_path / "migrations"


@pytest.fixture
def kit(mongo_uri: str, db: Database[dict[str, Any]], migrations: Path) -> Iterator[Migronaut]:
    with make_kit(mongo_uri, db, migrations, lock_ttl_seconds=TTL_SECONDS) as kit:
        yield kit


def test_a_frozen_driver_is_taken_over_after_the_stall_time_and_nothing_counts_twice(
    kit: Migronaut, mongo_uri: str, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, DOCUMENTS)
    db.users.create_index([("_v", 1), ("_id", 1)])
    # 2 ms a document: one lane needs about 4 s, so the freeze lands mid-migration.
    write_background(migrations, batch_size=50, max_parallel=2, per_document_seconds=0.002)
    kit.runs.up()
    driver = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.lane_process",
            mongo_uri,
            db.name,
            str(migrations),
            SPLIT_NAME,
            "1",
            str(TTL_SECONDS),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: db.users.count_documents({"_v": 2}) >= 200, 60, "the driver to work")
        os.kill(driver.pid, signal.SIGSTOP)
        frozen_at = time.monotonic()
        migrated_at_freeze = db.users.count_documents({"_v": 2})
        assert kit.background.stalled(stall_seconds=STALL_SECONDS) == []  # its lease is live

        wait_until(
            lambda: kit.background.stalled(stall_seconds=STALL_SECONDS), 60, "the stall to show"
        )
        stalled_after = time.monotonic() - frozen_at
        print(f"\nfrozen with {migrated_at_freeze} migrated; stalled after {stalled_after:.1f} s")
        # Not before the stall time: a live lease or fresh progress would have kept it off.
        # (its last checkpoint came at most one batch, 0.1 s, before the freeze)
        assert stalled_after >= STALL_SECONDS - 0.5
        assert db.users.count_documents({"_v": 2}) == migrated_at_freeze < DOCUMENTS
        state = db.migronaut_background.find_one({"_id": SPLIT_NAME})
        assert state is not None and state["status"] == "running"

        # The takeover: another driver coordinates and works what the frozen one held.
        status = kit_json.run(kit, SPLIT_NAME, concurrency=2)
        assert status["status"] == "completed"
        assert kit.background.stalled(stall_seconds=STALL_SECONDS) == []
    finally:
        os.kill(driver.pid, signal.SIGCONT)
    out, _ = driver.communicate(timeout=60)
    # Thawed, the old driver finds its lease gone and the migration completed.
    assert driver.returncode == 0, out
    assert json.loads(out.strip().splitlines()[-1])["status"] == "completed"
    final = kit_json.status(kit, SPLIT_NAME)
    assert final is not None
    assert final["totals"]["migrated"] == DOCUMENTS
    assert db.users.count_documents({"_v": 2, "first": {"$exists": True}}) == DOCUMENTS


def test_a_stall_time_below_one_second_is_refused(kit: Migronaut) -> None:
    with pytest.raises(ConfigInvalidError) as refused:
        kit.background.stalled(stall_seconds=0.5)
    assert refused.value.context == {"key": "stall_seconds"}
