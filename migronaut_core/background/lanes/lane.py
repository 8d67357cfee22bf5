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
- ``lost`` — the lease was reaped or unlocked under us; nothing more was written.

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
from dataclasses import dataclass, field
from typing import Any, Literal, cast, get_args

from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.engine.partition import (
    PartitionContext,
    PartitionResult,
    add_counters,
)
from migronaut_core.background.engine.worker import process_partition
from migronaut_core.background.job import Job, assert_transactions, job_for, plan_is_stale
from migronaut_core.background.lifecycle import fail_state
from migronaut_core.background.runtime import Runtime
from migronaut_core.background.store import (
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
from migronaut_core.background.throttle import Throttle
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

log = logging.getLogger("migronaut_core.background")

_CONTROL_FIELDS = {"status": 1, "generation": 1, "plan.token": 1}


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
    owner: str


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
                fail_state(rt, state, message)
            return SliceResult("failed", counters, error=message)
        if result.outcome != "exhausted":
            rt.store.leases.release(claim.lease)
            return SliceResult(_as_slice_outcome(result.outcome), counters)


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


def _batch_written(
    rt: Runtime, name: str, partition: PartitionDocument, info: dict[str, Any]
) -> None:
    counters = info.get("counters") or {}
    rt.telemetry.batch_written(
        name,
        size=int(counters.get("scanned", 0)),
        duration_ms=float(info.get("latency_ms", 0)),
        shard=_shard_of(partition),
    )
    rt.emit(
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
    rt.emit(
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
                on_throttle=lambda change: rt.emit(
                    "background:throttle",
                    {"migration": name, "group": partition.get("group"), **change.to_dict()},
                ),
                on_batch=lambda info: _batch_written(rt, name, partition, info),
                on_transaction_retry=lambda reason: rt.telemetry.transaction_retried(name, reason),
            )
            result = process_partition(job, context, rt.store)
    except LockLostError:
        rt.emit("background:lease:lost", {"migration": name, "partition": str(partition["_id"])})
        log.warning("%s: lane %s lost its lease; stopping", name, owner)
        return PartitionResult("lost", {})
    except Exception as exc:
        if job.cancel.cancelled:
            return PartitionResult("stopped", {})
        raise _counted_failure(held, exc) from exc
    rt.store.states.set(name, {"last_progress_at": utc_now()})
    rt.emit(
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
    rt.emit(
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
