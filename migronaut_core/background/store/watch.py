"""The drift watcher's rows: one per watched collection, in the watch collection.

:class:`WatchStore` is the only reader and writer of that collection. A row is
written only by its collection's current leader, fenced by its lock
(:class:`Fence`). Status reads the rows as stored (:class:`WatchStatusRow`) but
never their resume token, only the cluster time its position is at
(:func:`resume_position`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Required, cast

from pymongo import ReturnDocument
from pymongo.collection import Collection
from pymongo.database import Database

from migronaut_core.background.store.documents import WatchDocument
from migronaut_core.clock import aware

Document = dict[str, Any]

#: How recent a streaming row's ``updated_at`` must be to count as a live leader.
STREAMING_FRESH_SECONDS = 60.0
#: The counters a row keeps (summed over every leader).
WATCH_COUNTERS = ("events", "upgraded", "errors", "skipped")
#: Hex characters of a resume token's ``_data`` that hold its cluster time (type byte + 8).
_HEAD_CHARS = 18


class WatchStatusRow(WatchDocument, total=False):
    """A row as :meth:`WatchStore.statuses` reads it: its resume token left out, its
    position described (``resume_saved``, ``resume_head``), ``now`` the server's clock
    and ``fresh`` whether it was written within :data:`STREAMING_FRESH_SECONDS`."""

    resume_saved: Required[bool]
    resume_head: Required[str | None]
    now: Required[datetime]
    fresh: Required[bool]


@dataclass(frozen=True, slots=True)
class Fence:
    """Proof of leadership for row writes: the lock's owner id and fencing token."""

    owner: str
    token: int


class WatchStore:
    """The watcher rows: one per collection, written only by its current leader.

    A row holds the leader's state, who leads (host, pid, owner), the edges it
    serves, counters, the last event's time and the resume token. Every write of a
    leader is fenced by its lock's owner and token, so a leader that lost its lock
    cannot move the position its successor resumes from. Status reads never
    fetch the token from the server.
    """

    def __init__(self, db: Database[Document], name: str) -> None:
        self.rows: Collection[Document] = db[name]

    def take(self, collection: str, fence: Fence, leader: Mapping[str, Any]) -> WatchDocument:
        """Become the row's leader (the caller holds the lock); return the row."""
        row = self.rows.find_one_and_update(
            {"_id": collection},
            [
                {
                    "$set": {
                        "leader": {"$literal": {"owner": fence.owner, **leader}},
                        "fence": fence.token,
                        "state": "starting",
                    }
                },
                {"$set": {"leader.since": "$$NOW", "updated_at": "$$NOW"}},
                {"$unset": "last_error"},
            ],
            upsert=True,
            return_document=ReturnDocument.AFTER,
        )
        assert row is not None  # an upsert returns the document after it
        return cast("WatchDocument", row)

    def save(
        self,
        collection: str,
        fence: Fence,
        *,
        fields: Mapping[str, Any] | None = None,
        counters: Mapping[str, int] | None = None,
        unset: Sequence[str] = (),
    ) -> bool:
        """Write as the leader; False when the row has another leader now."""
        update: Document = {"$currentDate": {"updated_at": True}}
        if fields:
            update["$set"] = dict(fields)
        if counters:
            update["$inc"] = {f"counters.{key}": value for key, value in counters.items() if value}
            if not update["$inc"]:
                del update["$inc"]
        if unset:
            update["$unset"] = dict.fromkeys(unset, "")
        result = self.rows.update_one(
            {"_id": collection, "leader.owner": fence.owner, "fence": fence.token}, update
        )
        return result.matched_count == 1

    def statuses(self, collection: str | None = None) -> list[WatchStatusRow]:
        """The rows (one, or all by name) without their resume tokens, with freshness.

        ``fresh`` is judged by the server's clock: the row was written within
        :data:`STREAMING_FRESH_SECONDS`. ``resume_saved`` says whether a position
        is saved, ``resume_head`` is the cluster-time prefix of its token (only
        that: :func:`token_time` reads it) and ``now`` the server's clock.
        """
        match: Document = {} if collection is None else {"_id": collection}
        token_data = "$resume_token._data"
        rows = list(
            self.rows.aggregate(
                [
                    {"$match": match},
                    {
                        "$addFields": {
                            "resume_saved": {"$eq": [{"$type": "$resume_token"}, "object"]},
                            "resume_head": {
                                "$cond": [
                                    {"$eq": [{"$type": token_data}, "string"]},
                                    {"$substrBytes": [token_data, 0, _HEAD_CHARS]},
                                    None,
                                ]
                            },
                            "now": "$$NOW",
                        }
                    },
                    {"$project": {"resume_token": 0}},
                    {
                        "$addFields": {
                            "fresh": {
                                "$gt": [
                                    "$updated_at",
                                    {
                                        "$subtract": [
                                            "$$NOW",
                                            int(STREAMING_FRESH_SECONDS * 1000),
                                        ]
                                    },
                                ]
                            }
                        }
                    },
                    {"$sort": {"_id": 1}},
                ]
            )
        )
        return cast("list[WatchStatusRow]", rows)

    def streaming_collections(self) -> list[str]:
        """Collections a live leader streams right now (its row fresh by the server's clock).

        What a poll in ``stream`` drift mode may leave alone.
        """
        return [
            row["_id"]
            for row in self.statuses()
            if row.get("state") == "streaming" and row["fresh"]
        ]


def token_time(head: Any) -> datetime | None:
    """The cluster time a resume token's position is at, from its first bytes; None: unreadable.

    A token's ``_data`` (MongoDB 4.2+) starts with a timestamp type byte (``82``)
    and the 8-byte timestamp (seconds, then increment), hex-encoded.
    """
    if not isinstance(head, str) or len(head) < _HEAD_CHARS or not head.startswith("82"):
        return None
    try:
        seconds = int(head[2:10], 16)
    except ValueError:
        return None
    return datetime.fromtimestamp(seconds, UTC)


def resume_position(row: WatchStatusRow) -> tuple[datetime | None, float | None]:
    """Where a new leader would resume: the cluster time of the saved position and how
    many seconds it is behind the server's clock (None, None: none saved, or unreadable)."""
    at = token_time(row.get("resume_head")) if row.get("resume_saved") else None
    now = row.get("now")
    lag = None
    if at is not None and isinstance(now, datetime):
        lag = round(max(0.0, (aware(now) - at).total_seconds()), 1)
    return at, lag
