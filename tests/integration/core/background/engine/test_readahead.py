"""Two ``update_many`` in flight per update-pipeline lane, watched on the wire.

What users rely on, with a lane keeping a second batch's write in flight while it
checkpoints the first: every write's ids were durably noted before it was sent
(so ``kill -9`` anywhere leaves a note the next holder settles exactly), and no
checkpoint moves the cursor past a batch whose write has not returned (a
checkpoint never records what is not written), and a write stays noted until it is
checkpointed. The lane does keep two writes
outstanding at once: that is the speed this buys (docs/performance.md).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pymongo import MongoClient, monitoring
from pymongo.database import Database

from migronaut_core import Migronaut
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, seed_users, write_background
from tests.support.servers import fail_point

TOTAL = 3_000
BATCH = 100
USERS = "users"
PARTITIONS = "migronaut_background_partitions"


def _ids_of(query: dict[str, Any]) -> list[Any]:
    """The ``_id: {$in}`` list of a batch's ``update_many`` filter."""
    for branch in query.get("$and", [query]):
        ids = branch.get("_id")
        if isinstance(ids, dict) and "$in" in ids:
            return list(ids["$in"])
    raise AssertionError(f"not a batch's filter: {query}")


@dataclass
class Wire:
    """The lane's batch writes and partition writes, in the order the client saw them."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    #: request id -> the ids of a batch's write sent and not yet returned.
    writing: dict[int, list[Any]] = field(default_factory=dict)
    most_in_flight: int = 0
    #: The ids of the last note the server acknowledged (empty: no note).
    noted: set[Any] = field(default_factory=set)
    #: request id -> the note a partition write carries (None: it leaves the note alone).
    notes_sent: dict[int, set[Any] | None] = field(default_factory=dict)
    writes_sent: int = 0
    problems: list[str] = field(default_factory=list)


class Watcher(monitoring.CommandListener):
    def __init__(self) -> None:
        self.wire = Wire()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name != "update":
            return
        target = event.command.get("update")
        (update,) = list(event.command["updates"])
        with self.wire.lock:
            if target == USERS:
                self._batch_sent(event.request_id, _ids_of(update["q"]))
            elif target == PARTITIONS:
                self._partition_write_sent(event.request_id, update["u"])

    def _batch_sent(self, request_id: int, ids: list[Any]) -> None:
        wire = self.wire
        unnoted = set(ids) - wire.noted
        if unnoted:
            wire.problems.append(f"a write of {len(unnoted)} ids not noted before it was sent")
        wire.writing[request_id] = ids
        wire.writes_sent += 1
        wire.most_in_flight = max(wire.most_in_flight, len(wire.writing))

    def _partition_write_sent(self, request_id: int, update: dict[str, Any]) -> None:
        wire = self.wire
        sets = update.get("$set", {})
        cursor = sets.get("cursor")
        if cursor and "after" in cursor:
            unfinished = [ids for ids in wire.writing.values() if min(ids) <= cursor["after"]]
            if unfinished:
                wire.problems.append(f"a checkpoint past {cursor['after']} before its write ended")
        note: set[Any] | None = None
        if "inflight" in sets:
            note = set(sets["inflight"]["ids"])
        elif "inflight" in update.get("$unset", {}):
            note = set()
        if note is not None and any(not set(ids) <= note for ids in wire.writing.values()):
            wire.problems.append("a note dropped a write still in flight")
        wire.notes_sent[request_id] = note

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        with self.wire.lock:
            self.wire.writing.pop(event.request_id, None)
            note = self.wire.notes_sent.pop(event.request_id, None)
            if note is not None and event.reply.get("n") == 1:
                self.wire.noted = note

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        with self.wire.lock:
            self.wire.writing.pop(event.request_id, None)
            self.wire.notes_sent.pop(event.request_id, None)


def test_a_lane_keeps_two_noted_writes_in_flight_and_checkpoints_only_written_batches(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    migrations = tmp_path / "migrations"
    seed_users(db, TOTAL)
    db.users.create_index([("_v", 1), ("_id", 1)])
    write_background(migrations, update=True, batch_size=BATCH, max_parallel=1)
    watcher = Watcher()
    client: MongoClient[dict[str, Any]] = MongoClient(
        mongo_uri, tz_aware=True, event_listeners=[watcher]
    )
    kit = Migronaut(client=client, uri=mongo_uri, database=db.name, migrations_dir=str(migrations))
    # Each batch's write is held 150 ms on the server, so whether the lane sends the
    # next one before this one returns does not hang on how busy the machine is
    # (batches of 100 are rewritten faster than a loaded lane reads and notes the next).
    slow_writes = {
        "failCommands": ["update"],
        "namespace": f"{db.name}.{USERS}",
        "blockConnection": True,
        "blockTimeMS": 150,
    }
    try:
        kit.runs.up()
        with fail_point(db.client, slow_writes, "alwaysOn"):
            view: dict[str, Any] = kit_json.run(kit, SPLIT_NAME, concurrency=1)
    finally:
        kit.close()
        client.close()
    wire = watcher.wire
    assert view["status"] == "completed"
    assert view["totals"]["migrated"] == TOTAL == db.users.count_documents({"_v": 2})
    assert wire.problems == []
    assert wire.writes_sent >= TOTAL // BATCH
    assert wire.most_in_flight == 2
    assert not wire.noted  # the last checkpoint left no note behind
