"""The converge log: one entry per index converge created or dropped.

:class:`ConvergeLog` is the only reader and writer of that collection
(``<background_collection>_converge_log``). An entry says what (collection, index
name, key pattern, ``created`` or ``dropped``), when (the server's clock) and by
whom (the actor, host and pid). Prune drops only an index this log says converge
created and has not dropped since (:meth:`ConvergeLog.created`): never one a user
made. Its reads return the entries as stored (:class:`ConvergeLogDocument`).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Sequence
from typing import Any, Literal, cast

from bson import ObjectId
from pymongo import ASCENDING, DESCENDING
from pymongo.collection import Collection
from pymongo.database import Database

from migronaut_core.background.store.documents import ConvergeLogDocument
from migronaut_core.changelog import Actor

__all__ = ["ConvergeAction", "ConvergeLog"]

Document = dict[str, Any]
_NEWEST_FIRST = [("at", DESCENDING), ("_id", DESCENDING)]
ConvergeAction = Literal["created", "dropped"]


class ConvergeLog:
    """The converge log of one database; appended to, never rewritten.

    It holds one entry per index created or dropped, so it stays small: read
    without an index of its own (nothing for ``ensure_indexes = false`` to check).
    """

    def __init__(self, db: Database[Document], name: str) -> None:
        self.entries: Collection[Document] = db[name]

    def record(
        self,
        *,
        collection: str,
        action: ConvergeAction,
        name: str,
        key: Sequence[tuple[str, Any]],
        actor: Actor,
    ) -> None:
        """Append one entry, stamped with the server's clock."""
        self._insert(ObjectId(), _entry(collection, action, name, key, actor))

    def record_creation(
        self, *, collection: str, name: str, key: Sequence[tuple[str, Any]], actor: Actor
    ) -> bool:
        """Record that ``name`` was created, unless a concurrent converge already did.

        Several converges that found the index missing all call ``createIndexes``,
        and the server's replies cannot tell which one built it (measured: under
        a concurrent drop, none may say so). So the entry itself is the claim: its
        ``_id`` names the index's latest entry before it, and only one converge can
        insert a given ``_id``. Whether this one was first: True when it recorded.
        """
        latest = self.entries.find_one(
            {"collection": collection, "index": name}, sort=_NEWEST_FIRST
        )
        if latest is not None and latest.get("action") == "created":
            return False  # a concurrent converge recorded this creation already
        after = None if latest is None else latest["_id"]
        claim = {"created": collection, "index": name, "after": after}
        return self._insert(claim, _entry(collection, "created", name, key, actor))

    def _insert(self, entry_id: Any, entry: Document) -> bool:
        """Insert ``entry`` under ``entry_id`` stamped with the server's clock; an entry
        already there is left as it is. Whether it was inserted."""
        fresh = {
            **{k: {"$literal": v} for k, v in entry.items()},
            "_id": {"$literal": entry_id},
            "at": "$$NOW",
        }
        absent = {"$eq": [{"$type": "$at"}, "missing"]}
        result = self.entries.update_one(
            {"_id": entry_id},
            [{"$replaceWith": {"$cond": [absent, fresh, "$$ROOT"]}}],
            upsert=True,
        )
        return result.upserted_id is not None

    def created(self) -> list[ConvergeLogDocument]:
        """The indexes converge created and has not dropped since: each one's latest entry."""
        return _entries(
            self.entries.aggregate(
                [
                    {"$sort": {"at": ASCENDING, "_id": ASCENDING}},
                    {
                        "$group": {
                            "_id": {"collection": "$collection", "index": "$index"},
                            "last": {"$last": "$$ROOT"},
                        }
                    },
                    {"$replaceRoot": {"newRoot": "$last"}},
                    {"$match": {"action": "created"}},
                    {"$sort": {"collection": ASCENDING, "index": ASCENDING}},
                ]
            )
        )

    def read(self, collection: str | None = None, limit: int = 100) -> list[ConvergeLogDocument]:
        """The latest ``limit`` entries (of one collection, or all), newest first."""
        match: Document = {} if collection is None else {"collection": collection}
        return _entries(self.entries.find(match).sort(_NEWEST_FIRST).limit(limit))


def _entries(found: Iterable[Document]) -> list[ConvergeLogDocument]:
    """Entries as stored (a cast: the log holds only what :meth:`ConvergeLog._insert` wrote)."""
    return cast("list[ConvergeLogDocument]", list(found))


def _entry(
    collection: str,
    action: ConvergeAction,
    name: str,
    key: Sequence[tuple[str, Any]],
    actor: Actor,
) -> Document:
    return {
        "collection": collection,
        "action": action,
        "index": name,
        "key": dict(key),
        "by": {**actor.fields(), "host": socket.gethostname(), "pid": os.getpid()},
    }
