"""Three migrations in three processes under one write budget, measured by the server.

Each migration is an update pipeline that stamps every document it writes with
``$$NOW``: the server's clock at the write, one stamp per batch. Each runs in its
own ``migronaut background run`` process, all three configured with the same
``background_budget``. What the server recorded must keep to the budget (the
stamps, and ``serverStatus().metrics.document.updated``), split by the
migrations' ``priority``; the brake must stop all three within one batch each,
and its release must resume them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core import Migronaut
from migronaut_core.background.store.budget import BURST_S
from tests.support.background import make_kit, wait_until

RATE = 300
BATCH = 20
WINDOW_S = 6.0
#: name, collection, priority
MIGRATIONS = (
    ("20240101000000_low", "low", 1),
    ("20240101000001_mid", "mid", 2),
    ("20240101000002_high", "high", 3),
)
SEEDED = 4_000
#: Each migration's fraction of the documents written may miss its weight's by this
#: much: over ``WINDOW_S`` a migration writes its share ± one bucket share (its cap)
#: ± one batch (its debt); for the lightest (50/s: 300 ± 70 of ~1 800) that is
#: ±0.04 of the total; 0.06 leaves room for a process the machine schedules late.
SHARE_TOLERANCE = 0.06

MIGRATION = """
background = {{
    "collection": "{collection}",
    "from": 1,
    "to": 2,
    "batch_size": {batch},
    "max_parallel": 1,
    "priority": {priority},
    "health": False,
    "update": [{{"$set": {{"stamped_at": "$$NOW"}}}}],
}}
"""


def _write_files(migrations: Path) -> None:
    migrations.mkdir(parents=True, exist_ok=True)
    for name, collection, priority in MIGRATIONS:
        body = MIGRATION.format(collection=collection, batch=BATCH, priority=priority)
        (migrations / f"{name}.py").write_text(body)


def _seed(db: Database[dict[str, Any]]) -> None:
    for _, collection, _ in MIGRATIONS:
        db[collection].insert_many([{"_id": i, "_v": 1} for i in range(SEEDED)])


def _server_now(db: Database[dict[str, Any]]) -> datetime:
    return db.client.admin.command("serverStatus", repl=0, metrics=0)["localTime"]


def _docs_updated(db: Database[dict[str, Any]]) -> int:
    return int(db.client.admin.command("serverStatus")["metrics"]["document"]["updated"])


def _stamps(db: Database[dict[str, Any]], collection: str, since: datetime) -> list[datetime]:
    rows = db[collection].find({"stamped_at": {"$gt": since}}, {"stamped_at": 1, "_id": 0})
    return sorted(row["stamped_at"] for row in rows)


def _written(db: Database[dict[str, Any]], start: datetime, end: datetime) -> dict[str, int]:
    return {
        collection: db[collection].count_documents({"stamped_at": {"$gt": start, "$lte": end}})
        for _, collection, _ in MIGRATIONS
    }


def _batches(db: Database[dict[str, Any]], start: datetime, end: datetime) -> int:
    """Batches written in the window: one ``$$NOW`` per batch (an update pipeline's)."""
    return sum(
        len(db[c].distinct("stamped_at", {"stamped_at": {"$gt": start, "$lte": end}}))
        for _, c, _ in MIGRATIONS
    )


@pytest.fixture
def lanes(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """The three migrations registered, each driven by its own CLI process."""
    migrations = tmp_path / "migrations"
    _write_files(migrations)
    _seed(db)
    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up()
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "migronaut.toml").write_text(f"background_budget = {RATE}\n")
    env = {
        **os.environ,
        "MIGRONAUT_MONGODB_URI": mongo_uri,
        "MIGRONAUT_DATABASE": db.name,
        "MIGRONAUT_MIGRATIONS_DIR": str(migrations),
    }
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "migronaut_core.cli", "background", "run", name],
            cwd=workdir,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name, _, _ in MIGRATIONS
    ]
    try:
        yield processes
    finally:
        for process in processes:
            process.kill()
            process.wait(timeout=30)


def _all_writing(db: Database[dict[str, Any]], since: datetime) -> bool:
    return all(db[c].find_one({"stamped_at": {"$gt": since}}) for _, c, _ in MIGRATIONS)


def test_three_processes_keep_to_one_budget_shared_by_priority_and_brake(
    lanes: list[subprocess.Popen[bytes]],
    db: Database[dict[str, Any]],
    mongo_uri: str,
    tmp_path: Path,
) -> None:
    origin = _server_now(db) - timedelta(seconds=1)
    wait_until(lambda: _all_writing(db, origin), timeout=60, what="all three to write")
    # From here all three draw on the bucket (a second to settle into their shares).
    time.sleep(1.0)
    start, updated_before = _server_now(db), _docs_updated(db)
    wait_until(lambda: _server_now(db) >= start + timedelta(seconds=WINDOW_S), timeout=30)
    end, updated_after = _server_now(db), _docs_updated(db)
    window_s = (end - start).total_seconds()

    written = _written(db, start, end)
    total = sum(written.values())
    # Never more than the budget: its rate over the window, plus one bucket (the burst)
    # and one batch per migration (the debt a take may run into).
    ceiling = RATE * (window_s + BURST_S) + BATCH * len(MIGRATIONS)
    assert total <= ceiling, (written, window_s)
    for second in range(int(window_s)):
        low = start + timedelta(seconds=second)
        in_second = sum(_written(db, low, low + timedelta(seconds=1)).values())
        assert in_second <= RATE * (1 + BURST_S) + BATCH * len(MIGRATIONS), (second, in_second)
    # The budget is used, not only respected: all three keep drawing their shares.
    assert total >= 0.6 * RATE * window_s, (written, window_s)
    weights = sum(priority for _, _, priority in MIGRATIONS)
    for _, collection, priority in MIGRATIONS:
        share = written[collection] / total
        assert abs(share - priority / weights) <= SHARE_TOLERANCE, (collection, written)
    # The server's own counter of updated documents: the migrations' writes plus
    # migronaut's bookkeeping (per batch: the bucket, the partition's checkpoint; per
    # slice: the state), which is bounded by three updates per batch.
    counted = updated_after - updated_before
    assert total <= counted <= ceiling + 3 * (_batches(db, start, end) + len(MIGRATIONS)) + 10

    with make_kit(mongo_uri, db, tmp_path / "migrations") as kit:
        _brake_stops_and_release_resumes(kit, db)


def _brake_stops_and_release_resumes(kit: Migronaut, db: Database[dict[str, Any]]) -> None:
    view = kit.background.brake("load test", requested_by="tests")
    braked_at = _server_now(db)
    assert view.on and view.changed and view.reason == "load test"
    # Each lane writes at most the batch it had already passed its boundary for.
    wait_until(
        lambda: all(_held_by(kit, name) == "brake" for name, _, _ in MIGRATIONS),
        timeout=20,
        what="every migration to hold on the brake",
    )
    quiet = _server_now(db)
    wait_until(lambda: _server_now(db) >= quiet + timedelta(seconds=2), timeout=10)
    for _, collection, _ in MIGRATIONS:
        assert len(_stamps(db, collection, braked_at)) <= BATCH, collection
        assert _stamps(db, collection, quiet) == [], collection
    assert kit.background.brake_status().on

    released = kit.background.release(requested_by="tests", reason="done")
    assert released.changed and not kit.background.brake_status().on
    resumed_from = _server_now(db)
    wait_until(lambda: _all_writing(db, resumed_from), timeout=30, what="all three to resume")
    log = kit.background.brake_log()
    assert [(entry.action, entry.requested_by) for entry in log] == [
        ("brake", "tests"),
        ("release", "tests"),
    ]
    assert log[0].reason == "load test" and log[1].reason == "done"


def _held_by(kit: Migronaut, name: str) -> str | None:
    view = kit.background.status(name)
    assert view is not None
    return None if view.held_by is None else view.held_by.signal
