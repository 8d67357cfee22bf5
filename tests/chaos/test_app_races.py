"""Application writes injected at the worst moments of a batch: counted, never lost.

The injection rides on pymongo's command monitoring of the migration's own
client, so it lands exactly around the batch's ``update`` command on the wire,
whatever the engine's internals look like.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient, monitoring
from pymongo.collection import Collection
from pymongo.database import Database

from migronaut_core import Migronaut
from tests.support import kit_json
from tests.support.chaos import (
    NAME,
    TTL_SECONDS,
    LaneFleet,
    assert_each_document_migrated_once,
    register,
    seed,
    write_migration,
)


def app_update(users: Collection[dict[str, Any]], doc_id: int, first: str) -> None:
    """One guarded application write, in the shape the document has now."""
    doc = users.find_one({"_id": doc_id})
    assert doc is not None
    shaped = {"name": f"{first} Surname"} if doc["_v"] == 1 else {"first": first, "last": "Surname"}
    written = users.update_one(
        {"_id": doc_id, "rev": doc["rev"]}, {"$set": shaped, "$inc": {"rev": 1, "app_counter": 1}}
    )
    assert written.modified_count == 1


def run_watched(
    mongo_uri: str,
    db: Database[dict[str, Any]],
    migrations: Path,
    listener: monitoring.CommandListener,
) -> dict[str, Any]:
    """Register the migration (if not yet) and run it with ``listener`` on its client."""
    client: MongoClient[dict[str, Any]] = MongoClient(
        mongo_uri, tz_aware=True, event_listeners=[listener]
    )
    kit = Migronaut(
        client=client,
        uri=mongo_uri,
        database=db.name,
        migrations_dir=str(migrations),
        lock_ttl_seconds=TTL_SECONDS,
    )
    try:
        kit.runs.up()
        view: dict[str, Any] = kit_json.run(kit, NAME)
    finally:
        kit.close()
        client.close()
    return view


class BatchListener(monitoring.CommandListener):
    """A command listener that does nothing unless a subclass says so."""

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        pass

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def migrate_ten_in_one_batch(
    mongo_uri: str,
    db: Database[dict[str, Any]],
    tmp_path: Path,
    listener: monitoring.CommandListener,
) -> dict[str, Any]:
    """Migrate 10 seeded documents in one batch with ``listener`` on the migration's client."""
    migrations = tmp_path / "migrations"
    seed(db, 10)
    write_migration(migrations, batch_size=10, max_parallel=1, doc_seconds=0)
    return run_watched(mongo_uri, db, migrations, listener)


class AroundFirstBatch(BatchListener):
    """Writes like the application just before and just after the first batch's update."""

    def __init__(self, users: Collection[dict[str, Any]]) -> None:
        self.users = users
        self.updates = 0
        self._first: int | None = None

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "update" and event.command.get("update") == "users":
            self.updates += 1
            if self.updates == 1:
                self._first = event.request_id
                app_update(self.users, 0, "Before")  # this update of document 0 now misses

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        if event.request_id == self._first:
            app_update(self.users, 1, "After")  # document 1 was just migrated by the batch


@pytest.mark.slow
def test_a_write_just_after_the_batch_does_not_hide_a_migrated_document(
    mongo_uri: str,
    mongo_client: MongoClient[dict[str, Any]],
    db: Database[dict[str, Any]],
    tmp_path: Path,
) -> None:
    """One document of the batch conflicts; another is migrated, then the app writes it.

    The engine re-reads the batch to find the conflicts; by then the second
    document's revision has moved past the one the migration wrote. It was still
    migrated by this batch, exactly once, and the totals must say so.
    """
    listener = AroundFirstBatch(mongo_client[db.name].users)
    view = migrate_ten_in_one_batch(mongo_uri, db, tmp_path, listener)
    assert listener.updates == 2  # the batch, then the re-read conflict
    assert_each_document_migrated_once(db, view, 10)
    assert view["totals"].get("skipped", 0) == 0
    assert db.users.find_one({"_id": 0}, {"first": 1})["first"] == "Before"
    assert db.users.find_one({"_id": 1}, {"first": 1})["first"] == "After"


class StalledLaneWritesFirst(BatchListener):
    """Lands half of the first batch's own updates just before it, as a stalled lane would.

    A lane frozen after noting a batch, whose lease another lane then took over,
    sends that batch's writes when it wakes; its checkpoint is refused by the fence,
    so only the lane that holds the partition now can count those documents.
    """

    def __init__(self, db: Database[dict[str, Any]]) -> None:
        self.db = db
        self.updates = 0
        self.landed = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "update" and event.command.get("update") == "users":
            self.updates += 1
            if self.updates == 1:
                late = list(event.command["updates"])[:5]
                reply = self.db.command({"update": "users", "updates": late, "ordered": False})
                self.landed = int(reply["nModified"])


@pytest.mark.slow
def test_a_stalled_lanes_late_writes_are_counted_once(
    mongo_uri: str,
    mongo_client: MongoClient[dict[str, Any]],
    db: Database[dict[str, Any]],
    tmp_path: Path,
) -> None:
    listener = StalledLaneWritesFirst(mongo_client[db.name])
    view = migrate_ten_in_one_batch(mongo_uri, db, tmp_path, listener)
    assert listener.landed == 5  # the batch's own update then applied to 5 documents only
    assert_each_document_migrated_once(db, view, 10)
    assert view["totals"].get("skipped", 0) == 0


def migrate_as_the_lane_would(users: Collection[dict[str, Any]], doc_id: int) -> int:
    """The migration's write of one document, as a stalled lane sends it: guarded by
    version and revision, the transformed shape stamped one revision on."""
    doc = users.find_one({"_id": doc_id})
    assert doc is not None
    first, _, last = doc["name"].partition(" ")
    rewritten = {"_id": doc_id, "first": first, "last": last, "migrated_times": 1}
    stamped = {**rewritten, "_v": 2, "rev": doc["rev"] + 1}
    return users.replace_one({"_id": doc_id, "_v": 1, "rev": doc["rev"]}, stamped).modified_count


class StalledLaneWritesAroundRead(BatchListener):
    """Lands a stalled lane's writes of noted documents just before, or just after, the
    next holder's first read of the collection."""

    def __init__(self, users: Collection[dict[str, Any]], late: list[int], when: str) -> None:
        self.users = users
        self.late = late
        self.when = when
        self.landed = 0
        self._first: int | None = None

    def _land(self) -> None:
        self.landed = sum(migrate_as_the_lane_would(self.users, doc_id) for doc_id in self.late)

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        reads_users = event.command_name == "find" and event.command.get("find") == "users"
        if reads_users and self._first is None:
            self._first = event.request_id
            if self.when == "before":
                self._land()

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        if event.request_id == self._first and self.when == "after":
            self._land()


@pytest.mark.slow
@pytest.mark.parametrize("when", ["before", "after"])
def test_a_stalled_lanes_writes_around_the_next_holders_read_are_counted_once(
    mongo_uri: str,
    mongo_client: MongoClient[dict[str, Any]],
    db: Database[dict[str, Any]],
    tmp_path: Path,
    when: str,
) -> None:
    """Lane V dies right after the checkpoint that noted its next batch (ids 10-19);
    then, as if V had only stalled, half of that batch's writes land just before (or
    after) the next holder's first read. Before the read, the read no longer returns
    them and only the settle can count them; after it, only the holder's own write
    can (it finds them one revision on). Either way they are counted once.
    """
    migrations = tmp_path / "migrations"
    seed(db, 30)
    write_migration(migrations, batch_size=10, max_parallel=1, doc_seconds=0)
    register(mongo_uri, db.name, migrations)
    fleet = LaneFleet(mongo_uri, db.name, migrations, tmp_path)
    try:
        dead = fleet.spawn(die_after_checkpoint=1)
        assert dead.process.wait(timeout=60) == -signal.SIGKILL, fleet.outputs()
    finally:
        fleet.close()
    partition = db.migronaut_background_partitions.find_one({"inflight": {"$exists": True}})
    assert partition is not None
    noted = partition["inflight"]["ids"]
    assert noted == list(range(10, 20))
    assert db.users.count_documents({"_v": 2}) == 10  # the dead lane's first batch, no more

    listener = StalledLaneWritesAroundRead(mongo_client[db.name].users, noted[:5], when)
    view = run_watched(mongo_uri, db, migrations, listener)
    assert listener.landed == 5
    assert_each_document_migrated_once(db, view, 30)
