"""What the stall watch reads of running migrations, and where it notes what it signalled.

Airflow's stall watch runs in the triggerer (an ``AsyncMongoClient``, no
:class:`~migronaut_core.background.store.BackgroundStore`), so its reads live here
beside the store's: the running states, whether any of their leases is live, and
their latest partition write — the evidence
:func:`~migronaut_core.background.coordinator.stalled_for` judges, read the
same way. Reads only, except :func:`note_stall_signal_async`.

What was signalled is kept in the drift-events collection (the event triggers'
own collection) under ``_id: {"stall": <migration>}``, a key no collection row
can take: ``since`` (the activity the stall was measured from) and
``fired_at``. A restarted watch then neither repeats a signal whose takeover is
on its way nor forgets one that never took effect.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from pymongo.asynchronous.database import AsyncDatabase

from migronaut_core.background.store.documents import StateDocument
from migronaut_core.background.store.leases import live_leases_filter
from migronaut_core.config import BackgroundCollections

__all__ = ["StallEvidence", "note_stall_signal_async", "read_stall_evidence_async"]

Document = dict[str, Any]

#: What the stall rule reads of a state.
_STATE_PROJECTION = {
    "_id": 1,
    "status": 1,
    "last_progress_at": 1,
    "coordinator.at": 1,
    "hold.at": 1,
    "hold.until": 1,
    "canary.phase": 1,
}
_ID_ONLY = {"_id": 1}


@dataclass(frozen=True, slots=True)
class StallEvidence:
    """One running migration as the stall rule sees it.

    :param state: the state's ``_id``, status, ``last_progress_at``, ``coordinator.at``,
        its hold's ``at`` and ``until`` and its canary's ``phase``.
    :param live_lease: a lease of the migration is live (server clock).
    :param last_partition_write: when a partition of it was last written, as stored.
    :param signalled_since: the activity a previous signal measured its stall
        from; ``None``: never signalled.
    :param signalled_at: when that signal fired (as stored).
    """

    state: StateDocument
    live_lease: bool
    last_partition_write: Any
    signalled_since: datetime | None = None
    signalled_at: datetime | None = None

    @property
    def name(self) -> str:
        return str(self.state["_id"])


def _stall_key(name: str) -> Document:
    return {"stall": name}


async def read_stall_evidence_async(
    db: AsyncDatabase[Document], collections: BackgroundCollections
) -> list[StallEvidence]:
    """The evidence of every running migration: one state read, then two indexed
    reads per migration (none for a migration whose lease is live)."""
    states = db[collections.state].find({"status": "running"}, _STATE_PROJECTION)
    partitions = db[collections.partitions]
    signals = db[collections.drift_events]
    found = []
    async for row in states:
        state = cast("StateDocument", row)
        name = str(state["_id"])
        if await partitions.find_one(live_leases_filter(name), _ID_ONLY) is not None:
            found.append(StallEvidence(state, live_lease=True, last_partition_write=None))
            continue
        latest = await partitions.find_one(
            {"migration": name}, {"updated_at": 1}, sort=[("updated_at", -1)]
        )
        noted = await signals.find_one({"_id": _stall_key(name)}) or {}
        found.append(
            StallEvidence(
                state,
                live_lease=False,
                last_partition_write=None if latest is None else latest.get("updated_at"),
                signalled_since=noted.get("since"),
                signalled_at=noted.get("fired_at"),
            )
        )
    return found


async def note_stall_signal_async(
    db: AsyncDatabase[Document],
    collections: BackgroundCollections,
    name: str,
    *,
    since: datetime,
    fired_at: datetime,
) -> None:
    """Note that ``name``'s stall measured from ``since`` was signalled at ``fired_at``.

    Noted *before* the signal is handed on: a lost signal is re-fired after a
    stall period (see :func:`~migronaut_core.background.stalls.next_stall_signal`).
    """
    await db[collections.drift_events].update_one(
        {"_id": _stall_key(name)},
        {
            "$set": {"since": since, "fired_at": fired_at},
            "$currentDate": {"updated_at": True},
            "$inc": {"counters.fired": 1},
        },
        upsert=True,
    )
