"""The converge log: one entry per index converge created or dropped.

:class:`ConvergeLog` is the only reader and writer of that collection
(``<background_collection>_converge_log``). An entry says what (collection, index
name, key pattern, ``created`` or ``dropped``), when (the server's clock) and by
whom (the actor, host and pid). Prune drops only an index this log says converge
created and has not dropped since (:meth:`ConvergeLog.created`): never one a user
made. :func:`converge_entry_view` is what callers show of an entry.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from bson import ObjectId
from pymongo import ASCENDING, DESCENDING
from pymongo.collection import Collection
from pymongo.database import Database

from migronaut_core.bson_values import json_safe
from migronaut_core.changelog import Actor

__all__ = ["ConvergeAction", "ConvergeLog", "converge_entry_view"]

Document = dict[str, Any]
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
        entry = {
            "collection": collection,
            "action": action,
            "index": name,
            "key": dict(key),
            "by": {**actor.fields(), "host": socket.gethostname(), "pid": os.getpid()},
        }
        self.entries.update_one(
            {"_id": ObjectId()},
            [{"$set": {**{k: {"$literal": v} for k, v in entry.items()}, "at": "$$NOW"}}],
            upsert=True,
        )

    def created(self) -> list[Document]:
        """The indexes converge created and has not dropped since: each one's latest entry."""
        return list(
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

    def read(self, collection: str | None = None, limit: int = 100) -> list[Document]:
        """The latest ``limit`` entries (of one collection, or all), newest first."""
        match: Document = {} if collection is None else {"collection": collection}
        return list(
            self.entries.find(match).sort([("at", DESCENDING), ("_id", DESCENDING)]).limit(limit)
        )


def converge_entry_view(entry: Mapping[str, Any]) -> dict[str, Any]:
    """An entry as callers show it: ``collection, action, index, key, at, by``."""
    return {
        "collection": entry.get("collection"),
        "action": entry.get("action"),
        "index": entry.get("index"),
        "key": json_safe(dict(entry.get("key") or {})),
        "at": json_safe(entry.get("at")),
        "by": dict(entry.get("by") or {}),
    }
