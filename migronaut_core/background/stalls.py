"""Wait, asynchronously, until a running background migration stalls.

A migration's driver can die or freeze while its run still looks alive to the
scheduler (a lane task frozen, a worker gone without anyone noticing): its
leases lapse and nothing moves it. :func:`next_stall_signal` is what an
event-driven scheduler awaits to notice that as soon as the stall time has
passed, instead of at its next periodic heal: it polls the running migrations
and returns a :class:`StallSignal` naming those nothing has moved for
``stall_seconds`` — the rule of
:func:`~migronaut_core.background.coordinator.stalled_for`, the one the heal and
the audit apply. Airflow's stall-watch trigger runs it in the triggerer; the
takeover itself is a coordinator step with a new round, started by whoever
receives the signal.

A stall is signalled once. It is signalled again when the takeover never came
(still stalled a whole ``stall_seconds`` after the signal) or when the
migration moved and then stalled anew. What was signalled is noted in MongoDB
before the signal is returned, so a restarted watch repeats nothing.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from migronaut_core.background.coordinator import STALL_SECONDS, last_activity
from migronaut_core.background.store.stalls import (
    StallEvidence,
    note_stall_signal_async,
    read_stall_evidence_async,
)
from migronaut_core.checks import check_number
from migronaut_core.clock import aware, utc_now
from migronaut_core.config import BackgroundCollections

__all__ = ["StallSignal", "StallWatchSettings", "next_stall_signal", "stall_watch_settings"]

Document = dict[str, Any]

#: MongoDB keeps milliseconds: a noted ``since`` may read back this much earlier.
_STORED_PRECISION = timedelta(milliseconds=1)


@dataclass(frozen=True, slots=True)
class StallWatchSettings:
    """How :func:`next_stall_signal` waits; built and checked by :func:`stall_watch_settings`.

    :param stall_seconds: how long nothing may move a running migration before it
        is signalled.
    :param poll_seconds: how often the running migrations are read.
    """

    stall_seconds: float = STALL_SECONDS
    poll_seconds: float = 30.0


def stall_watch_settings(
    *, stall_seconds: float = STALL_SECONDS, poll_seconds: float | None = None
) -> StallWatchSettings:
    """Check the options before anything connects; ``poll_seconds`` defaults to a tenth
    of the stall time, between 1 and 30 seconds.

    :raises ConfigInvalidError: naming the option.
    """
    check_number("stall_seconds", stall_seconds, 1.0, 7 * 86_400.0)
    if poll_seconds is None:
        poll_seconds = min(30.0, max(1.0, stall_seconds / 10))
    check_number("poll_seconds", poll_seconds, 0.05, 3600.0)
    return StallWatchSettings(stall_seconds=float(stall_seconds), poll_seconds=float(poll_seconds))


@dataclass(frozen=True, slots=True)
class StallSignal:
    """Running migrations nothing has moved for the stall time: the ones to take over.

    :param migrations: their names, longest stalled first.
    :param idle_seconds: how long each has stood still, by name.
    """

    migrations: tuple[str, ...]
    idle_seconds: dict[str, float]

    def to_payload(self) -> dict[str, Any]:
        """A JSON-safe payload: names and durations only."""
        return {
            "status": "stalled",
            "migrations": list(self.migrations),
            "idle_seconds": {name: round(value, 1) for name, value in self.idle_seconds.items()},
        }


async def next_stall_signal(
    db: AsyncDatabase[Document],
    collections: BackgroundCollections,
    settings: StallWatchSettings | None = None,
) -> StallSignal:
    """Wait until a running migration is stalled and not yet signalled for it.

    Returns one signal, noted first. Runs until then; cancel the task to stop
    it. A ``PyMongoError`` is raised as is: the caller backs off and calls again.
    """
    chosen = settings or StallWatchSettings()
    limit = timedelta(seconds=chosen.stall_seconds)
    while True:
        now: datetime = utc_now()
        due = [
            stall
            for evidence in await read_stall_evidence_async(db, collections)
            if (stall := _due_stall(evidence, limit, now)) is not None
        ]
        if due:
            due.sort(key=lambda stall: stall.since)
            for stall in due:
                await note_stall_signal_async(
                    db, collections, stall.name, since=stall.since, fired_at=now
                )
            return StallSignal(
                migrations=tuple(stall.name for stall in due),
                idle_seconds={stall.name: (now - stall.since).total_seconds() for stall in due},
            )
        await asyncio.sleep(chosen.poll_seconds)


@dataclass(frozen=True, slots=True)
class _Stall:
    name: str
    since: datetime


def _due_stall(evidence: StallEvidence, limit: timedelta, now: datetime) -> _Stall | None:
    """``evidence``'s migration as a stall to signal now, or None."""
    if evidence.live_lease:
        return None
    since = last_activity(evidence.state, evidence.last_partition_write)
    if since is None or now - since < limit:
        return None
    stall = _Stall(evidence.name, since)
    noted_since, noted_at = evidence.signalled_since, evidence.signalled_at
    if noted_since is None or noted_at is None:
        return stall
    if aware(noted_since) < since - _STORED_PRECISION:
        return stall  # it moved after the last signal, and stalled again
    if now - aware(noted_at) >= limit:
        return stall  # signalled, yet no takeover came: once more
    return None
