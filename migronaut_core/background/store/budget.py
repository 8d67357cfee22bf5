"""The target's write budget and brake: one document, updated on the server's clock.

Every process and machine running background migrations against a database
shares the document ``{_id: "target"}`` of ``<prefix>_budget``:

- ``members``: one sub-bucket per migration drawing on the budget
  (:class:`~.documents.BudgetMemberDocument`). :meth:`BudgetStore.take` refills
  every active one and takes a batch's documents from the caller's in one
  ``findOneAndUpdate`` whose pipeline reads ``$$NOW``: the server's clock, so
  no process's clock matters and a take costs one round trip.
- ``brake``: set by an operator, every lane holds while it is there (or until
  its ``until`` has passed); ``brake_log`` keeps the last
  :data:`MAX_BRAKE_LOG` settings and releases (who, when, why, until).

The fairness rule (what :meth:`BudgetStore.take` computes): a migration is
active while it took within :data:`ACTIVE_MS` (counted from when its lane has
waited off the debt of its last take: ``seen``); at each take, ``rate`` documents
per second are split among the active ones by weight (``w / sum(w)``), each
sub-bucket refilled by its share of the time since the previous take and capped
at its share of :data:`BURST_S` seconds of the budget. A new member starts
empty; a member that stops taking drops out (its tokens and debt with it) and
the others' shares grow at the next take. The refill of all members together is
``rate`` per second, and their caps sum to ``rate * BURST_S``: over any window
of ``T`` seconds the documents taken are at most ``rate * (T + BURST_S)`` plus
one batch per member (the debt a take may run into).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, cast

from pymongo import ReturnDocument
from pymongo.database import Database

from migronaut_core.background.store.documents import (
    BrakeDocument,
    BrakeLogDocument,
    TargetDocument,
)
from migronaut_core.config import BackgroundCollections

__all__ = [
    "ACTIVE_MS",
    "BURST_S",
    "MAX_BRAKE_LOG",
    "TARGET_ID",
    "BudgetStore",
    "Grant",
    "take_pipeline",
]

#: The ``_id`` of the one document of a target.
TARGET_ID: Final = "target"
#: A migration that took nothing for this long no longer shares the budget.
ACTIVE_MS: Final = 10_000
#: The bucket holds this many seconds of the budget (the largest burst).
BURST_S: Final = 1.0
#: The longest gap between two takes that refills (a bucket idle longer is full anyway).
_MAX_GAP_MS: Final = 60_000
#: How many brake settings and releases the brake's log keeps.
MAX_BRAKE_LOG: Final = 100

Document = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Grant:
    """What a take answered: the caller's tokens after the take, its share, the brake.

    ``wait_s`` is how long the caller waits before writing: the time its share
    (documents per second) takes to pay off the debt the take ran into (0 when
    it had the tokens).
    """

    tokens: float
    share: float
    brake: BrakeDocument | None

    @property
    def wait_s(self) -> float:
        if self.tokens >= 0 or self.share <= 0:
            return 0.0
        return -self.tokens / self.share


def take_pipeline(migration: str, weight: int, count: int, rate: int) -> list[Document]:
    """The update pipeline of one take (see the module docstring for the rule)."""
    now = "$$NOW"
    mine = {"$eq": ["$$member.m", migration]}
    fresh = {"m": migration, "w": weight, "tokens": 0.0, "seen": now}
    gap_ms = {
        "$cond": [
            {"$eq": [{"$type": "$at"}, "date"]},
            {"$min": [_MAX_GAP_MS, {"$max": [0, {"$subtract": [now, "$at"]}]}]},
            0,
        ]
    }
    others = {
        "$filter": {
            "input": {"$ifNull": ["$members", []]},
            "as": "member",
            "cond": {
                "$and": [
                    {"$not": [mine]},
                    {"$gte": ["$$member.seen", {"$subtract": [now, ACTIVE_MS]}]},
                ]
            },
        }
    }
    own = {
        "$mergeObjects": [
            {
                "$ifNull": [
                    {
                        "$arrayElemAt": [
                            {
                                "$filter": {
                                    "input": {"$ifNull": ["$members", []]},
                                    "as": "member",
                                    "cond": mine,
                                }
                            },
                            0,
                        ]
                    },
                    fresh,
                ]
            },
            {"w": weight, "seen": now},
        ]
    }
    share = {"$multiply": [rate, {"$divide": ["$$member.w", "$_total"]}]}
    capped = {
        "$min": [
            {"$multiply": ["$$share", BURST_S]},
            {"$add": ["$$member.tokens", {"$multiply": ["$$share", "$_gap_s"]}]},
        ]
    }
    # A member in debt stays active until it has waited the debt off (and ACTIVE_MS after).
    paid_at = {
        "$add": [
            now,
            {
                "$multiply": [
                    {"$max": [0, {"$multiply": [-1, "$$left"]}]},
                    {"$divide": [1000, "$$share"]},
                ]
            },
        ]
    }
    refilled = {
        "$map": {
            "input": "$_active",
            "as": "member",
            "in": {
                "$let": {
                    "vars": {"share": share},
                    "in": {
                        "$let": {
                            "vars": {"left": {"$subtract": [capped, {"$cond": [mine, count, 0]}]}},
                            "in": {
                                "$mergeObjects": [
                                    "$$member",
                                    {
                                        "tokens": "$$left",
                                        "seen": {"$cond": [mine, paid_at, "$$member.seen"]},
                                    },
                                ]
                            },
                        }
                    },
                }
            },
        }
    }
    return [
        {
            "$set": {
                "_gap_s": {"$divide": [gap_ms, 1000]},
                "_active": {"$concatArrays": [others, [own]]},
            }
        },
        {"$set": {"_total": {"$sum": "$_active.w"}}},
        {"$set": {"members": refilled}},
        {"$set": {"rate": rate, "at": now}},
        {"$unset": ["_gap_s", "_active", "_total"]},
    ]


class BudgetStore:
    """The budget document of one target: the bucket's takes, the brake's settings."""

    def __init__(self, db: Database[Document], names: BackgroundCollections) -> None:
        self.collection = db[names.budget]

    def take(self, migration: str, weight: int, count: int, rate: int) -> Grant:
        """Take ``count`` documents for ``migration`` (weight ``weight``) from a budget of
        ``rate`` per second; one round trip, on the server's clock."""
        doc = self.collection.find_one_and_update(
            {"_id": TARGET_ID},
            take_pipeline(migration, weight, count, rate),
            upsert=True,
            return_document=ReturnDocument.AFTER,
            projection={"members": 1, "brake": 1},
        )
        target = cast("TargetDocument", doc or {})
        members = target.get("members") or []
        total = sum(member["w"] for member in members) or weight
        own = next((member for member in members if member["m"] == migration), None)
        tokens = float(own["tokens"]) if own is not None else 0.0
        return Grant(tokens, rate * weight / total, target.get("brake"))

    def members(self) -> list[dict[str, Any]]:
        """The sub-buckets as stored (status readers; tests)."""
        doc = self.collection.find_one({"_id": TARGET_ID}, {"members": 1})
        return list((doc or {}).get("members") or [])

    def brake(self) -> BrakeDocument | None:
        """The brake as stored (one indexed read), or None when it is off."""
        doc = self.collection.find_one({"_id": TARGET_ID}, {"brake": 1})
        return cast("BrakeDocument | None", (doc or {}).get("brake"))

    def set_brake(self, brake: BrakeDocument) -> bool:
        """Set (or replace) the brake and log it; True when it was off before."""
        entry: BrakeLogDocument = {"action": "brake", **brake}
        before = self.collection.find_one_and_update(
            {"_id": TARGET_ID},
            {
                "$set": {"brake": brake},
                "$push": {"brake_log": {"$each": [entry], "$slice": -MAX_BRAKE_LOG}},
            },
            upsert=True,
            projection={"brake": 1},
        )
        return not (before or {}).get("brake")

    def release_brake(self, entry: BrakeLogDocument) -> bool:
        """Remove the brake and log it; False (and nothing logged) when it was off."""
        result = self.collection.update_one(
            {"_id": TARGET_ID, "brake": {"$type": "object"}},
            {
                "$set": {"brake": None},
                "$push": {"brake_log": {"$each": [entry], "$slice": -MAX_BRAKE_LOG}},
            },
        )
        return result.modified_count == 1

    def brake_log(self) -> list[BrakeLogDocument]:
        """The brake's log, oldest first (at most :data:`MAX_BRAKE_LOG` entries)."""
        doc = self.collection.find_one({"_id": TARGET_ID}, {"brake_log": 1})
        return list(cast("TargetDocument", doc or {"_id": TARGET_ID}).get("brake_log") or [])
