"""Drift as events: wait on one collection's change stream for old-shape writes, then signal.

The live watcher (:mod:`.watch`) upgrades old-shape writes itself, in a process
of its own. Event-driven schedulers (Airflow's ``AssetWatcher``) want less: one
signal — "this collection drifted" — on which a scheduled job applies the
on-drift policy (:func:`~migronaut_core.background.drift.verify.verify`:
reopen or report). :func:`next_drift_signal` is that wait, async (it runs in
Airflow's triggerer), and owns everything but the client: the edges it serves
(:func:`~.watch.edge_states`: completed forward declarative migrations of the
collection, none while a revert is at work), the stream's pipeline
(:func:`~.watch.drift_pipeline`) and the position saved in
:mod:`~migronaut_core.background.store.drift_events`.

When the position moves, and why nothing is missed:

- A stream starts after the saved token; with none (first start, or history
  gone) it starts now, the collection is probed (:func:`verify`'s query:
  documents written before the stream are the probe's), and only then is its
  first position saved — a saved position means everything before it was seen.
- Change events only *suggest* drift. After a burst of them the collection is
  probed for old-shape documents of a completed migration (known failed ones
  excluded). None: the writes are already healed (or rewritten since), and the
  position moves past them. Some: the position moves past them **and the fire
  time is saved, before the signal is returned**.
- A signal handed on but lost (the triggerer died before Airflow stored the
  event, or the scheduled run never happened) leaves the old-shape documents
  where they are, with the migration still ``completed``. Whenever the last
  fire is ``refire_after_seconds`` old, the collection is probed again (at start
  and every ``refresh_seconds``), and such documents fire again. Re-firing is
  harmless — the on-drift policy is idempotent (a reopened migration is not
  reopened twice) — missing is not.
- Signals carry migration names and counts, never document values, ``_id``\\ s or
  the token.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pymongo.asynchronous.change_stream import AsyncChangeStream
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from migronaut_core.background.drift.watch.edges import drift_pipeline, edge_states
from migronaut_core.background.spec import exclude_bad_ids, match_of, read_stored
from migronaut_core.background.store import StateDocument
from migronaut_core.background.store.drift_events import (
    DriftPosition,
    clear_drift_position_async,
    collection_states_async,
    read_drift_position_async,
    save_drift_position_async,
)
from migronaut_core.checks import check_number
from migronaut_core.clock import monotonic
from migronaut_core.config import BackgroundCollections
from migronaut_core.server_errors import history_lost

__all__ = [
    "DriftEdge",
    "DriftEventSettings",
    "DriftSignal",
    "drift_event_settings",
    "next_drift_signal",
]

log = logging.getLogger(__name__)

Document = dict[str, Any]
SignalSource = Literal["stream", "probe"]

#: At most this many events are read before the collection is probed (a steady
#: stream of old-shape writes is still signalled).
MAX_BURST = 1000


@dataclass(frozen=True, slots=True)
class DriftEventSettings:
    """How :func:`next_drift_signal` waits; built and checked by :func:`drift_event_settings`.

    :param refire_after_seconds: how long a fired signal has to take effect before
        old-shape documents that are still there fire again.
    :param refresh_seconds: how often the migrations are read again (a newly
        completed or reopened one changes what is served) and a due re-fire probed.
    :param await_ms: how long one read of the stream waits for events.
    :param checkpoint_seconds: how often an idle stream saves its position.
    """

    refire_after_seconds: float = 300.0
    refresh_seconds: float = 10.0
    await_ms: int = 1000
    checkpoint_seconds: float = 5.0


def drift_event_settings(
    *,
    refire_after_seconds: float = 300.0,
    refresh_seconds: float = 10.0,
    await_ms: int = 1000,
    checkpoint_seconds: float = 5.0,
) -> DriftEventSettings:
    """Check the options before anything connects.

    :raises ConfigInvalidError: naming the option.
    """
    for key, value, low, high in (
        ("refire_after_seconds", refire_after_seconds, 1.0, 86_400.0),
        ("refresh_seconds", refresh_seconds, 0.05, 3600.0),
        ("checkpoint_seconds", checkpoint_seconds, 0.05, 3600.0),
        ("await_ms", await_ms, 1, 60_000),
    ):
        check_number(key, value, low, high)
    return DriftEventSettings(
        refire_after_seconds=float(refire_after_seconds),
        refresh_seconds=float(refresh_seconds),
        await_ms=int(await_ms),
        checkpoint_seconds=float(checkpoint_seconds),
    )


@dataclass(frozen=True, slots=True)
class DriftEdge:
    """A completed forward migration of the collection: what its stream and probe look for."""

    name: str
    field: str
    source: int
    #: Old-shape documents still to heal (the source version, known failed ones excluded).
    match: Document = dataclasses.field(compare=False)
    generation: int = 0


@dataclass(frozen=True, slots=True)
class DriftSignal:
    """Old-shape documents after completion: the migrations to apply the on-drift policy to.

    :param collection: the drifted collection.
    :param migrations: completed migrations with old-shape documents, by name.
    :param events: change events read since the position saved before.
    :param source: ``stream`` (events led to it) or ``probe`` (a fresh start's or
        a re-fire's probe found them).
    """

    collection: str
    migrations: tuple[str, ...]
    events: int
    source: SignalSource

    def to_payload(self) -> dict[str, Any]:
        """A JSON-safe payload: names and counts only."""
        return {
            "status": "drift",
            "collection": self.collection,
            "migrations": list(self.migrations),
            "events": self.events,
            "source": self.source,
        }


def drift_edges(states: Sequence[StateDocument], collection: str) -> list[DriftEdge]:
    """The edges a drift signal serves: :func:`~.watch.edge_states`, with their probes."""
    edges = []
    for state in edge_states(states, collection):
        spec = read_stored(state["spec"], name=state["_id"])
        edges.append(
            DriftEdge(
                name=state["_id"],
                field=spec.field,
                source=spec.source_version("forward"),
                match=exclude_bad_ids(match_of(spec, "forward"), list(state.get("bad_ids") or [])),
                generation=int(state.get("generation") or 0),
            )
        )
    return edges


async def next_drift_signal(
    db: AsyncDatabase[Document],
    collections: BackgroundCollections,
    collection: str,
    settings: DriftEventSettings | None = None,
) -> DriftSignal:
    """Wait until old-shape documents of a completed migration are written to ``collection``.

    Returns one signal, its position saved first (see the module docstring for
    when the position moves). Runs until then; cancel the task to stop it.
    A ``PyMongoError`` is raised as is: the caller backs off and calls again,
    resuming from the saved position.
    """
    chosen = settings or DriftEventSettings()
    return await _DriftWait(db, collections, collection, chosen).run()


class _DriftWait:
    """One wait for a signal: the loop over stream openings, with its bookkeeping."""

    def __init__(
        self,
        db: AsyncDatabase[Document],
        collections: BackgroundCollections,
        collection: str,
        settings: DriftEventSettings,
    ) -> None:
        self.db = db
        self.collections = collections
        self.collection = collection
        self.settings = settings
        self.events = 0

    async def run(self) -> DriftSignal:
        position = await read_drift_position_async(self.db, self.collections, self.collection)
        token = position.resume_token
        # Never fired: one probe at the start; since then, only a fire that did not take effect.
        refire_due = position.fired_seconds_ago is None or _refire_due(position, self.settings)
        while True:
            edges = await self._edges()
            if not edges:
                # Nothing completed to serve (running, reverted, not yet registered): the
                # position stays, and events meanwhile are replayed once one completes.
                await asyncio.sleep(self.settings.refresh_seconds)
                continue
            signal, token, refire_due = await self._serve(edges, token, refire_due)
            if signal is not None:
                return signal

    async def _edges(self) -> list[DriftEdge]:
        states = await collection_states_async(self.db, self.collections, self.collection)
        return drift_edges(states, self.collection)

    async def _serve(
        self, edges: list[DriftEdge], token: Mapping[str, Any] | None, refire_due: bool
    ) -> tuple[DriftSignal | None, Mapping[str, Any] | None, bool]:
        """Serve one stream until a signal, or until the edges change (then reopen)."""
        try:
            stream = await self._open(edges, token)
        except PyMongoError as error:
            if token is None or not history_lost(error):
                raise
            log.warning(
                "drift events %s: the saved position is gone; starting fresh", self.collection
            )
            await clear_drift_position_async(self.db, self.collections, self.collection)
            return None, None, True
        async with stream:
            if token is None:
                # A fresh start: probe what came before the stream, then save where it
                # begins (the probe saves). Dying in between only means starting afresh.
                token = stream.resume_token
                refire_due = True
            if refire_due:
                signal = await self._probe_and_fire(edges, "probe", token)
                if signal is not None:
                    return signal, token, False
                refire_due = False
            served = [(edge.name, edge.generation) for edge in edges]
            saved_at = refresh_at = monotonic()
            seen = 0
            while True:
                change = await stream.try_next()
                if change is not None and change.get("operationType") == "invalidate":
                    log.warning("drift events %s: the stream was invalidated", self.collection)
                    await clear_drift_position_async(self.db, self.collections, self.collection)
                    return None, None, True
                if change is not None:
                    seen += 1
                    if seen < MAX_BURST:
                        continue  # drain the burst before probing once
                token = stream.resume_token or token
                if seen:
                    self.events += seen
                    seen = 0
                    signal = await self._probe_and_fire(edges, "stream", token)
                    if signal is not None:
                        return signal, token, False
                    saved_at = monotonic()
                now = monotonic()
                if now - saved_at >= self.settings.checkpoint_seconds:
                    await self._save(token)
                    saved_at = now
                if now - refresh_at >= self.settings.refresh_seconds:
                    refresh_at = now
                    current = await self._edges()
                    if [(edge.name, edge.generation) for edge in current] != served:
                        await self._save(token)
                        return None, token, refire_due
                    position = await read_drift_position_async(
                        self.db, self.collections, self.collection
                    )
                    if _refire_due(position, self.settings):
                        signal = await self._probe_and_fire(current, "probe", token)
                        if signal is not None:
                            return signal, token, False

    async def _open(
        self, edges: list[DriftEdge], token: Mapping[str, Any] | None
    ) -> AsyncChangeStream[Document]:
        options: dict[str, Any] = {}
        if token is not None:
            options["resume_after"] = token
        return await self.db[self.collection].watch(
            drift_pipeline((edge.field, edge.source) for edge in edges),
            full_document="updateLookup",
            max_await_time_ms=self.settings.await_ms,
            **options,
        )

    async def _probe_and_fire(
        self, edges: list[DriftEdge], source: SignalSource, token: Mapping[str, Any] | None
    ) -> DriftSignal | None:
        """Probe each edge; with old-shape documents, save the position as fired and signal."""
        drifted = []
        for edge in edges:
            found = await self.db[self.collection].find_one(edge.match, {"_id": 1})
            if found is not None:
                drifted.append(edge.name)
        events, self.events = self.events, 0
        await self._save(token, events=events, fired=bool(drifted))
        if not drifted:
            return None
        log.info(
            "drift events %s: old-shape documents of %d completed migration(s) (%s, %d event(s))",
            self.collection,
            len(drifted),
            source,
            events,
        )
        return DriftSignal(self.collection, tuple(drifted), events, source)

    async def _save(
        self, token: Mapping[str, Any] | None, *, events: int = 0, fired: bool = False
    ) -> None:
        await save_drift_position_async(
            self.db, self.collections, self.collection, token, events=events, fired=fired
        )


def _refire_due(position: DriftPosition, settings: DriftEventSettings) -> bool:
    """Whether a fire that did not take effect is old enough to fire again."""
    ago = position.fired_seconds_ago
    return ago is not None and ago >= settings.refire_after_seconds
