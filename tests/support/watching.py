"""Helpers for the drift watcher tests: old-shape users, the leader, an old release writing."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from pymongo.database import Database

from migronaut_core import Migronaut
from tests.support import kit_json


def old_shape(i: int) -> dict[str, Any]:
    """A ``users`` document as the release before the split wrote it."""
    return {"_id": i, "_v": 1, "name": f"Oldname{i} Oldsurname{i}"}


def unresumable_token(real: Mapping[str, Any]) -> dict[str, str]:
    """``real`` (a change event's resume token) moved one second back: a token no event
    has, from which the server refuses to resume (code 280), as when history is gone.

    An epoch-old token is refused too, but only after the server has scanned the whole
    oplog: many seconds once a long test run has filled it.
    """
    data = str(real["_data"])
    seconds = int(data[2:10], 16)
    return {"_data": f"{data[:2]}{seconds - 1:08X}00000001{data[18:]}"}


def leader_pid(kit: Migronaut, collection: str = "users") -> int | None:
    """The pid of the process streaming ``collection``; None while nobody leads."""
    row = kit_json.watch_status(kit, collection)
    if row is None or row["state"] != "streaming" or row["leader"] is None:
        return None
    return int(row["leader"]["pid"])


@contextmanager
def old_release_writing(db: Database[dict[str, Any]], *, first_key: int) -> Iterator[list[int]]:
    """An old release inserting old-shape users every 50 ms until the block ends.

    Yields the keys written so far (the list grows while the block runs).
    """
    written: list[int] = []
    stop = threading.Event()

    def keep_writing() -> None:
        while not stop.wait(0.05):
            key = first_key + len(written)
            db.users.insert_one(old_shape(key))
            written.append(key)

    writer = threading.Thread(target=keep_writing, daemon=True)
    writer.start()
    try:
        yield written
    finally:
        stop.set()
        writer.join(5)
