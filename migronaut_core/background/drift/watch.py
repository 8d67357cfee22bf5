"""The live drift watcher: old-shape writes upgraded moments after they land.

After a background migration completed, an old release of the application (a pod
not yet redeployed, a forgotten worker) may still write the old shape. The poll
(:func:`~migronaut_core.background.drift.verify.verify`) finds such documents at its next
run; the watcher follows a change stream per collection instead and upgrades them
within moments, through the lanes' write path
(:func:`~migronaut_core.background.engine.batch.apply_batch`: the registered spec, the
file's transform, the version guard, only changed fields written).

Guarantees:

- One leader per collection across every process: the holder of the
  ``watch:<collection>`` lock (TTL, heartbeat, fencing token). Other processes
  stand by, try the lock now and then, and take over once a dead leader's lock
  lapses by the server's clock.
- At least once: the leader saves the stream's resume token in the watch
  collection after each batch it served (and the idle post-batch token now and
  then), so a new leader resumes after the last served event; replayed events
  are harmless (the version guard makes a second upgrade a no-op).
- No gap and no overlap on a fresh start (no saved token, or its history is gone
  because the oplog rolled over): the stream starts just after a cluster time,
  and the collection is probed with a snapshot read at that time. Only when the
  probe finds old-shape documents (written before the stream, so no stream will
  see them) does a verify pass reopen or report their migrations; writes racing
  the start are the stream's. A migration that completes while a stream runs
  joins it the same way (a new stream after a cluster time, the old one served
  up to it, the newcomer probed as of it).
- It only upgrades with completed forward migrations, applied in order of their
  source version (1→2, then 2→3), and stands aside on a collection while a revert
  is registered there and not finished.
- Logs, events and status never carry document values, ``_id``\\ s or the resume
  token: collection and migration names, states and counts only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import pendulum
from bson import Timestamp
from pymongo.change_stream import CollectionChangeStream
from pymongo.client_session import ClientSession
from pymongo.collection import Collection
from pymongo.errors import OperationFailure, PyMongoError

from migronaut_core.background.backoff import Backoff
from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.control.actions import control
from migronaut_core.background.drift.verify import OnDrift, verify
from migronaut_core.background.engine.batch import (
    BatchResult,
    TransformContext,
    apply_batch,
)
from migronaut_core.background.engine.transactional import transaction_options
from migronaut_core.background.job import Job, job_for
from migronaut_core.background.runtime import Runtime
from migronaut_core.background.spec import TERMINAL
from migronaut_core.background.store.watch import WATCH_COUNTERS, Fence, WatchStore
from migronaut_core.background.views import json_safe
from migronaut_core.changelog import Actor
from migronaut_core.errors import (
    BackgroundConflictError,
    ConfigInvalidError,
    DocError,
    DocumentFailedError,
    MigronautError,
)
from migronaut_core.lock import MongoLock
from migronaut_core.scrub import error_text
from migronaut_core.server_errors import history_lost
from migronaut_core.versioning import canonical_id_key

log = logging.getLogger(__name__)

Document = dict[str, Any]
WatchState = Literal["starting", "streaming", "standby", "stopped", "error"]

#: The longest a failing stream backs off before it opens again.
MAX_BACKOFF_SECONDS = 30.0
#: Who the watcher's controls (reopen) are recorded as.
WATCH_ACTOR = "migronaut-watch"

_EVENTS = ("insert", "update", "replace")


# -- settings --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WatchSettings:
    """How a watcher runs; built and checked by :func:`watch_settings`.

    :param collections: only these collections (default: every collection with a
        completed forward background migration).
    :param on_drift: what to do with old-shape documents the watcher cannot
        upgrade itself (found by the probe of a fresh start, or whose upgrade
        failed): ``reopen`` the migration (its lanes take them) or only ``report``.
    :param batch_size: upgrade at most this many documents at once.
    :param batch_ms: wait at most this long for more events before upgrading.
    :param refresh_seconds: how often the set of migrations and collections is
        read again.
    :param leader_retry_seconds: how often a standby tries to take the lead.
    :param checkpoint_seconds: how often an idle leader saves its position.
    """

    collections: tuple[str, ...] | None = None
    on_drift: OnDrift = "reopen"
    batch_size: int = 100
    batch_ms: int = 200
    refresh_seconds: float = 10.0
    leader_retry_seconds: float = 10.0
    checkpoint_seconds: float = 2.0


def watch_settings(
    *,
    ttl_seconds: float,
    collections: Sequence[str] | None = None,
    on_drift: str = "reopen",
    batch_size: int = 100,
    batch_ms: int = 200,
    refresh_seconds: float = 10.0,
    leader_retry_seconds: float | None = None,
    checkpoint_seconds: float = 2.0,
) -> WatchSettings:
    """Check the watcher's options (before anything connects) and fill in defaults.

    ``leader_retry_seconds`` defaults to half the lock TTL (0.5 s to 10 s), so a
    standby takes over within about one TTL of a leader's death.

    :raises ConfigInvalidError: naming the option.
    """
    if on_drift not in ("reopen", "report"):
        raise ConfigInvalidError("on_drift must be 'reopen' or 'report'", {"key": "on_drift"})
    names: tuple[str, ...] | None = None
    if collections is not None:
        if isinstance(collections, str) or not all(
            isinstance(name, str) and name for name in collections
        ):
            raise ConfigInvalidError(
                "collections must be a list of collection names", {"key": "collections"}
            )
        names = tuple(dict.fromkeys(collections))
    _check_int("batch_size", batch_size, 1, 10_000)
    _check_int("batch_ms", batch_ms, 1, 60_000)
    retry = leader_retry_seconds
    if retry is None:
        retry = min(10.0, max(0.5, ttl_seconds / 2))
    for key, value in (
        ("refresh_seconds", refresh_seconds),
        ("leader_retry_seconds", retry),
        ("checkpoint_seconds", checkpoint_seconds),
    ):
        _check_seconds(key, value)
    return WatchSettings(
        collections=names,
        on_drift="report" if on_drift == "report" else "reopen",
        batch_size=batch_size,
        batch_ms=batch_ms,
        refresh_seconds=float(refresh_seconds),
        leader_retry_seconds=float(retry),
        checkpoint_seconds=float(checkpoint_seconds),
    )


def _check_int(key: str, value: Any, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigInvalidError(f"{key} must be an integer from {low} to {high}", {"key": key})


def _check_seconds(key: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.05 <= value <= 3600:
        raise ConfigInvalidError(f"{key} must be between 0.05 and 3600 seconds", {"key": key})


def require_change_streams(rt: Runtime) -> None:
    """Refuse a deployment without change streams (a standalone server).

    :raises ConfigInvalidError: telling the user to keep drift mode ``poll``.
    """
    rt.client.admin.command("ping")
    kind = rt.client.topology_description.topology_type_name
    if kind in ("ReplicaSetWithPrimary", "ReplicaSetNoPrimary", "Sharded", "LoadBalanced"):
        return
    # A direct connection to one member reads as "Single": ask the server itself.
    hello = rt.client.admin.command("hello")
    if hello.get("setName") or hello.get("msg") == "isdbgrid":
        return
    raise ConfigInvalidError(
        "the live drift watcher needs change streams, which a standalone server does not "
        "have (a replica set or a sharded cluster does); keep drift mode 'poll' here: run "
        "verify_background (the migronaut_drift DAG) on a schedule",
        {"key": "drift", "mode": "poll"},
    )


@dataclass(frozen=True, slots=True)
class _Boundary:
    """Where a stream starts (just after cluster time ``at``) and what to probe as of ``at``."""

    at: Timestamp | None
    probe: frozenset[str]


# -- what a collection's watcher serves --------------------------------------------------


@dataclass(frozen=True, slots=True)
class Edge:
    """One completed forward migration of a watched collection, ready to upgrade with."""

    name: str
    field: str
    source: int
    target: int
    job: Job
    #: What makes this edge different from a re-read one (reload when it changes).
    signature: tuple[Any, ...]


def watched_collections(
    states: Sequence[Mapping[str, Any]], wanted: Sequence[str] | None
) -> list[str]:
    """Collections with a completed forward declarative migration and no revert at work."""
    completed: set[str] = set()
    reverting: set[str] = set()
    for state in states:
        spec = state.get("spec") or {}
        collection = spec.get("collection")
        if not collection or spec.get("mode", "declarative") != "declarative":
            continue
        if state.get("direction") == "revert":
            if state.get("status") not in TERMINAL:
                reverting.add(collection)
            continue
        if state.get("status") == "completed":
            completed.add(collection)
    names = completed - reverting
    if wanted is not None:
        names &= set(wanted)
    return sorted(names)


def edge_states(states: Sequence[Mapping[str, Any]], collection: str) -> list[Mapping[str, Any]]:
    """The states a collection's watcher upgrades with, in order of source version.

    Empty while a revert is at work on the collection: the watcher stands aside.
    """
    if collection not in watched_collections(states, [collection]):
        return []
    edges = [
        state
        for state in states
        if state.get("status") == "completed"
        and state.get("direction") != "revert"
        and (state.get("spec") or {}).get("collection") == collection
        and (state.get("spec") or {}).get("mode", "declarative") == "declarative"
    ]
    return sorted(
        edges, key=lambda state: (state["spec"]["from"], state["spec"]["to"], state["_id"])
    )


def edge_signature(state: Mapping[str, Any]) -> tuple[Any, ...]:
    return (
        state["_id"],
        state.get("checksum"),
        state.get("generation", 0),
        len(state.get("bad_ids") or []),
    )


def watch_pipeline(edges: Sequence[Edge]) -> list[Document]:
    """The change stream's pipeline: writes that leave a document at a source version.

    Inserts, updates and replaces whose (looked-up) document is at the source
    version of any edge, plus ``invalidate``. Only the event's id, type and
    document key travel back: no document values.
    """
    by_field: dict[str, set[int]] = {}
    for edge in edges:
        by_field.setdefault(edge.field, set()).add(edge.source)
    branches = [
        {f"fullDocument.{name}": {"$in": [None if v == 0 else v for v in sorted(versions)]}}
        for name, versions in sorted(by_field.items())
    ]
    return [
        {
            "$match": {
                "$or": [
                    {"operationType": "invalidate"},
                    {"operationType": {"$in": list(_EVENTS)}, "$or": branches},
                ]
            }
        },
        {"$project": {"operationType": 1, "documentKey": 1, "clusterTime": 1}},
    ]


# -- one collection ------------------------------------------------------------------------


class _Follower(threading.Thread):
    """One collection in one process: lead it when its lock is free, stand by otherwise."""

    def __init__(self, watcher: Watcher, collection: str) -> None:
        super().__init__(name=f"migronaut-watch-{collection}", daemon=True)
        self.watcher = watcher
        self.rt = watcher.rt
        self.store = watcher.store
        self.settings = watcher.settings
        self.collection = collection
        self.cancel = watcher.cancel.child()
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
                self._report(error)
                self._set_state("error", leading=False)
                if self.cancel.sleep(_BACKOFF.seconds(failures)):
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
        self._report(error)
        self._set_state("error", leading=True)
        self._checkpoint(force=True, fields={"state": "error"}, error=error)
        self.cancel.sleep(_BACKOFF.seconds(failures))
        return failures

    def _edges(self) -> tuple[list[Edge], int]:
        """The edges to serve, and how many completed migrations there are to serve."""
        states = edge_states(self.rt.store.list_states(), self.collection)
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
            for state in edge_states(self.rt.store.list_states(), self.collection)
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
                if probed and self._drifted_at(probed, boundary.at) and self._catch_up():
                    return True  # a migration was reopened: read the edges again
            self._set_state("streaming", leading=True)
            if not self._checkpoint(force=True, fields={"state": "streaming", **described}):
                return False
            signature = [edge.signature for edge in edges]
            refresh_at = time.monotonic() + self.settings.refresh_seconds
            while not self.cancel.cancelled:
                if self.lock.lost:
                    return False
                ids, invalidated = self._gather(stream)
                reread = self._upgrade(edges, ids) if ids else False
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
                if reread or time.monotonic() >= refresh_at:
                    current = self._signature()
                    if reread or current != signature:
                        self._hand_over(stream, edges, {row[0] for row in current} - names)
                        return True
                    refresh_at = time.monotonic() + self.settings.refresh_seconds
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
                self._upgrade(edges, ids)
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
            if edge.job.hint is not None:
                command["hint"] = dict(edge.job.hint)
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
            if first_at is not None and time.monotonic() - first_at >= window:
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
                first_at = time.monotonic()
        if ids:
            with self._guard:
                self.last_event_at = pendulum.now("UTC")
        return ids, invalidated

    def _upgrade(self, edges: list[Edge], ids: Mapping[str, Any]) -> bool:
        """Upgrade these documents edge by edge; True when a migration was reopened."""
        collection = self.rt.db[self.collection]
        keys = list(ids.values())
        touched: set[str] = set()
        reopened = False
        for edge in edges:
            docs = list(collection.find({"$and": [edge.job.match, {"_id": {"$in": keys}}]}))
            if not docs:
                continue
            touched.update(canonical_id_key(doc["_id"]) for doc in docs)
            try:
                result = self._rewrite(edge.job, docs, collection)
            except PyMongoError:
                raise  # the server's trouble: the stream reopens and the batch is served again
            except Exception as error:
                # A batch transform that failed cannot say which document was at fault:
                # all of them failed, rather than the same batch failing forever.
                text = error_text(error)
                result = BatchResult(
                    errors=[DocError(doc["_id"], text, "transform") for doc in docs]
                )
            self._count("upgraded", result.migrated)
            if result.migrated:
                self._drift(edge.name, "upgraded", result.migrated)
            if result.errors:
                self._count("errors", len(result.errors))
                reopened = self._failed(edge, result.errors) or reopened
        self._count("skipped", len(ids) - len(touched))
        return reopened

    def _rewrite(
        self, job: Job, docs: list[Document], collection: Collection[Document]
    ) -> BatchResult:
        if job.spec.transaction is None:
            return apply_batch(job, docs, collection, self._context(job))
        # One transaction per document, so a transform's side writes commit with it
        # and one bad document does not hold the others back.
        total = BatchResult()
        with self.rt.client.start_session() as session:
            for doc in docs:

                def attempt(s: ClientSession, doc: Document = doc) -> BatchResult:
                    return self._one_in_transaction(job, doc, collection, s)

                try:
                    one = session.with_transaction(attempt, **transaction_options(job.spec))
                except DocumentFailedError as failed:
                    total.errors.append(failed.error)
                    continue
                except BackgroundConflictError:
                    continue  # a concurrent write moved it; its own event comes next
                total.migrated += one.migrated
                total.errors.extend(one.errors)
        return total

    def _one_in_transaction(
        self, job: Job, doc: Document, collection: Collection[Document], session: ClientSession
    ) -> BatchResult:
        current = collection.find_one({"$and": [job.match, {"_id": doc["_id"]}]}, session=session)
        if current is None:
            return BatchResult()
        return apply_batch(
            job,
            [current],
            collection,
            self._context(job, session),
            session=session,
            strict=True,
            abort_on_conflict=True,
        )

    def _context(self, job: Job, session: ClientSession | None = None) -> TransformContext:
        return TransformContext(
            migration=job.name,
            direction=job.direction,
            generation=job.generation,
            partition="watch",
            db=self.rt.db,
            client=self.rt.client,
            log=job.log,
            cancel=self.cancel,
            session=session,
        )

    def _failed(self, edge: Edge, errors: Sequence[DocError]) -> bool:
        log.warning(
            "drift watcher %s: %d document(s) could not be upgraded by %s",
            self.collection,
            len(errors),
            edge.name,
        )
        if self.settings.on_drift != "reopen":
            self._drift(edge.name, "failed", len(errors))
            return False
        actor = Actor(requested_by=WATCH_ACTOR, reason="the drift watcher could not upgrade")
        try:
            applied = control(self.rt, edge.name, "retry", actor=actor).applied
        except MigronautError as error:
            self._report(error)
            applied = "unchanged"
        self._drift(edge.name, "reopened" if applied == "changed" else "failed", len(errors))
        return applied == "changed"

    def _catch_up(self) -> bool:
        """Verify the collection (old shapes from before the stream); True: one reopened."""
        actor = Actor(requested_by=WATCH_ACTOR, reason="old-shape documents found at stream start")
        result = verify(
            self.rt, on_drift=self.settings.on_drift, collections=[self.collection], actor=actor
        )
        reopened = False
        for row in result["drifted"]:
            self._drift(row["migration"], row["action"], None, source="verify")
            reopened = reopened or row["action"] == "reopened"
        return reopened

    def _drift(
        self, migration: str, action: str, count: int | None, *, source: str = "stream"
    ) -> None:
        payload: Document = {
            "migration": migration,
            "collection": self.collection,
            "source": source,
            "action": action,
        }
        if count is not None:
            payload["count"] = count
        self.rt.emit("background:drift", payload)

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
        if not force and time.monotonic() - self._saved_at < self.settings.checkpoint_seconds:
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
        self._saved_at = time.monotonic()
        return True

    def _report(self, error: BaseException) -> None:
        log.warning("drift watcher %s: %s", self.collection, error_text(error))


#: A failing watcher waits 0.5 s, doubling up to MAX_BACKOFF_SECONDS, each wait jittered by half.
_BACKOFF = Backoff(first=0.5, cap=MAX_BACKOFF_SECONDS, jitter=0.5)


# -- the handle ------------------------------------------------------------------------------


@dataclass(eq=False)
class Watcher:
    """A running drift watcher (see :func:`start_watch`); stop it with :meth:`stop`."""

    rt: Runtime
    store: WatchStore
    settings: WatchSettings
    cancel: CancelToken
    _followers: dict[str, _Follower] = field(default_factory=dict)
    _guard: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        """Whether it still watches (False once stopped or its cancel token fired)."""
        thread = self._thread
        return not self.cancel.cancelled and thread is not None and thread.is_alive()

    def status(self) -> list[dict[str, Any]]:
        """What this process does per collection: state, whether it leads, its counters.

        Counters are this process's; the rows (``background_watch_status``) add up
        every leader's.
        """
        with self._guard:
            followers = sorted(self._followers.values(), key=lambda item: item.collection)
        return [follower.view() for follower in followers]

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every stream, save its position, give up leadership; wait for the threads."""
        self.cancel.cancel("drift watcher stopped")
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        with self._guard:
            followers = list(self._followers.values())
        for follower in followers:
            follower.join(timeout)
            if follower.is_alive():
                log.warning("drift watcher %s did not stop in time", follower.collection)

    def __enter__(self) -> Watcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- supervising -----------------------------------------------------------------------

    def _start(self) -> None:
        self._refresh()
        self._thread = threading.Thread(target=self._supervise, name="migronaut-watch", daemon=True)
        self._thread.start()

    def _supervise(self) -> None:
        failures = 0
        while not self.cancel.sleep(self.settings.refresh_seconds):
            try:
                self._refresh()
                failures = 0
            except (PyMongoError, MigronautError) as error:
                failures += 1
                log.warning("drift watcher: reading the migrations failed (%s)", error_text(error))
                if self.cancel.sleep(_BACKOFF.seconds(failures)):
                    break

    def _refresh(self) -> None:
        wanted = set(watched_collections(self.rt.store.list_states(), self.settings.collections))
        with self._guard:
            for name, follower in list(self._followers.items()):
                if not follower.is_alive() and follower.ident is not None:
                    del self._followers[name]
                elif name not in wanted:
                    follower.cancel.cancel("no completed migration to serve")
            started = [name for name in sorted(wanted) if name not in self._followers]
            for name in started:
                self._followers[name] = _Follower(self, name)
        for name in started:
            self._followers[name].start()


def start_watch(
    rt: Runtime,
    store: WatchStore,
    settings: WatchSettings,
    *,
    cancel: CancelToken | None = None,
) -> Watcher:
    """Start watching in background threads and return the handle.

    :raises ConfigInvalidError: the deployment has no change streams.
    """
    require_change_streams(rt)
    token = cancel.child() if cancel is not None else CancelToken()
    watcher = Watcher(rt=rt, store=store, settings=settings, cancel=token)
    watcher._start()
    return watcher
