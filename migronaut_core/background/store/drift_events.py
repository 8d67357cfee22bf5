"""Where the event-driven drift triggers resume: one row per watched collection.

An Airflow ``AssetWatcher`` runs a drift trigger in the triggerer, which must be
async and may be restarted at any moment. Its change stream's position lives
here, in MongoDB (the drift-events collection), so a new trigger instance —
after a triggerer restart, on another triggerer — resumes after the last
position its predecessor saved. Read and written only through these functions,
sync or async, so the Airflow skin never touches migronaut's collections.

A row: ``_id`` (the collection), ``resume_token`` (never shown), ``fired_at``
(server clock, the last time a signal was fired), counters (``events`` seen,
``fired`` signals) and ``updated_at``. Last writer wins: Airflow runs one
instance of a given trigger at a time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.database import Database

from migronaut_core.background.store.documents import StateDocument
from migronaut_core.config import BackgroundCollections

__all__ = [
    "DriftPosition",
    "clear_drift_position_async",
    "collection_states_async",
    "read_drift_position",
    "read_drift_position_async",
    "save_drift_position_async",
]

Document = dict[str, Any]

#: What a drift trigger reads of a state: enough to tell the completed forward edges.
_STATE_PROJECTION = {
    "_id": 1,
    "status": 1,
    "direction": 1,
    "spec": 1,
    "bad_ids": 1,
    "generation": 1,
}


@dataclass(frozen=True, slots=True)
class DriftPosition:
    """Where a collection's drift trigger resumes, and when it last fired.

    :param resume_token: the change stream's saved position; ``None``: start fresh.
    :param fired_seconds_ago: seconds since the last fired signal, by the
        server's clock; ``None``: it never fired.
    :param events: change events seen so far (all instances).
    :param fired: signals fired so far (all instances).
    """

    resume_token: Mapping[str, Any] | None
    fired_seconds_ago: float | None
    events: int = 0
    fired: int = 0


def _position_pipeline(collection: str) -> list[Document]:
    return [
        {"$match": {"_id": collection}},
        {
            "$project": {
                "resume_token": 1,
                "counters": 1,
                "fired_ms_ago": {
                    "$cond": [
                        {"$eq": [{"$type": "$fired_at"}, "date"]},
                        {"$subtract": ["$$NOW", "$fired_at"]},
                        None,
                    ]
                },
            }
        },
    ]


def _position_of(row: Mapping[str, Any] | None) -> DriftPosition:
    if row is None:
        return DriftPosition(resume_token=None, fired_seconds_ago=None)
    token = row.get("resume_token")
    ago = row.get("fired_ms_ago")
    counters = row.get("counters") or {}
    return DriftPosition(
        resume_token=token if isinstance(token, Mapping) else None,
        fired_seconds_ago=max(0.0, float(ago) / 1000) if ago is not None else None,
        events=int(counters.get("events", 0)),
        fired=int(counters.get("fired", 0)),
    )


def read_drift_position(
    db: Database[Document], collections: BackgroundCollections, collection: str
) -> DriftPosition:
    """The saved position of ``collection``'s drift trigger (what a new instance resumes after)."""
    rows = list(db[collections.drift_events].aggregate(_position_pipeline(collection)))
    return _position_of(rows[0] if rows else None)


async def read_drift_position_async(
    db: AsyncDatabase[Document], collections: BackgroundCollections, collection: str
) -> DriftPosition:
    """:func:`read_drift_position` through an ``AsyncMongoClient``'s database."""
    cursor = await db[collections.drift_events].aggregate(_position_pipeline(collection))
    rows = await cursor.to_list(1)
    return _position_of(rows[0] if rows else None)


async def save_drift_position_async(
    db: AsyncDatabase[Document],
    collections: BackgroundCollections,
    collection: str,
    resume_token: Mapping[str, Any] | None,
    *,
    events: int = 0,
    fired: bool = False,
) -> None:
    """Save the position a new instance resumes after; with ``fired``, note the fire's time.

    ``resume_token`` ``None`` keeps the saved one; counters add ``events`` and one
    fire. The caller saves a fired position *before* it hands the signal on.
    """
    fields: Document = {}
    if resume_token is not None:
        fields["resume_token"] = dict(resume_token)
    update: Document = {"$currentDate": {"updated_at": True}}
    if fired:
        update["$currentDate"]["fired_at"] = True
    if fields:
        update["$set"] = fields
    increments = {"counters.events": events, "counters.fired": 1 if fired else 0}
    increments = {key: value for key, value in increments.items() if value}
    if increments:
        update["$inc"] = increments
    await db[collections.drift_events].update_one({"_id": collection}, update, upsert=True)


async def clear_drift_position_async(
    db: AsyncDatabase[Document], collections: BackgroundCollections, collection: str
) -> None:
    """Forget the saved position (its history is gone): the next stream starts fresh."""
    await db[collections.drift_events].update_one(
        {"_id": collection},
        {"$unset": {"resume_token": ""}, "$currentDate": {"updated_at": True}},
    )


async def collection_states_async(
    db: AsyncDatabase[Document], collections: BackgroundCollections, collection: str
) -> list[StateDocument]:
    """The states of every background migration of ``collection`` (what its edges are made of)."""
    cursor = db[collections.state].find({"spec.collection": collection}, _STATE_PROJECTION)
    return [cast("StateDocument", dict(row)) async for row in cursor]
