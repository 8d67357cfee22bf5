"""An application that keeps writing to the collection while a fault is injected.

It does what the engine expects of an application (docs/background.md): every
update is guarded by the revision it read and increments it, so a migration
write and an application write can never both apply to the same revision. It
updates in whichever shape it finds the document (``name`` while old-shape,
``first``/``last`` once migrated), bumps a per-document ``app_counter``, and
inserts new old-shape documents.

A write is *acknowledged* when MongoDB said it applied (``w: majority``, so a
failover cannot roll it back). A write that raised has an unknown outcome; each
document has one writer thread, the only one that sets its ``app_seq``, which
reads it back (majority read, once a primary answers) to learn whether it
applied. At the end, :meth:`AppWriter.assert_no_write_lost` checks every
acknowledged write against the documents.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pymongo import MongoClient
from pymongo.database import Database
from pymongo.errors import DuplicateKeyError, PyMongoError
from pymongo.read_concern import ReadConcern

#: Inserted documents get ids from here up, above every seeded one.
INSERT_BASE = 10_000_000
#: How long an outcome may take to become readable again (a restart, an election).
READ_BACK_SECONDS = 90.0


@dataclass
class Expected:
    """What a document must hold after the run: the app's last write to it."""

    app_counter: int
    first: str
    last: str


@dataclass
class AppWriter:
    """Threads of application writes against ``users``, as fast as the server answers."""

    uri: str
    db_name: str
    seeded: int
    #: Writer threads; each owns the documents whose ``_id`` is its index modulo this.
    threads: int = 2
    #: One insert every this many operations of a thread.
    insert_every: int = 6
    #: Seconds a thread sleeps between operations.
    pause: float = 0.0
    seed: int = 7
    expected: dict[int, Expected] = field(default_factory=dict)
    inserted: list[int] = field(default_factory=list)
    acknowledged_at: list[float] = field(default_factory=list)
    uncertain: int = 0
    refused: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)
    _crashes: list[BaseException] = field(default_factory=list)

    def start(self) -> AppWriter:
        self._threads = [
            threading.Thread(target=self._run, args=(index,), name=f"app-{index}", daemon=True)
            for index in range(self.threads)
        ]
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        """Stop writing; re-raise whatever crashed a writer."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=READ_BACK_SECONDS + 30)
            assert not thread.is_alive(), "an application writer did not stop"
        if self._crashes:
            raise AssertionError("an application writer crashed") from self._crashes[0]

    @property
    def acknowledged(self) -> int:
        return len(self.acknowledged_at)

    def acknowledged_between(self, start: float, end: float) -> int:
        return sum(1 for at in self.acknowledged_at if start <= at <= end)

    def _run(self, index: int) -> None:
        client: MongoClient[dict[str, Any]] = MongoClient(
            self.uri, w="majority", serverSelectionTimeoutMS=30_000, appname="chaos-app"
        )
        try:
            self._write_until_stopped(client[self.db_name], index)
        except BaseException as exc:
            self._crashes.append(exc)
        finally:
            client.close()

    def _write_until_stopped(self, db: Database[dict[str, Any]], index: int) -> None:
        """One thread's writes: its own share of the documents, so it alone writes them."""
        rng = random.Random(self.seed + index)
        mine: list[int] = []
        step = 0
        while not self._stop.is_set():
            step += 1
            sequence = step * self.threads + index
            if step % self.insert_every == 0:
                self._insert(db, sequence, mine)
            else:
                self._update(db, self._pick(rng, index, mine), sequence)
            if self.pause:
                time.sleep(self.pause)

    def _pick(self, rng: random.Random, index: int, mine: list[int]) -> int:
        if mine and rng.random() < 0.2:
            return rng.choice(mine)
        return rng.randrange(index, self.seeded, self.threads)

    def _update(self, db: Database[dict[str, Any]], doc_id: int, sequence: int) -> None:
        try:
            doc = db.users.find_one({"_id": doc_id}, {"_v": 1, "rev": 1})
        except PyMongoError:
            return  # nothing written yet: no outcome to learn
        if doc is None:
            return
        label, last = f"App{sequence}", f"Surname{doc_id}"
        shaped = (
            {"name": f"{label} {last}"} if doc.get("_v") == 1 else {"first": label, "last": last}
        )
        update = {"$set": {**shaped, "app_seq": sequence}, "$inc": {"app_counter": 1, "rev": 1}}
        guard = {"_id": doc_id, "rev": doc["rev"]}
        if self._applied(
            lambda: db.users.update_one(guard, update).modified_count == 1,
            lambda: (self._read_back(db, doc_id) or {}).get("app_seq") == sequence,
        ):
            before = self.expected.get(doc_id)
            count = (before.app_counter if before else 0) + 1
            self.expected[doc_id] = Expected(count, label, last)
        else:
            with self._lock:
                self.refused += 1

    def _insert(self, db: Database[dict[str, Any]], sequence: int, mine: list[int]) -> None:
        doc_id = INSERT_BASE + sequence
        label, last = f"Ins{sequence}", f"Surname{doc_id}"
        doc = {"_id": doc_id, "name": f"{label} {last}", "_v": 1, "rev": 0}

        def insert() -> bool:
            with contextlib.suppress(DuplicateKeyError):  # a retried insert that had applied
                db.users.insert_one(dict(doc))
            return True

        if self._applied(insert, lambda: self._read_back(db, doc_id) is not None):
            mine.append(doc_id)
            self.inserted.append(doc_id)
            self.expected[doc_id] = Expected(0, label, last)

    def _applied(self, write: Callable[[], bool], landed: Callable[[], bool]) -> bool:
        try:
            applied = write()
        except PyMongoError:
            with self._lock:
                self.uncertain += 1
            applied = landed()
        if applied:
            self.acknowledged_at.append(time.monotonic())
        return applied

    def _read_back(self, db: Database[dict[str, Any]], doc_id: int) -> dict[str, Any] | None:
        users = db.users.with_options(read_concern=ReadConcern("majority"))
        deadline = time.monotonic() + READ_BACK_SECONDS
        while True:
            try:
                return users.find_one({"_id": doc_id})
            except PyMongoError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def assert_no_write_lost(self, db: Database[dict[str, Any]], seeded: int) -> None:
        """Each document holds the application's last acknowledged write to it, migrated."""
        assert self.acknowledged > 0
        found = {doc["_id"]: doc for doc in db.users.find({}, {"rev": 0})}
        assert len(found) == seeded + len(self.inserted)
        lost = []
        for doc_id, doc in found.items():
            want = self.expected.get(doc_id) or Expected(0, f"First{doc_id}", f"Last{doc_id}")
            got = Expected(doc.get("app_counter", 0), doc.get("first", ""), doc.get("last", ""))
            if got != want:
                lost.append((doc_id, want, got))
        assert not lost, f"{len(lost)} application write(s) lost, e.g. {lost[:3]}"
