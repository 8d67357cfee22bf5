"""A lane's slice: claim a partition and a slot, work it until the slice ends, release.

A slice answers with an outcome:

- ``yielded`` — time is up and work is left (run another slice soon);
- ``exhausted`` — nothing left to claim in this plan;
- ``busy`` — work is left but every slot is held (``retry_after_ms``);
- ``deferred`` — this process cannot work it yet (``reason``): its copy of the file
  differs from the registered one (``checksum_mismatch``: a deploy reached some
  workers first) or is missing (``file_missing``); try again after
  ``retry_after_ms``, and give up with :meth:`SliceResult.deferred_too_long` past a bound;
- ``stale`` — no current plan (the coordinator must run first), or a newer release
  wrote the state (a process of that release drives it);
- ``superseded`` — the lane was started for another registration, generation or
  round than the migration's current one (a :class:`LaneBinding`: re-registered,
  a new pass, a newer round took over); it claims nothing;
- ``paused`` / ``cancelled`` / ``failed`` — the migration's status says stop;
- ``stopped`` — the caller's cancel token fired;
- ``lost`` — the lease was reaped or unlocked under us; nothing more was written;
- ``held`` — no maintenance window is open (``held_until``: when the next one
  opens), the target's brake is on, or a MongoDB health signal is past its hard
  limit (``held_by``: which, its reading and the limit; ``brake`` for the brake,
  :mod:`~migronaut_core.background.throttle.budget`): the lane stopped at a
  batch boundary, released its partition (or claimed none), and the state's
  ``hold`` (its ``reason``: ``window``, ``brake`` or ``health``) says so to every
  status reader; try again after ``retry_after_ms``. The first lane to find a
  window open, the brake off and every signal within its hard limit again
  removes the hold.

Every event a lane emits (``background:slice:start``, ``batch``, ``throttle``,
``slice:end``, ``lease:lost``, and ``failed`` when its partition fails the
migration) carries ``run_id``: the lane's id, which is also its leases' owner, so
listeners can tell concurrent lanes apart.

A slice that raises (a transform that fails a whole batch, the server) is
counted on its partition (``max_slice_failures`` of them fail it) and re-raised
as :class:`~migronaut_core.errors.BatchFailed` when it is worth retrying. A
dropped connection or a stepped-down primary is not the partition's failure: its
partition is released uncounted.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final, Literal, cast, get_args

import pendulum

from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.engine.partition import (
    PartitionContext,
    PartitionResult,
    add_counters,
)
from migronaut_core.background.engine.worker import process_partition
from migronaut_core.background.gauges import LANE_REPORT_EVERY_S, publish_status
from migronaut_core.background.job import Job, assert_transactions, job_for, plan_is_stale
from migronaut_core.background.lifecycle import fail_state
from migronaut_core.background.runtime import Runtime
from migronaut_core.background.store import (
    HoldDocument,
    Lease,
    PartitionDocument,
    StateDocument,
    newer_schema,
)
from migronaut_core.background.telemetry import (
    ATTR_GENERATION,
    ATTR_OUTCOME,
    ATTR_PARTITION,
    ATTR_SHARD,
    ATTR_SLOT,
    SPAN_SLICE,
    AttributeValue,
)
from migronaut_core.background.throttle import (
    BRAKE_BREACH,
    BRAKE_SIGNAL,
    HealthBreach,
    HealthReading,
    Throttle,
    first_breach,
    oplog_headroom_key,
    oplog_headroom_s,
)
from migronaut_core.clock import elapsed_ms, monotonic, utc_now
from migronaut_core.errors import (
    BatchFailed,
    ChecksumMismatchError,
    LockLostError,
    MigrationFileNotFoundError,
    MigronautError,
)
from migronaut_core.json_shape import json_field, to_json_dict
from migronaut_core.scrub import error_text
from migronaut_core.server_errors import is_retryable_write
from migronaut_core.windows import window_state

log = logging.getLogger("migronaut_core.background")

_CONTROL_FIELDS = {"status": 1, "generation": 1, "plan.token": 1}
#: A held lane looks again this soon (the health probe reads at most once a second).
HOLD_RETRY_MS: Final = 2_000
#: A hold's stored reading is refreshed at most this often, whatever the lanes.
HOLD_REFRESH_S: Final = 10.0
#: A lane waiting for a maintenance window looks again at least this often.
WINDOW_RETRY_MAX_MS: Final = 300_000


#: How a slice ended (the module's docstring says what each means).
SliceOutcome = Literal[
    "yielded",
    "exhausted",
    "busy",
    "deferred",
    "stale",
    "superseded",
    "paused",
    "cancelled",
    "failed",
    "stopped",
    "lost",
    "held",
]


SLICE_OUTCOMES: frozenset[str] = frozenset(get_args(SliceOutcome))


@dataclass(frozen=True, slots=True)
class SliceResult:
    """How one slice ended (``outcome``: exhausted, yielded, stopped, stale...), its counters."""

    outcome: SliceOutcome
    counters: dict[str, int] = field(default_factory=dict)
    retry_after_ms: int | None = field(default=None, metadata=json_field(omit="none"))
    error: str | None = field(default=None, metadata=json_field(omit="none"))
    #: Why a slice was ``deferred`` (``checksum_mismatch`` or ``file_missing``) or
    #: ``superseded`` (what changed: ``registration``, ``generation`` or ``round``).
    reason: str | None = field(default=None, metadata=json_field(omit="none"))
    #: A ``checksum_mismatch``'s short checksums: ``registered`` and ``on_disk``.
    checksums: dict[str, str] | None = field(default=None, metadata=json_field(omit="none"))
    #: Why a slice was ``held``: the health signal past its hard limit, and its reading.
    held_by: HealthBreach | None = field(default=None, metadata=json_field(omit="none"))
    #: Or: no maintenance window is open; when the next one opens (UTC).
    held_until: datetime | None = field(default=None, metadata=json_field(omit="none"))

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)

    def deferred_too_long(
        self, name: str, waited_seconds: float
    ) -> ChecksumMismatchError | MigrationFileNotFoundError:
        """The error a lane that kept deferring on a deploy ends with, once its caller gives up.

        Names the migration, how long it waited and, for a checksum mismatch, both
        checksums' short forms (never anything of the file's content).
        """
        context: dict[str, Any] = {"migration": name, "waited_seconds": round(waited_seconds)}
        if self.reason == "file_missing":
            return MigrationFileNotFoundError(
                f"background migration {name}: its file has been missing on this worker for "
                f"{waited_seconds:.0f} s; deploy it to every worker that runs lanes",
                context,
            )
        checksums = self.checksums or {}
        registered = checksums.get("registered", "?")
        on_disk = checksums.get("on_disk", "?")
        return ChecksumMismatchError(
            f"background migration {name}: the file on this worker ({on_disk}) has differed "
            f"from the registered one ({registered}) for {waited_seconds:.0f} s; finish the "
            "deploy, or pin the new version (migronaut background repin)",
            {**context, "registered": registered, "on_disk": on_disk},
        )


@dataclass(frozen=True, slots=True)
class LaneBinding:
    """What a lane was started for: a coordinator step's registration, generation and round.

    A driver that starts lanes from a ``process`` answer (Airflow maps one task per
    slot) binds each to the answer's ``registration``, ``generation`` and ``round``;
    a slice of a lane whose binding no longer matches the migration's state (it was
    registered again, a new pass began, a newer round took the migration over)
    answers ``superseded`` and claims nothing: an older round bows out. A field left
    None is not compared.
    """

    registration: str | None = None
    generation: int | None = None
    round: int | None = None

    def mismatch(self, state: StateDocument) -> str | None:
        """What of ``state`` differs from this binding (``registration``, ``generation`` or
        ``round``), or None when the lane may go on."""
        current: dict[str, Any] = {
            "registration": state.get("registration"),
            "generation": state.get("generation"),
            "round": state.get("round"),
        }
        for key, expected in (
            ("registration", self.registration),
            ("generation", self.generation),
            ("round", self.round),
        ):
            if expected is not None and current[key] != expected:
                return key
        return None


@dataclass(frozen=True, slots=True)
class SliceContext:
    """One claimed partition of a slice: what working it, measuring it and charging a
    failure to it all need."""

    rt: Runtime
    job: Job
    state: StateDocument
    lease: Lease
    partition: PartitionDocument
    #: When the slice ends (a :func:`~migronaut_core.clock.monotonic` value).
    deadline: float
    #: The lane's id: its leases' owner and its events' ``run_id``.
    owner: str

    def emit(self, event: str, payload: dict[str, Any]) -> None:
        """Emit one of this lane's events, stamped with its ``run_id``."""
        self.rt.emit(event, _stamped(self.owner, payload))


class LeaseKeeper:
    """Renews a lease in the background while a lane works a partition.

    A transform slower than the lease's TTL would otherwise lose it mid-batch;
    a renewal that matches nothing means it was reaped or unlocked, and the
    lane stops before its next write.
    """

    def __init__(self, rt: Runtime, lease: Lease) -> None:
        self._rt = rt
        self._lease = lease
        self._stop = threading.Event()
        self.lost = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="migronaut-lease")

    def _run(self) -> None:
        interval = max(0.05, self._lease.ttl_ms / 3000)
        while not self._stop.wait(interval):
            try:
                if not self._rt.store.leases.renew(self._lease):
                    self.lost.set()
                    return
            except Exception:
                log.warning("renewing a lease failed; retrying", exc_info=False)

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def run_slice(
    rt: Runtime,
    name: str,
    *,
    slice_ms: int | None = None,
    owner: str | None = None,
    cancel: CancelToken | None = None,
    binding: LaneBinding | None = None,
) -> SliceResult:
    """Run one slice of one lane; see the module docstring for the outcomes.

    :param binding: what the lane was started for; a slice of a lane whose binding
        the state no longer matches answers ``superseded`` before any claim.
    """
    token = cancel or CancelToken()
    owner = owner or uuid.uuid4().hex[:12]
    state = rt.store.states.get(name, projection={"history": 0, "doc_errors": 0})
    refused = _not_claimable(name, state, binding)
    if refused is not None or state is None:
        return refused or SliceResult("cancelled")
    try:
        try:
            job = job_for(rt, name, state, token)
        except (ChecksumMismatchError, MigrationFileNotFoundError) as exc:
            return _deferred(rt, name, exc)
        if job.spec.collection is not None:
            rt.telemetry.collection_of(name, job.spec.collection)
        # A plan made before a reshard (or by another partitioner): the coordinator re-splits first.
        if plan_is_stale(job, state["plan"]):
            return SliceResult("stale")
        assert_transactions(rt, name, job.spec)
    except Exception as exc:
        # Before any claim: nothing to count it on, but measured like any failed slice.
        rt.telemetry.slice_ended(name, "error", 0.0, error_type=type(exc).__name__)
        raise
    deadline = monotonic() + (slice_ms if slice_ms is not None else job.spec.slice_ms) / 1000
    counters: dict[str, int] = {}
    worked = False
    while True:
        if token.cancelled:
            return SliceResult("stopped", counters)
        if worked and monotonic() >= deadline:
            return SliceResult("yielded", counters)
        holding = _holding(rt, job, state, counters)
        if holding is not None:
            return holding
        _release_hold(rt, state)
        claim = rt.store.leases.claim(
            name,
            generation=state["generation"],
            plan=state["plan"]["token"],
            max_parallel=job.spec.max_parallel,
            ttl_ms=rt.ttl_ms,
            owner=owner,
            # Lanes per shard, on partitions that belong to one.
            shard_concurrency=job.spec.shard_concurrency if job.partitioner.id == "shard" else None,
        )
        rt.telemetry.leases_reclaimed(name, claim.reaped)
        if claim.exhausted:
            return SliceResult("exhausted", counters)
        if claim.busy or claim.lease is None or claim.partition is None:
            if worked:
                return SliceResult("yielded", counters)
            return SliceResult("busy", counters, retry_after_ms=max(1, rt.ttl_ms // 4))
        worked = True
        rt.telemetry.lease_claimed(name, shard=_shard_of(claim.partition))
        held = SliceContext(rt, job, state, claim.lease, claim.partition, deadline, owner)
        result = _held(held)
        add_counters(counters, result.counters)
        if result.outcome == "lost":
            rt.telemetry.lease_lost(name, shard=_shard_of(claim.partition))
            return SliceResult("lost", counters)
        if result.outcome == "failed":
            message = error_text(result.error) if result.error else "failed"
            if result.error is not None:
                rt.store.leases.fail_partition(claim.lease, error=message)
                fail_state(rt, state, message, stamp={"run_id": owner})
            return SliceResult("failed", counters, error=message)
        if result.outcome != "exhausted":
            rt.store.leases.release(claim.lease)
            if result.outcome == "held":
                return _held_by_result(rt, job, state, result, counters)
            return SliceResult(_as_slice_outcome(result.outcome), counters)


def _holding(
    rt: Runtime, job: Job, state: StateDocument, counters: dict[str, int]
) -> SliceResult | None:
    """A ``held`` answer when no window is open, the brake is on or a health signal is
    past its hard limit (in that order); None: the lane may claim."""
    closed = window_state(rt.windows_of(job.spec), rt.wall_clock())
    if not closed.open:
        return _hold_for_window(rt, state, closed.opens_at, counters)
    if (brake := rt.budget.brake()) is not None:
        return _hold_for_brake(rt, state, brake, counters)
    reading = _health_reading(rt, job)
    breach = _hard_breach(job, reading)
    return None if breach is None else _hold(rt, state, breach, reading, counters)


def _held_by_result(
    rt: Runtime, job: Job, state: StateDocument, result: PartitionResult, counters: dict[str, int]
) -> SliceResult:
    """The hold a partition's ``held`` outcome names, recorded on the state."""
    if result.held_by is not None and result.held_by.signal == BRAKE_SIGNAL:
        return _hold_for_brake(rt, state, rt.budget.brake() or {}, counters)
    if result.held_by is not None:
        return _hold(rt, state, result.held_by, _health_reading(rt, job), counters)
    return _hold_for_window(rt, state, result.held_until, counters)


def _not_claimable(
    name: str, state: StateDocument | None, binding: LaneBinding | None
) -> SliceResult | None:
    """Why a slice may claim nothing on this state (its answer), or None when it may."""
    if state is None:
        return SliceResult("cancelled")
    if binding is not None and (changed := binding.mismatch(state)) is not None:
        log.info(
            "%s: a lane of registration %s, generation %s, round %s bows out: the "
            "migration's %s changed since it was started; claiming nothing",
            name,
            binding.registration,
            binding.generation,
            binding.round,
            changed,
        )
        return SliceResult("superseded", reason=changed)
    status = state["status"]
    if status in ("paused", "cancelled", "failed"):
        return SliceResult(cast(SliceOutcome, status))
    if status != "running" or state.get("phase") != "process" or state.get("plan") is None:
        return SliceResult("exhausted" if status == "completed" else "stale")
    # A newer release's plan may hold scopes this one cannot read: the coordinator waits, so do we.
    if newer_schema(state):
        return SliceResult("stale")
    return None


def _health_reading(rt: Runtime, job: Job) -> HealthReading | None:
    """The cluster's health (the probe's cached reading), when the spec watches it."""
    if job.spec.health is None:
        return None
    reading = rt.throttles.health_probe(rt.client).read(rt.warn_once)
    rt.telemetry.health_read(job.name, reading.signals())
    return reading


def _hard_breach(job: Job, reading: HealthReading | None) -> HealthBreach | None:
    if reading is None or job.spec.health is None:
        return None
    return first_breach(reading, job.spec.health, "hard")


def _hold(
    rt: Runtime,
    state: StateDocument,
    breach: HealthBreach,
    reading: HealthReading | None,
    counters: dict[str, int],
) -> SliceResult:
    """Hold the lane (no partition claimed or kept) and say why on the state, once per signal."""
    name = state["_id"]
    now = utc_now()
    hold: HoldDocument = {
        "reason": "health",
        "signal": breach.signal,
        "level": breach.level,
        "reading": breach.reading,
        "limit": breach.limit,
        "since": _hold_since(state, "health", breach.signal, now),
        "at": now,
    }
    if _record_hold(rt, state, hold):
        log.warning(
            "%s: lanes hold: %s reads %s, past its hard limit %s",
            name,
            breach.signal,
            breach.reading,
            breach.limit,
        )
        rt.emit("background:throttle", {"migration": name, "reason": "held", **breach.to_dict()})
    rt.telemetry.hold_observed(name, held=True)
    _warn_oplog_headroom(rt, name, hold["since"], reading)
    return SliceResult("held", counters, retry_after_ms=HOLD_RETRY_MS, held_by=breach)


def _hold_for_window(
    rt: Runtime, state: StateDocument, opens_at: datetime | None, counters: dict[str, int]
) -> SliceResult:
    """Hold the lane until the next maintenance window opens, and say so on the state.

    The lane looks again when it opens, or after :data:`WINDOW_RETRY_MAX_MS` if
    that is sooner (edited windows apply within that); never sooner than
    :data:`HOLD_RETRY_MS`.
    """
    name = state["_id"]
    now = utc_now()
    until = opens_at or now + timedelta(milliseconds=WINDOW_RETRY_MAX_MS)
    hold: HoldDocument = {
        "reason": "window",
        "until": until,
        "since": _hold_since(state, "window", None, now),
        "at": now,
    }
    if _record_hold(rt, state, hold):
        log.info("%s: lanes wait for a maintenance window until %s", name, until.isoformat())
        rt.telemetry.throttled(name, "window")
        rt.emit(
            "background:throttle",
            {"migration": name, "reason": "held", "signal": "window", "until": until.isoformat()},
        )
    rt.telemetry.hold_observed(name, held=True, reason="window")
    wait_ms = (until - rt.wall_clock()).total_seconds() * 1000
    retry_ms = int(min(WINDOW_RETRY_MAX_MS, max(HOLD_RETRY_MS, wait_ms)))
    return SliceResult("held", counters, retry_after_ms=retry_ms, held_until=until)


def _hold_for_brake(
    rt: Runtime, state: StateDocument, brake: Mapping[str, object], counters: dict[str, int]
) -> SliceResult:
    """Hold the lane while the target's brake is on, and say so on the state.

    The hold carries no ``until`` (a stall watch would trust it that long): it is
    current while held lanes confirm it, and the brake's own ``until`` is the
    brake's (``brake-status``).
    """
    name = state["_id"]
    now = utc_now()
    hold: HoldDocument = {
        "reason": "brake",
        "signal": BRAKE_SIGNAL,
        "since": _hold_since(state, "brake", BRAKE_SIGNAL, now),
        "at": now,
    }
    if _record_hold(rt, state, hold):
        log.warning("%s: lanes hold: the target's brake is on (%s)", name, brake.get("reason"))
        rt.emit("background:throttle", {"migration": name, "reason": "held", "signal": "brake"})
    rt.telemetry.hold_observed(name, held=True, reason="brake")
    return SliceResult(
        "held",
        counters,
        retry_after_ms=HOLD_RETRY_MS,
        held_by=BRAKE_BREACH,
    )


def _hold_since(state: StateDocument, reason: str, signal: str | None, now: datetime) -> datetime:
    """When the stored hold began, if it is this one; else ``now``."""
    stored = state.get("hold")
    same = stored and stored.get("reason") == reason and stored.get("signal") == signal
    return stored["since"] if stored and same else now


def _record_hold(rt: Runtime, state: StateDocument, hold: HoldDocument) -> bool:
    """Write the hold on the state (a refresh at most every :data:`HOLD_REFRESH_S`); True
    when it is a new one."""
    refresh_before = hold["at"] - timedelta(seconds=HOLD_REFRESH_S)
    fresh = rt.store.states.hold(state["_id"], hold, refresh_before=refresh_before)
    state["hold"] = hold
    return fresh


def _release_hold(rt: Runtime, state: StateDocument) -> None:
    """Nothing holds the lanes any more: the first lane to see it removes the hold."""
    stored = state.pop("hold", None)
    if stored is None or not rt.store.states.release_hold(state["_id"]):
        return
    rt.telemetry.hold_observed(state["_id"], held=False)
    cause = stored.get("signal") or stored.get("reason")
    log.info("%s: lanes resume: %s no longer holds them", state["_id"], cause)
    rt.emit(
        "background:throttle",
        {"migration": state["_id"], "reason": "released", "signal": cause},
    )


def _warn_oplog_headroom(rt: Runtime, name: str, since: Any, reading: HealthReading | None) -> None:
    """Warn once when a hold outlasts the oplog's window (less a margin).

    A change stream resumed after that (the drift watcher's) finds its position
    gone from the oplog and falls back to probing the collection.
    """
    headroom = None if reading is None else oplog_headroom_s(reading)
    if headroom is None:
        return
    held_s = (utc_now() - pendulum.instance(since)).total_seconds()
    if held_s <= headroom:
        return
    rt.warn_once(
        oplog_headroom_key(name),
        "%s: lanes have held for %d s, longer than the oplog's window (%d s) less a margin; "
        "a change stream resumed after this (the drift watcher's) will fall back to a probe",
        name,
        held_s,
        reading.oplog_capacity_seconds if reading is not None else 0,
    )


def _as_slice_outcome(outcome: str) -> SliceOutcome:
    """A partition's outcome as a slice's (the engine's words are a subset of the lane's)."""
    if outcome not in SLICE_OUTCOMES:
        raise ValueError(f"a partition ended with an outcome no slice has: {outcome!r}")
    return cast(SliceOutcome, outcome)


def _deferred(
    rt: Runtime, name: str, error: ChecksumMismatchError | MigrationFileNotFoundError
) -> SliceResult:
    """A deploy in progress: this worker's file is not the registered one (yet); claim nothing."""
    mismatch = isinstance(error, ChecksumMismatchError)
    log.warning("%s; deferring the slice", error.message)
    rt.telemetry.slice_ended(name, "deferred", 0.0)
    checksums: dict[str, str] | None = None
    if mismatch:
        checksums = {
            key: str(error.context[key])
            for key in ("registered", "on_disk")
            if key in error.context
        }
    return SliceResult(
        "deferred",
        retry_after_ms=max(1, rt.ttl_ms // 2),
        reason="checksum_mismatch" if mismatch else "file_missing",
        checksums=checksums or None,
    )


def _held(held: SliceContext) -> PartitionResult:
    """:func:`_work` in the lease's span, its duration measured by outcome."""
    rt, job, partition = held.rt, held.job, held.partition
    shard = _shard_of(partition)
    started = monotonic()
    attributes: dict[str, AttributeValue] = {
        ATTR_PARTITION: str(partition["_id"]),
        ATTR_SLOT: held.lease.slot,
        ATTR_GENERATION: int(held.state["generation"]),
        **({ATTR_SHARD: shard} if shard is not None else {}),
    }
    try:
        with rt.telemetry.span(SPAN_SLICE, job.name, attributes) as span:
            result = _work(held)
            span.set(ATTR_OUTCOME, result.outcome)
            span.set_counters(result.counters)
    except Exception as exc:
        rt.telemetry.slice_ended(
            job.name, "error", elapsed_ms(started), error_type=type(exc).__name__, shard=shard
        )
        raise
    rt.telemetry.slice_ended(job.name, result.outcome, elapsed_ms(started), shard=shard)
    return result


def _shard_of(partition: PartitionDocument) -> str | None:
    group = partition.get("group")
    return None if group is None else str(group)


def _stamped(owner: str, payload: dict[str, Any]) -> dict[str, Any]:
    """A lane event's payload with the lane's ``run_id`` (the seeds' ``runId`` stamp)."""
    return {"run_id": owner, **payload}


def _batch_written(held: SliceContext, info: dict[str, Any]) -> None:
    name, partition = held.job.name, held.partition
    counters = info.get("counters") or {}
    held.rt.telemetry.batch_written(
        name,
        size=int(counters.get("scanned", 0)),
        duration_ms=float(info.get("latency_ms", 0)),
        shard=_shard_of(partition),
    )
    held.emit(
        "background:batch",
        {
            "migration": name,
            "partition": str(partition["_id"]),
            **({"group": partition["group"]} if "group" in partition else {}),
            **info,
        },
    )


def _work(held: SliceContext) -> PartitionResult:
    """Work one leased partition, turning failures into counted outcomes."""
    rt, job, lease, partition, owner = held.rt, held.job, held.lease, held.partition, held.owner
    name = job.name
    held.emit(
        "background:slice:start",
        {
            "migration": name,
            "generation": held.state["generation"],
            "partition": str(partition["_id"]),
            "slot": lease.slot,
            "owner": owner,
        },
    )
    throttle = Throttle.for_job(
        job,
        partition,
        registry=rt.throttles,
        client=rt.client,
        warn=rt.warn_once,
        telemetry=rt.telemetry,
        budget=rt.budget,
        windows=rt.windows_of(job.spec),
        wall_clock=rt.wall_clock,
    )
    try:
        with LeaseKeeper(rt, lease) as keeper:
            context = PartitionContext(
                store=rt.store,
                lease=lease,
                partition=partition,
                db=rt.db,
                client=rt.client,
                deadline=held.deadline,
                throttle=throttle,
                read_control=lambda: rt.store.states.get(name, projection=_CONTROL_FIELDS),
                lease_lost=keeper.lost.is_set,
                on_throttle=lambda change: held.emit(
                    "background:throttle",
                    {"migration": name, "group": partition.get("group"), **change.to_dict()},
                ),
                on_batch=lambda info: _batch_written(held, info),
                on_transaction_retry=lambda reason: rt.telemetry.transaction_retried(name, reason),
            )
            result = process_partition(job, context, rt.store)
    except LockLostError:
        held.emit("background:lease:lost", {"migration": name, "partition": str(partition["_id"])})
        log.warning("%s: lane %s lost its lease; stopping", name, owner)
        return PartitionResult("lost", {})
    except Exception as exc:
        if job.cancel.cancelled:
            # The caller stopped the lane (a shutdown, a deploy) and a wait raised with it:
            # the stop, not the partition's fault. Listeners still see the slice end.
            held.emit(
                "background:slice:end",
                {
                    "migration": name,
                    "partition": str(partition["_id"]),
                    "outcome": "stopped",
                    "counters": {},
                },
            )
            return PartitionResult("stopped", {})
        raise _counted_failure(held, exc) from exc
    rt.store.states.set(name, {"last_progress_at": utc_now()})
    # A driver's coordinator may not step while its lanes work a whole pass: the lane
    # that recorded progress reports the gauges that move with it.
    publish_status(rt, name, every_s=LANE_REPORT_EVERY_S)
    held.emit(
        "background:slice:end",
        {
            "migration": name,
            "partition": str(partition["_id"]),
            "outcome": result.outcome,
            "counters": result.counters,
        },
    )
    return result


def _counted_failure(held: SliceContext, exc: Exception) -> MigronautError:
    """Charge a failed slice to its partition, unless the deployment was at fault.

    A dropped connection or a primary stepping down (``is_retryable_write``) says
    nothing about the partition: it is released for the next slice without
    spending ``max_slice_failures``, which a flaky network would otherwise
    exhaust and fail the migration with.
    """
    rt, job, lease = held.rt, held.job, held.lease
    message = error_text(exc)
    deployment_fault = is_retryable_write(exc)
    try:
        if deployment_fault:
            rt.store.leases.release(lease)
            partition_failed = False
        else:
            partition_failed = rt.store.leases.fail_slice(
                lease, error=message, max_slice_failures=job.spec.max_slice_failures
            )
    except Exception:
        partition_failed = False
    held.emit(
        "background:slice:end",
        {
            "migration": job.name,
            "partition": str(held.partition["_id"]),
            "outcome": "error",
            "error": message,
        },
    )
    if deployment_fault:
        log.warning("%s: a slice was cut off (%s); not charged to its partition", job.name, message)
    else:
        log.error("%s: a slice failed: %s", job.name, message)
    context = {"migration": job.name, "partition_failed": partition_failed}
    if isinstance(exc, MigronautError) and not exc.retryable:
        exc.context.update(context)
        return exc
    return BatchFailed(f"{job.name}: a slice failed: {message}", context)
