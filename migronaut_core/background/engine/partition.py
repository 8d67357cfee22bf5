"""A leased partition: what a lane hands the engine, and the steps around each batch.

:class:`PartitionContext` is what a lane hands the engine for one leased
partition; :class:`PartitionResult` is how working it ended. Around each batch
written by :mod:`.batch` (or :mod:`.pipeline`): the state's control fields say
whether to go on (:func:`control_outcome`); :func:`checkpoint_batch` advances
the cursor past the batch and records it in one write fenced by the lease (a
lane whose lease was reaped writes nothing and raises ``LockLostError``);
:func:`settle_dead_lane_batch` counts what a dead lane wrote before its
checkpoint; :func:`over_error_budget` judges ``max_document_errors``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pymongo.client_session import ClientSession
from pymongo.database import Database

from migronaut_core.background.engine.batch import BatchResult, Document, TransformContext
from migronaut_core.background.job import Job
from migronaut_core.background.store import (
    BackgroundStore,
    Lease,
    PartitionDocument,
    StateDocument,
)
from migronaut_core.background.throttle import HealthBreach, Throttle, ThrottleChange
from migronaut_core.bson_values import canonical_id_key
from migronaut_core.clock import epoch_seconds
from migronaut_core.errors import BackgroundFailedError, DocError, MigronautError
from migronaut_core.versioning import version_filter


def add_counters(into: dict[str, int], more: Mapping[str, int]) -> None:
    for key, value in more.items():
        into[key] = into.get(key, 0) + value


@dataclass
class PartitionContext:
    """What a lane hands the engine for one leased partition."""

    store: BackgroundStore
    lease: Lease
    partition: PartitionDocument
    db: Database[Document]
    client: Any
    deadline: float
    throttle: Throttle
    read_control: Callable[[], StateDocument | None]
    lease_lost: Callable[[], bool]
    #: Hears each written batch: ``{counters, latency_ms, batch_size}``.
    on_batch: Callable[[dict[str, Any]], None] | None = None
    on_throttle: Callable[[ThrottleChange], None] | None = None
    #: Hears each transactional retry's reason: ``transient``, ``conflict``, ``time_or_size``.
    on_transaction_retry: Callable[[str], None] | None = None

    def transform_context(self, job: Job, session: ClientSession | None = None) -> TransformContext:
        """What the transforms of this partition's batches receive."""
        return TransformContext(
            migration=job.name,
            direction=job.direction,
            generation=job.generation,
            partition=str(self.partition["_id"]),
            db=self.db,
            client=self.client,
            log=job.log,
            cancel=job.cancel,
            session=session,
        )

    def throttle_changed(self, change: ThrottleChange | None) -> None:
        if change is not None and self.on_throttle is not None:
            self.on_throttle(change)

    def transaction_retried(self, reason: str) -> None:
        if self.on_transaction_retry is not None:
            self.on_transaction_retry(reason)


@dataclass
class PartitionResult:
    outcome: str
    counters: dict[str, int]
    error: MigronautError | None = None
    #: Why a ``held`` partition was let go: the server health signal past its hard limit.
    held_by: HealthBreach | None = None
    #: Or: no maintenance window is open; when the next one opens.
    held_until: datetime | None = None


def held(ctx: PartitionContext, counters: dict[str, int]) -> PartitionResult | None:
    """A ``held`` result outside every maintenance window or while a server health signal
    is past its hard limit; None: go on.

    Asked at a batch boundary, before anything of the next batch is written.
    """
    closed = ctx.throttle.window_hold()
    if closed is not None:
        return PartitionResult("held", counters, held_until=closed.opens_at)
    breach = ctx.throttle.hard_breach()
    return None if breach is None else PartitionResult("held", counters, held_by=breach)


def paced(job: Job, ctx: PartitionContext, counters: dict[str, int]) -> PartitionResult | None:
    """Wait as the throttle says before a batch; a result when the lane must not write it.

    ``held`` when no window is open, a hard limit or the brake holds the lane
    before the wait, or the brake after it (the wait's budget take reads it too);
    ``stopped`` when the cancel token fired during the wait. None: write the batch.
    """
    holding = held(ctx, counters)
    if holding is not None:
        return holding
    if ctx.throttle.before_batch(job.cancel):
        return PartitionResult("stopped", counters)
    braked = ctx.throttle.brake_hold()
    return None if braked is None else PartitionResult("held", counters, held_by=braked)


def control_outcome(control: StateDocument | None, job: Job, plan_token: str) -> str | None:
    """What the state's status means for a lane on this partition; None: go on."""
    if control is None:
        return "cancelled"
    status = control.get("status")
    if status in ("paused", "cancelled", "failed"):
        return str(status)
    if status != "running":
        return "stale"
    plan = control.get("plan")
    token = plan.get("token") if plan else None
    if control.get("generation") != job.generation or token != plan_token:
        return "stale"
    return None


def errors_of(errors: Sequence[DocError], generation: int) -> tuple[list[Any], list[Document]]:
    """A batch's failed documents as stored: their ids, and their entries with the
    ``generation`` that recorded them (what the failed-documents list shows)."""
    at = epoch_seconds()
    entries = [{**error.entry(), "generation": generation, "at_epoch": at} for error in errors]
    return [error.id for error in errors], entries


def checkpoint_batch(
    job: Job,
    ctx: PartitionContext,
    cursor: Mapping[str, Any],
    docs: Sequence[Document],
    result: BatchResult,
    *,
    limit: int,
    cut_short: bool = False,
    retries: int = 0,
    throttle: Mapping[str, Any] | None = None,
    session: ClientSession | None = None,
) -> tuple[BatchResult, dict[str, Any] | None, dict[str, int]]:
    """Advance the cursor past a written batch and record it, fenced by the lease.

    ``docs`` is what the batch read from ``cursor`` (``limit`` asked for);
    ``cut_short``: it kept only the leading part of a longer read, so the cursor
    steps just past it. The batch's counters, failed ids and (``throttle``) the
    throttle's state go in the same write, with ``session`` inside the batch's
    transaction; a drained partition is released (``done``).

    :returns: the result, the next cursor (``None``: drained) and the counters.
    :raises LockLostError: the lease is not ours any more; nothing was written.
    """
    bad_ids, doc_errors = errors_of(result.errors, job.generation)
    # Read and not rewritten (left to the next pass, or failed): a draining partition
    # steps over them.
    left = [*result.left, *bad_ids]
    if cut_short:
        next_cursor: dict[str, Any] | None = job.partitioner.past(cursor, docs, left=left)
    else:
        next_cursor = job.partitioner.advance(cursor, docs, limit=limit, left=left)
    counters = result.counters(len(docs))
    if retries:
        counters["txn_retries"] = retries
    ctx.store.leases.checkpoint(
        ctx.lease,
        cursor=next_cursor if next_cursor is not None else cursor,
        counters=counters,
        bad_ids=bad_ids,
        doc_errors=doc_errors,
        done=next_cursor is None,
        throttle=throttle,
        session=session,
    )
    return result, next_cursor, counters


def noted_ids(ctx: PartitionContext) -> list[Any]:
    """The ids a dead lane noted on the partition before writing them, if any."""
    inflight = ctx.partition.get("inflight")
    return list((inflight.get("ids") if inflight else None) or [])


def settle_dead_lane_batch(job: Job, ctx: PartitionContext, read: Sequence[Document]) -> None:
    """Count the noted documents a dead lane rewrote before its checkpoint; note ``read``.

    The dead lane's cursor did not move, so its batch is read again from there
    (``read``, at least as many documents as it noted). What that read left out
    and is at the target version was rewritten by the dead lane, and the version
    filter would hide it from every later read: it is counted here, after the
    read, so a late write by a lane that only stalled is counted either here (it
    landed before the read) or by this lane's own write of ``read``, which finds
    the document one revision on (it landed after) — never by both, never by
    neither. ``read`` becomes the note in the same write, as its intent.
    """
    ids = noted_ids(ctx)
    read_keys = {canonical_id_key(doc["_id"]) for doc in read}
    unread = [i for i in ids if canonical_id_key(i) not in read_keys]
    rewritten = 0
    if unread:
        version = version_filter(job.spec.field, job.target)
        rewritten = ctx.db[job.collection].count_documents({"_id": {"$in": unread}, **version})
    ctx.store.leases.settle_inflight(
        ctx.lease, migrated=rewritten, intent=[doc["_id"] for doc in read]
    )
    job.log.info("%s: settled a batch left by a dead lane (%d rewritten)", job.name, rewritten)


def over_error_budget(
    job: Job, store: BackgroundStore, errors: Sequence[DocError]
) -> BackgroundFailedError | None:
    """The failure when this generation's failed documents exceed ``max_document_errors``.

    The message and context name the last of ``errors`` (a batch's) by its kind and
    its value-free text (an exception's type, a write error's code), never by a value.
    """
    total = store.partitions.count_bad_ids(job.name, job.generation)
    if total <= job.spec.max_document_errors:
        return None
    context: dict[str, Any] = {
        "migration": job.name,
        "failed_documents": total,
        "max_document_errors": job.spec.max_document_errors,
    }
    last = ""
    if errors:
        context["last_error"] = {"reason": errors[-1].reason, "error": errors[-1].error}
        last = f"; last: {errors[-1].reason}: {errors[-1].error}"
    return BackgroundFailedError(
        f"background migration {job.name} failed: {total} document(s) could not be migrated, "
        f"more than max_document_errors ({job.spec.max_document_errors}){last}",
        context,
    )
