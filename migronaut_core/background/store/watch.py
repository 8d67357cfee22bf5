"""The drift watcher's rows: one per watched collection, in the watch collection.

:class:`WatchStore` is the only reader and writer of that collection. A row is
written only by its collection's current leader, fenced by its lock
(:class:`Fence`); :func:`watch_view` is what status shows of a row (never the
resume token nor the fencing token: only the cluster time its position is at).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pymongo import ReturnDocument
from pymongo.collection import Collection
from pymongo.database import Database

from migronaut_core.bson_values import json_safe

Document = dict[str, Any]

#: How recent a streaming row's ``updated_at`` must be to count as a live leader.
STREAMING_FRESH_SECONDS = 60.0
#: The counters a row keeps (summed over every leader).
WATCH_COUNTERS = ("events", "upgraded", "errors", "skipped")
#: Hex characters of a resume token's ``_data`` that hold its cluster time (type byte + 8).
_HEAD_CHARS = 18


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

    def take(self, collection: str, fence: Fence, leader: Mapping[str, Any]) -> Document:
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
        return row

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

    def statuses(self, collection: str | None = None) -> list[Document]:
        """The rows (one, or all by name) without their resume tokens, with freshness.

        ``fresh`` is judged by the server's clock: the row was written within
        :data:`STREAMING_FRESH_SECONDS`. ``resume_saved`` says whether a position
        is saved, ``resume_head`` is the cluster-time prefix of its token (only
        that: :func:`token_time` reads it) and ``now`` the server's clock.
        """
        match: Document = {} if collection is None else {"_id": collection}
        token_data = "$resume_token._data"
        return list(
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


def _resume_view(row: Mapping[str, Any]) -> dict[str, Any]:
    """Where a new leader would resume: saved or not, the position's time, how far behind now."""
    at = token_time(row.get("resume_head")) if row.get("resume_saved") else None
    now = row.get("now")
    lag = None
    if at is not None and isinstance(now, datetime):
        lag = round(max(0.0, (aware(now) - at).total_seconds()), 1)
    return {"saved": bool(row.get("resume_saved")), "at": json_safe(at), "lag_seconds": lag}


def aware(value: datetime) -> datetime:
    """``value`` with its time zone: a naive one (a client without ``tz_aware``) is UTC."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def watch_view(row: Mapping[str, Any]) -> dict[str, Any]:
    """A watcher row as status shows it: never the resume token nor the fencing token.

    ``resume``: whether a position is saved, its cluster time (``at``) and
    ``lag_seconds`` behind the server's clock — what a successor would replay.
    """
    leader = row.get("leader") or {}
    counters = {key: 0 for key in WATCH_COUNTERS}
    counters.update({key: int(value) for key, value in (row.get("counters") or {}).items()})
    return {
        "collection": row["_id"],
        "state": row.get("state", "starting"),
        "edges": list(row.get("edges") or []),
        "target": row.get("target"),
        "leader": {
            "host": leader.get("host"),
            "pid": leader.get("pid"),
            "owner": leader.get("owner"),
            "since": json_safe(leader.get("since")),
        }
        if leader
        else None,
        "counters": counters,
        "last_event_at": json_safe(row.get("last_event_at")),
        "last_error": row.get("last_error"),
        "updated_at": json_safe(row.get("updated_at")),
        "fresh": bool(row.get("fresh", False)),
        "resume": _resume_view(row),
    }
