"""What the fault-injection tests share: the migration, the seed, lane processes, checks.

The migration splits ``name`` into ``first`` and ``last`` and counts in
``migrated_times`` how often the transform was applied to a document: a
document rewritten twice would show 2 (and a second application would fail,
since ``name`` is gone). The application's writes are checked separately
(:mod:`tests.support.app_writer`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pymongo.database import Database

from migronaut_core import Migronaut
from tests.support import kit_json
from tests.support.chaos_lane import (
    CHECKPOINT_PAUSE_ENV,
    DIE_AFTER_CHECKPOINT_ENV,
    FENCE_LOG_ENV,
    FREEZE_AT_CHECKPOINT_ENV,
)

if TYPE_CHECKING:
    from tests.support.app_writer import AppWriter

NAME = "20240101000000_split_names"
REPO_ROOT = Path(__file__).resolve().parents[2]
#: Lease and coordinator-lock TTL of every chaos lane: short, so takeovers are quick.
TTL_SECONDS = 2

MIGRATION = """
import time

background = {{
    "collection": "users",
    "from": 1,
    "to": 2,
    "batch_size": {batch_size},
    "max_parallel": {max_parallel},
    "revision_field": "rev",
    # The application inserts old-shape documents throughout: each pass takes them.
    "max_passes": 50,
    {extra}
}}


def migrate(doc, ctx):
    time.sleep({doc_seconds})
    first, _, last = doc.pop("name").partition(" ")
    times = doc.get("migrated_times", 0) + 1
    return {{**doc, "first": first, "last": last, "migrated_times": times}}
"""

#: The same migration as an update pipeline: the server splits and counts.
MIGRATION_UPDATE = """
background = {{
    "collection": "users",
    "from": 1,
    "to": 2,
    "batch_size": {batch_size},
    "max_parallel": {max_parallel},
    "revision_field": "rev",
    "max_passes": 50,
    {extra}
    "update": [
        {{"$set": {{"_parts": {{"$split": ["$name", " "]}}}}}},
        {{"$set": {{
            "first": {{"$arrayElemAt": ["$_parts", 0]}},
            "last": {{"$arrayElemAt": ["$_parts", 1]}},
            "migrated_times": {{"$add": [{{"$ifNull": ["$migrated_times", 0]}}, 1]}},
        }}}},
        {{"$unset": ["name", "_parts"]}},
    ],
}}
"""

#: The modes the chaos scenarios run in: a Python transform and an update pipeline.
MODES = ("python", "update")


def write_migration(
    directory: Path,
    *,
    batch_size: int,
    max_parallel: int,
    doc_seconds: float,
    extra: str = "",
    mode: str = "python",
    name: str = NAME,
) -> Path:
    """Write the chaos migration file; ``doc_seconds`` is the transform's cost per document.

    ``mode="update"`` writes it as an update pipeline (:data:`MIGRATION_UPDATE`),
    kept at the same pace by a throttle pause of ``doc_seconds`` per document of
    a batch, so a fault still lands while the lanes work. ``name``: the file's name
    (the Airflow cluster tests give each scenario its own DAG).
    """
    directory.mkdir(parents=True, exist_ok=True)
    template = MIGRATION
    if mode == "update":
        template = MIGRATION_UPDATE
        pause_ms = round(doc_seconds * batch_size * 1000)
        extra = f'"throttle": {{"pause_ms": {pause_ms}}},\n    {extra}'
    source = template.format(
        batch_size=batch_size, max_parallel=max_parallel, doc_seconds=doc_seconds, extra=extra
    )
    path = directory / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    return path


def seed(db: Database[dict[str, Any]], count: int) -> None:
    """Old-shape users ``0..count-1`` at revision 0, and the version index."""
    docs = [{"_id": i, "name": f"First{i} Last{i}", "_v": 1, "rev": 0} for i in range(count)]
    for offset in range(0, count, 10_000):
        db.users.insert_many(docs[offset : offset + 10_000], ordered=False)
    db.users.create_index([("_v", 1), ("_id", 1)])


def make_kit(uri: str, db_name: str, migrations: Path) -> Migronaut:
    return Migronaut(
        uri=uri, database=db_name, migrations_dir=str(migrations), lock_ttl_seconds=TTL_SECONDS
    )


def register(uri: str, db_name: str, migrations: Path) -> None:
    with make_kit(uri, db_name, migrations) as kit:
        kit.runs.up()


# -- lane processes ------------------------------------------------------------------------


@dataclass
class Lane:
    """One lane process, its output file and fence log."""

    process: subprocess.Popen[bytes]
    output: Path
    fence_log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def stopped(self) -> bool:
        """Whether the process is stopped by a signal (state ``T`` in ``/proc``)."""
        stat = Path(f"/proc/{self.pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] == "T"


@dataclass
class LaneFleet:
    """Lane processes of one migration, started and signalled by a test.

    Each runs in its own session so a signal reaches it and nothing else;
    :meth:`close` kills whatever is left, so a failed test leaves no lane behind.
    """

    uri: str
    db_name: str
    migrations: Path
    workdir: Path
    concurrency: int = 1
    checkpoint_pause: float = 0.0
    lanes: list[Lane] = field(default_factory=list)

    def spawn(self, *, freeze_at_checkpoint: int = 0, die_after_checkpoint: int = 0) -> Lane:
        """Start a lane; it stops itself before, or dies after, that batch checkpoint."""
        index = len(self.lanes)
        output = self.workdir / f"lane-{index}.out"
        fence_log = self.workdir / f"lane-{index}.fence.jsonl"
        env = {
            **os.environ,
            FENCE_LOG_ENV: str(fence_log),
            CHECKPOINT_PAUSE_ENV: str(self.checkpoint_pause),
            FREEZE_AT_CHECKPOINT_ENV: str(freeze_at_checkpoint),
            DIE_AFTER_CHECKPOINT_ENV: str(die_after_checkpoint),
        }
        with output.open("wb") as sink:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.support.chaos_lane",
                    self.uri,
                    self.db_name,
                    str(self.migrations),
                    NAME,
                    str(self.concurrency),
                    str(TTL_SECONDS),
                ],
                cwd=REPO_ROOT,
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        lane = Lane(process, output, fence_log)
        self.lanes.append(lane)
        return lane

    def kill(self, lane: Lane, sig: int = signal.SIGKILL) -> None:
        os.killpg(lane.pid, sig)
        if sig == signal.SIGKILL:
            lane.process.wait()

    def wait_all(self, timeout: float) -> dict[int, int]:
        """Wait for every lane still running; their exit codes by pid."""
        deadline = time.monotonic() + timeout
        codes = {}
        for lane in self.lanes:
            remaining = max(0.1, deadline - time.monotonic())
            codes[lane.pid] = lane.process.wait(timeout=remaining)
        return codes

    def close(self) -> None:
        for lane in self.lanes:
            if lane.alive():
                with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
                    os.killpg(lane.pid, signal.SIGCONT)
                    os.killpg(lane.pid, signal.SIGKILL)
                lane.process.wait()

    def fence_entries(self) -> list[dict[str, Any]]:
        return read_fence_logs(lane.fence_log for lane in self.lanes)

    def outputs(self) -> str:
        """Every lane's output, for assertion messages."""
        return "\n".join(
            f"--- lane {lane.pid} (exit {lane.process.poll()}) ---\n"
            + lane.output.read_text(errors="replace")[-3000:]
            for lane in self.lanes
        )


def read_fence_logs(paths: Iterable[Path]) -> list[dict[str, Any]]:
    entries = []
    for path in paths:
        if path.exists():
            for line in path.read_text().splitlines():
                if line.strip():
                    with contextlib.suppress(json.JSONDecodeError):  # a lane killed mid-line
                        entries.append(json.loads(line))
    return entries


def owner_pattern(pid: int) -> dict[str, Any]:
    """Matches the lease owner of any lane of process ``pid`` (``host:pid:random``)."""
    return {"$regex": f":{pid}:"}


def held_partition(db: Database[dict[str, Any]], pid: int) -> dict[str, Any] | None:
    """A partition process ``pid`` leases mid-batch (its intent is noted), or None."""
    return db.migronaut_background_partitions.find_one(
        {"lease.owner": owner_pattern(pid), "inflight": {"$exists": True}}
    )


def lanes_mid_batch(db: Database[dict[str, Any]]) -> int:
    """Partitions whose lane noted a batch's ids and has not checkpointed it yet."""
    return db.migronaut_background_partitions.count_documents(
        {"lease": {"$exists": True}, "inflight": {"$exists": True}}
    )


def rewritten_in_flight(db: Database[dict[str, Any]], partition: dict[str, Any]) -> int:
    """How many of a partition's in-flight batch are already at the new version."""
    ids = (partition.get("inflight") or {}).get("ids") or []
    return db.users.count_documents({"_id": {"$in": ids}, "_v": 2}) if ids else 0


def poll(predicate: Callable[[], Any], *, timeout: float, interval: float = 0.02) -> Any:
    """``predicate()``'s first truthy value, or None after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return None


def migrated_count(db: Database[dict[str, Any]]) -> int:
    return db.users.count_documents({"_v": 2})


# -- the end state -------------------------------------------------------------------------


def status_of(uri: str, db_name: str, migrations: Path, name: str = NAME) -> dict[str, Any]:
    with make_kit(uri, db_name, migrations) as kit:
        view = kit_json.status(kit, name)
    assert view is not None
    return dict(view)


def drive_remaining(uri: str, db_name: str, migrations: Path, name: str = NAME) -> bool:
    """Reopen and finish the migration if old-shape documents reappeared after it completed.

    The application may insert one after the last pass counted none; the design
    answers with a reopen (``retry`` of a completed migration). True if one was needed.
    """
    with make_kit(uri, db_name, migrations) as kit:
        if kit.db.users.count_documents({"_v": 1}, limit=1) == 0:
            return False
        kit.background.control(name, "retry", reason="the application inserted after the last pass")
        kit.background.run(name, concurrency=2)
    return True


def assert_each_document_migrated_once(
    db: Database[dict[str, Any]], view: dict[str, Any], expected_total: int
) -> None:
    """Every document at the new version, transformed exactly once, and totals that say so."""
    assert view["status"] == "completed", view
    assert db.users.count_documents({}) == expected_total
    assert db.users.count_documents({"_v": {"$ne": 2}}) == 0
    assert db.users.count_documents({"name": {"$exists": True}}) == 0
    twice = db.users.count_documents({"migrated_times": {"$ne": 1}})
    assert twice == 0, f"{twice} document(s) were not transformed exactly once"
    totals = view["totals"]
    assert totals.get("migrated") == expected_total, totals
    assert totals.get("failed", 0) == 0, totals
    accounted = sum(totals.get(key, 0) for key in ("migrated", "skipped", "conflicts", "failed"))
    assert totals.get("scanned") == accounted, totals
    assert view["failed_documents"] == 0, view["failed_document_samples"]


def assert_nothing_lost(
    db: Database[dict[str, Any]],
    uri: str,
    migrations: Path,
    app: AppWriter,
    seeded: int,
    name: str = NAME,
) -> dict[str, Any]:
    """The end of every chaos scenario: each seeded and inserted document migrated
    once, totals to match, every acknowledged application write kept. Returns the
    migration's status."""
    view = status_of(uri, db.name, migrations, name)
    assert_each_document_migrated_once(db, view, seeded + len(app.inserted))
    app.assert_no_write_lost(db, seeded)
    return view
