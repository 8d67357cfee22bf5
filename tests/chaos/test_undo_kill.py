"""An undo's lane killed with SIGKILL mid-undo: the undo completes exactly.

The undo of a journaled migration is a revert pass, so it is partitioned, leased,
checkpointed behind its fence and resumed like any pass: a lane process killed
after a batch's restores reached MongoDB and before its checkpoint, or at any
moment by a ``kill -9`` from outside, leaves a successor that settles the dead
lane's batch from its intent note. At the end every document still the
migration's write is restored exactly once (its revision moved on exactly twice:
the migration's write, the undo's), those the application changed since are
untouched, and the totals count each restore once.
"""

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

from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, write_background
from tests.support.chaos import TTL_SECONDS, poll, seed

TOTAL = 3_000
CHANGED = list(range(7, TOTAL, 300))

JOURNALED = """
import time

background = {
    "collection": "users",
    "from": 1,
    "to": 2,
    "batch_size": 100,
    "max_parallel": 2,
    "revision_field": "rev",
    "undo": "journal",
}


def migrate(doc, ctx):
    time.sleep(0.0005)
    first, _, last = doc.pop("name").partition(" ")
    return {**doc, "first": first, "last": last}
"""


def lane_command(mongo_uri: str, db_name: str, migrations: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tests.support.lane_process",
        mongo_uri,
        db_name,
        str(migrations),
        SPLIT_NAME,
        "2",
        str(TTL_SECONDS),
    ]


def restored(db: Database[dict[str, Any]]) -> int:
    return db.users.count_documents({"_v": 1})


@pytest.mark.slow
def test_an_undo_killed_mid_batch_and_from_outside_completes_exactly(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    migrations = tmp_path / "migrations"
    seed(db, TOTAL)
    seeded = {doc["_id"]: doc for doc in db.users.find()}
    write_background(migrations, body=JOURNALED)
    with make_kit(mongo_uri, db, migrations, lock_ttl_seconds=TTL_SECONDS) as kit:
        kit.runs.up()
        kit.background.run(SPLIT_NAME, concurrency=2)
        assert db.users.count_documents({"_v": 2}) == TOTAL
        for doc_id in CHANGED:
            db.users.update_one({"_id": doc_id}, {"$set": {"first": "App"}, "$inc": {"rev": 1}})
        kit.background.control(SPLIT_NAME, "undo")
    command = lane_command(mongo_uri, db.name, migrations)

    # Killed by itself after a batch's restores were written, before their checkpoint.
    for die_at in (3, 2):
        dying = subprocess.run(
            command,
            env={**os.environ, "MIGRONAUT_TEST_DIE_AT_CHECKPOINT": str(die_at)},
            stdout=subprocess.DEVNULL,
            check=False,
            timeout=120,
        )
        assert dying.returncode == -signal.SIGKILL
    recorded = sum(
        p.get("counters", {}).get("migrated", 0) for p in db.migronaut_background_partitions.find()
    )
    assert restored(db) > recorded  # the dead lanes' last restores were written, not recorded

    # Killed from outside at whatever point it has reached.
    before = restored(db)
    victim = subprocess.Popen(command, stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        assert poll(lambda: restored(db) >= before + 300, timeout=60)
        os.killpg(victim.pid, signal.SIGKILL)
    finally:
        victim.wait(timeout=30)
    assert victim.returncode == -signal.SIGKILL
    time.sleep(0.5)  # a bulk write the server was applying when the client died lands now
    assert restored(db) < TOTAL - len(CHANGED)  # killed mid-undo, not after it

    finished = subprocess.run(command, stdout=subprocess.DEVNULL, check=False, timeout=180)
    assert finished.returncode == 0

    for doc in db.users.find():
        if doc["_id"] in CHANGED:
            assert (doc["_v"], doc["first"], doc["rev"]) == (2, "App", 2), doc["_id"]
        else:
            assert doc == {**seeded[doc["_id"]], "rev": 2}, doc["_id"]
    with make_kit(mongo_uri, db, migrations) as kit:
        view = kit_json.status(kit, SPLIT_NAME)
    assert view is not None
    assert (view["status"], view["direction"], view["undo"]) == ("completed", "revert", "journal")
    assert view["totals"]["migrated"] == TOTAL - len(CHANGED)
    assert view["failed_documents"] == len(CHANGED)
    assert sorted(sample["id"] for sample in view["failed_document_samples"]) == CHANGED
