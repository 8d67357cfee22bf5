"""One collection's follower: a thread that leads the collection's stream when its lock is free.

Exactly one process leads a collection: the holder of the ``watch:<collection>``
lock (TTL, heartbeat, fencing token); every other one stands by and tries the
lock now and then. The leader opens the change stream (after the saved resume
token, or, on a fresh start, just after a cluster time with a snapshot probe
as of that time), gathers ids in small batches, hands them to the
:class:`~migronaut_core.background.drift.watch.upgrade.Upgrader`, and saves its
position in the watch row after each batch, fenced by its token. One concept
(the leader's stream loop and its hand-overs), so it stays in one module.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from bson import Timestamp
from pymongo.change_stream import CollectionChangeStream
from pymongo.errors import OperationFailure, PyMongoError

from migronaut_core.background.backoff import Backoff
from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.drift.watch.edges import (
    Edge,
    edge_signature,
    edge_states,
    watch_pipeline,
)
from migronaut_core.background.drift.watch.settings import WatchSettings
from migronaut_core.background.drift.watch.upgrade import WATCH_ACTOR, Upgrader
from migronaut_core.background.indexes import probe_hint
from migronaut_core.background.job import job_for
from migronaut_core.background.runtime import Runtime
from migronaut_core.background.store.watch import WATCH_COUNTERS, Fence, WatchStore
from migronaut_core.bson_values import canonical_id_key, json_safe
from migronaut_core.clock import monotonic, utc_now
from migronaut_core.errors import MigronautError
from migronaut_core.lock import MongoLock
from migronaut_core.scrub import error_text
from migronaut_core.server_errors import history_lost

__all__ = ["MAX_BACKOFF_SECONDS", "WATCH_BACKOFF", "Follower", "WatchState"]

log = logging.getLogger(__name__)

Document = dict[str, Any]
WatchState = Literal["starting", "streaming", "standby", "stopped", "error"]

#: The longest a failing stream backs off before it opens again.
MAX_BACKOFF_SECONDS = 30.0
#: A failing watcher waits 0.5 s, doubling up to MAX_BACKOFF_SECONDS, each wait jittered by half.
WATCH_BACKOFF = Backoff(first=0.5, cap=MAX_BACKOFF_SECONDS, jitter=0.5)


@dataclass(frozen=True, slots=True)
class _Boundary:
    """Where a stream starts (just after cluster time ``at``) and what to probe as of ``at``."""

    at: Timestamp | None
    probe: frozenset[str]


class Follower(threading.Thread):
    """One collection in one process: lead it when its lock is free, stand by otherwise."""

    def __init__(
        self,
        rt: Runtime,
        store: WatchStore,
        settings: WatchSettings,
        collection: str,
        *,
        cancel: CancelToken,
    ) -> None:
        """:param cancel: the watcher's token; this follower stops on it, or on its own child."""
        super().__init__(name=f"migronaut-watch-{collection}", daemon=True)
        self.rt = rt
        self.store = store
        self.settings = settings
        self.collection = collection
        self.cancel = cancel.child()
        self.lock = MongoLock(
            self.rt.db[self.rt.lock_collection],
            f"watch:{collection}",
            self.rt.ttl_seconds,
            requested_by=WATCH_ACTOR,
            label="drift watcher lock",
        )
        self.state: WatchState = "starting"
        self.leading = False
        self.gone = False
        self.counters = {key: 0 for key in WATCH_COUNTERS}
        self.last_event_at: datetime | None = None
        self._pending = {key: 0 for key in WATCH_COUNTERS}
        self._token: Mapping[str, Any] | None = None
        #: A stream to open at a cluster time instead of the token, with the edges to
        #: probe as of the moment before it (migrations that joined a running stream).
        self._boundary: _Boundary | None = None
        self._saved_at = 0.0
        self._fence: Fence | None = None
        self._guard = threading.Lock()
        self.upgrader = Upgrader(self.rt, collection, self.settings, self.cancel, self._count)

    # -- what the handle shows ----------------------------------------------------------

    def view(self) -> dict[str, Any]:
        with self._guard:
            return {
                "collection": self.collection,
                "state": self.state,
                "leading": self.leading,
                "counters": dict(self.counters),
                "last_event_at": json_safe(self.last_event_at),
            }

    def _count(self, key: str, amount: int) -> None:
        if amount:
            with self._guard:
                self.counters[key] += amount
                self._pending[key] += amount

    def _set_state(self, state: WatchState, *, leading: bool) -> None:
        with self._guard:
            changed = state != self.state or leading != self.leading
            self.state = state
            self.leading = leading
        if changed:
            log.info("drift watcher %s: %s", self.collection, state)
            self.rt.emit("background:watch", {"collection": self.collection, "state": state})

    # -- the loop -----------------------------------------------------------------------

    def run(self) -> None:
        failures = 0
        while not self.cancel.cancelled and not self.gone:
            try:
                if self.lock.try_acquire():
                    failures = 0
                    self._lead_with_lock()
                    continue
                self._set_state("standby", leading=False)
                failures = 0
            except Exception as error:  # a user's batch transform may raise anything
                failures += 1
                self.upgrader.report(error)
                self._set_state("error", leading=False)
                if self.cancel.sleep(WATCH_BACKOFF.seconds(failures)):
                    break
                continue
            pause = self.settings.leader_retry_seconds * random.uniform(0.75, 1.0)
            if self.cancel.sleep(pause):
                break
        self._set_state("stopped", leading=False)

    def _lead_with_lock(self) -> None:
        assert self.lock.token is not None
        self.lock.start_heartbeat()
        self._fence = Fence(self.lock.owner, self.lock.token)
        try:
            self._lead()
        finally:
            self.lock.stop_heartbeat()
            with contextlib.suppress(PyMongoError):
                self.lock.release()
            self._fence = None

    def _lead(self) -> None:
        assert self._fence is not None
        row = self.store.take(
            self.collection, self._fence, {"host": socket.gethostname(), "pid": os.getpid()}
        )
        self._token = row.get("resume_token")
        self._boundary = None
        self._saved_at = 0.0
        log.info("drift watcher %s: leading", self.collection)
        self._set_state("starting", leading=True)
        end: WatchState = "error"
        try:
            end = self._lead_loop()
        finally:
            with self._guard:
                self.leading = False
            with contextlib.suppress(PyMongoError):
                self._checkpoint(force=True, fields={"state": end})
            self._set_state(end, leading=False)

    def _lead_loop(self) -> WatchState:
        """Serve streams until stopped; the state to leave the row in."""
        failures = 0
        while not self.cancel.cancelled:
            if self.lock.lost:
                return "standby"
            edges, completed = self._edges()
            if not completed:
                # Nothing completed to serve (reopened, reverted, withdrawn): the next
                # start is a fresh one, whose probe covers the time in between.
                self._token = None
                self._checkpoint(force=True, clear_token=True, fields={"edges": []})
                self.gone = True
                break
            if not edges:
                # Every file differs from its registered version (a deploy in
                # progress): keep the position and look again later.
                self._checkpoint()
                if self.cancel.sleep(self.settings.refresh_seconds):
                    break
                continue
            try:
                if not self._serve(edges):
                    return "standby"
                failures = 0
            except PyMongoError as error:
                failures = self._stream_failed(error, failures)
        return "stopped"

    def _stream_failed(self, error: PyMongoError, failures: int) -> int:
        """Handle a stream that failed; return the failures in a row so far."""
        if self.cancel.cancelled:
            return failures
        if history_lost(error):
            log.warning(
                "drift watcher %s: the stream's history is gone (%s); probing the collection "
                "and starting a fresh stream",
                self.collection,
                error_text(error),
            )
            self._token = None
            self._boundary = None
            self._checkpoint(force=True, clear_token=True)
            return failures
        failures += 1
        self.upgrader.report(error)
        self._set_state("error", leading=True)
        self._checkpoint(force=True, fields={"state": "error"}, error=error)
        self.cancel.sleep(WATCH_BACKOFF.seconds(failures))
        return failures

    def _edges(self) -> tuple[list[Edge], int]:
        """The edges to serve, and how many completed migrations there are to serve."""
        states = edge_states(self.rt.store.states.list_states(), self.collection)
        edges = []
        for state in states:
            try:
                job = job_for(self.rt, state["_id"], state, self.cancel)
            except MigronautError as error:
                # Mid-deploy (another version of the file) or a missing file: the poll
                # and the lanes see to that migration; the others are still served.
                self.rt.warn_once(
                    f"watch:{state['_id']}:{type(error).__name__}",
                    "drift watcher %s: %s is not served (%s)",
                    self.collection,
                    state["_id"],
                    error.message,
                )
                continue
            edges.append(
                Edge(
                    name=state["_id"],
                    field=job.spec.field,
                    source=job.source,
                    target=job.target,
                    job=job,
                    signature=edge_signature(state),
                )
            )
        return edges, len(states)

    def _signature(self) -> list[tuple[Any, ...]]:
        return [
            edge_signature(state)
            for state in edge_states(self.rt.store.states.list_states(), self.collection)
        ]

    # -- one open stream ----------------------------------------------------------------

    def _serve(self, edges: list[Edge]) -> bool:
        """Serve one stream until a refresh is due or it ends; False: leadership lost."""
        names = frozenset(edge.name for edge in edges)
        boundary = self._boundary
        if boundary is None and self._token is None:
            # A fresh start: the stream takes every write after ``at``; the probe reads
            # the collection as it was at ``at``. Nothing falls between, nothing is both.
            at = self._cluster_time()
            boundary = _Boundary(at, names) if at is not None else _Boundary(None, names)
        stream = self._open(edges, boundary)
        described = {
            "edges": [edge.name for edge in edges],
            "target": max(edge.target for edge in edges),
        }
        with stream:
            self._boundary = None
            if boundary is not None:
                self._token = stream.resume_token
                if not self._checkpoint(force=True, fields=described):
                    return False
                probed = [edge for edge in edges if edge.name in boundary.probe]
                if probed and self._drifted_at(probed, boundary.at) and self.upgrader.catch_up():
                    return True  # a migration was reopened: read the edges again
            self._set_state("streaming", leading=True)
            if not self._checkpoint(force=True, fields={"state": "streaming", **described}):
                return False
            signature = [edge.signature for edge in edges]
            refresh_at = monotonic() + self.settings.refresh_seconds
            while not self.cancel.cancelled:
                if self.lock.lost:
                    return False
                ids, invalidated = self._gather(stream)
                reread = self.upgrader.upgrade(edges, ids) if ids else False
                self._token = None if invalidated else stream.resume_token
                if invalidated or not stream.alive:
                    log.warning(
                        "drift watcher %s: the stream was invalidated (collection dropped or "
                        "renamed); starting a fresh one",
                        self.collection,
                    )
                    self._token = None
                    return self._checkpoint(force=True, clear_token=True)
                if not self._checkpoint(force=bool(ids)):
                    return False
                if reread or monotonic() >= refresh_at:
                    current = self._signature()
                    if reread or current != signature:
                        self._hand_over(stream, edges, {row[0] for row in current} - names)
                        return True
                    refresh_at = monotonic() + self.settings.refresh_seconds
        return True

    def _open(
        self, edges: list[Edge], boundary: _Boundary | None
    ) -> CollectionChangeStream[Document]:
        options: dict[str, Any] = {}
        if boundary is not None and boundary.at is not None:
            options["start_at_operation_time"] = Timestamp(boundary.at.time, boundary.at.inc + 1)
        elif boundary is None:
            options["resume_after"] = self._token
        return self.rt.db[self.collection].watch(
            watch_pipeline(edges),
            full_document="updateLookup",
            max_await_time_ms=self.settings.batch_ms,
            **options,
        )

    def _hand_over(
        self, stream: CollectionChangeStream[Document], edges: list[Edge], joined: set[str]
    ) -> None:
        """Before a stream with more migrations replaces this one: a gap-free boundary.

        This stream filtered out the writes only a migration that just completed
        cares about. Its successor starts right after ``at``; this one serves what
        came up to ``at``; the newcomers are probed as of ``at``. The saved token
        stays where it was, so a leader that dies in between replays rather than
        misses.
        """
        if not joined:
            return
        at = self._cluster_time()
        if at is None:
            return
        for _ in range(100):
            ids, invalidated = self._gather(stream)
            if ids:
                self.upgrader.upgrade(edges, ids)
            if invalidated or not ids:
                break
        self._boundary = _Boundary(at, frozenset(joined))

    def _cluster_time(self) -> Timestamp | None:
        """The cluster time of the latest write this server applied (None: not told)."""
        at = self.rt.db.command("ping").get("operationTime")
        return at if isinstance(at, Timestamp) else None

    def _drifted_at(self, edges: list[Edge], at: Timestamp | None) -> bool:
        """Whether old-shape documents of ``edges`` existed at cluster time ``at``.

        Read from a snapshot at ``at``: documents written later are the stream's. A
        server that cannot read at that time (or no time at all) counts as drift:
        the verify pass decides.
        """
        if at is None:
            return True
        for edge in edges:
            command: Document = {
                "find": self.collection,
                "filter": edge.job.match,
                "projection": {"_id": 1},
                "limit": 1,
                "singleBatch": True,
                "readConcern": {"level": "snapshot", "atClusterTime": at},
            }
            hint = probe_hint(self.rt, edge.job.spec)
            if hint is not None:
                command["hint"] = dict(hint)
            try:
                found = self.rt.db.command(command)["cursor"]["firstBatch"]
            except OperationFailure as error:
                log.info(
                    "drift watcher %s: no snapshot read (%s); verifying instead",
                    self.collection,
                    error_text(error),
                )
                return True
            if found:
                return True
        return False

    def _gather(self, stream: CollectionChangeStream[Document]) -> tuple[dict[str, Any], bool]:
        """Up to ``batch_size`` distinct ids, or what came within ``batch_ms`` of the first."""
        ids: dict[str, Any] = {}
        first_at: float | None = None
        invalidated = False
        window = self.settings.batch_ms / 1000
        while len(ids) < self.settings.batch_size and not self.cancel.cancelled:
            if first_at is not None and monotonic() - first_at >= window:
                break
            event = stream.try_next()
            if event is None:
                break
            if event.get("operationType") == "invalidate":
                invalidated = True
                break
            self._count("events", 1)
            key = (event.get("documentKey") or {}).get("_id")
            if key is None:
                continue
            ids.setdefault(canonical_id_key(key), key)
            if first_at is None:
                first_at = monotonic()
        if ids:
            with self._guard:
                self.last_event_at = utc_now()
        return ids, invalidated

    # -- the row ------------------------------------------------------------------------

    def _checkpoint(
        self,
        *,
        force: bool = False,
        fields: Mapping[str, Any] | None = None,
        clear_token: bool = False,
        error: BaseException | None = None,
    ) -> bool:
        """Save position, counters and ``fields`` when due; False when no longer the leader."""
        if self._fence is None:
            return False
        if not force and monotonic() - self._saved_at < self.settings.checkpoint_seconds:
            return True
        with self._guard:
            pending = dict(self._pending)
            last_event_at = self.last_event_at
        values: Document = dict(fields or {})
        if self._token is not None and not clear_token:
            values["resume_token"] = self._token
        if last_event_at is not None:
            values["last_event_at"] = last_event_at
        if error is not None:
            values["last_error"] = error_text(error)
        unset = ["resume_token"] if clear_token else []
        if values.get("state") == "streaming":
            unset.append("last_error")
        saved = self.store.save(
            self.collection, self._fence, fields=values, counters=pending, unset=unset
        )
        if not saved:
            log.warning("drift watcher %s: another process leads now", self.collection)
            return False
        with self._guard:
            for key, value in pending.items():
                self._pending[key] -= value
        self._saved_at = monotonic()
        return True
