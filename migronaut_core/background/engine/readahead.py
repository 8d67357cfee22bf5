r"""Plain batches with the next batch read and transformed while the current one is written.

One batch at a time, a lane leaves the server idle while it reads and transforms,
and itself idle while the server writes. Here the write of batch *n* runs on a
helper thread while the lane reads and transforms batch *n+1*: a range the cursor
has already moved to, whatever the write does to batch *n*. The checkpoint of
batch *n* notes the ids of batch *n+1* as the in-flight intent in the same write,
so each write is still preceded by a durable note of its ids (totals stay exact
across ``kill -9``) without a round trip of its own.

The loop is the same for Python and update-pipeline migrations: a
:class:`~.work.BatchWork` says how a batch is read, written and counted (an
update-pipeline batch reads the next range's ``_id`` values while the current
``update_many`` runs). Only for plain batches (no transaction, no steps) of
partitioners whose cursor
does not depend on the write
(:attr:`~migronaut_core.background.planning.partition.Partitioner.reads_ahead`).
Pause, cancel and the slice deadline are judged before each checkpoint, so a lane
still stops within one batch and never leaves an intent it will not write; a
server health signal past its hard limit stops it after the checkpoint, its
read-ahead batch settled unwritten.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from pymongo.collection import Collection

from migronaut_core.background.engine.batch import Document, Written
from migronaut_core.background.engine.partition import (
    PartitionContext,
    PartitionResult,
    add_counters,
    control_outcome,
    errors_of,
    noted_ids,
    over_error_budget,
    paced,
    settle_dead_lane_batch,
)
from migronaut_core.background.engine.work import BatchWork, work_for
from migronaut_core.background.job import Job
from migronaut_core.background.planning.partition import find
from migronaut_core.background.store import BackgroundStore
from migronaut_core.clock import elapsed_ms, monotonic


@dataclass
class _Batch:
    """A batch read and prepared (a Python batch: transformed), not yet written."""

    cursor: dict[str, Any]
    limit: int
    docs: list[Document]
    prepared: Any

    @property
    def ids(self) -> list[Any]:
        return [doc["_id"] for doc in self.docs]


def reads_ahead(job: Job) -> bool:
    """Whether :func:`work_reading_ahead` can work this job's partitions."""
    return job.spec.mode != "step" and job.spec.transaction is None and job.partitioner.reads_ahead


def work_reading_ahead(
    job: Job,
    ctx: PartitionContext,
    store: BackgroundStore,
    cursor: Mapping[str, Any],
    *,
    settle: bool = False,
) -> PartitionResult:
    """Work one partition from ``cursor``, the same outcomes as ``process_partition``.

    With ``settle``, the first batch reads at least as many documents as a dead
    lane noted and settles that note once read (:func:`settle_dead_lane_batch`).
    """
    counters: dict[str, int] = {}
    collection = ctx.db[job.collection]
    work = work_for(job, collection, ctx.transform_context(job))
    if ctx.lease_lost():
        store.leases.checkpoint(ctx.lease, cursor=cursor, counters={})  # raises LockLostError
    stop = _stop_reason(job, ctx, first=True)
    if stop is not None:
        return PartitionResult(stop, counters)
    waited = paced(job, ctx, counters)
    if waited is not None:
        return waited
    at_least = len(noted_ids(ctx)) if settle else 0
    batch = _read(job, ctx, collection, work, dict(cursor), at_least=at_least)
    if settle:
        settle_dead_lane_batch(job, ctx, read=batch.docs)
    elif batch.docs:
        store.leases.record_intent(ctx.lease, batch.ids)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="migronaut-write") as writer:
        while True:
            started = monotonic()
            pending = writer.submit(work.write, batch.prepared)
            next_cursor = job.partitioner.advance(batch.cursor, batch.docs, limit=batch.limit)
            ahead = _read_while_writing(job, ctx, collection, work, next_cursor, pending)
            written = _written(ctx, pending)
            result = work.finish(batch.prepared, written)
            batch_counters = result.counters(len(batch.docs))
            add_counters(counters, batch_counters)
            done = next_cursor is None or (ahead is not None and not ahead.docs)
            stop = None if done else _stop_reason(job, ctx, first=False)
            go_on = not done and stop is None
            bad_ids, doc_errors = errors_of(result.errors, job.generation)
            store.leases.checkpoint(
                ctx.lease,
                cursor=next_cursor if next_cursor is not None else batch.cursor,
                counters=batch_counters,
                bad_ids=bad_ids,
                doc_errors=doc_errors,
                done=done,
                throttle=ctx.throttle.state(),
                intent=ahead.ids if go_on and ahead is not None else (),
            )
            if ctx.on_batch is not None:
                latency_ms = int(elapsed_ms(started))
                ctx.on_batch(
                    {
                        "counters": batch_counters,
                        "latency_ms": latency_ms,
                        "batch_size": batch.limit,
                    }
                )
            failure = over_error_budget(job, store, result.errors) if result.errors else None
            if failure is not None:
                if go_on:
                    store.leases.settle_inflight(ctx.lease, migrated=0)
                return PartitionResult("failed", counters, failure)
            if done or ahead is None:
                return PartitionResult("exhausted", counters)
            if stop is not None:
                return PartitionResult(stop, counters)
            waited = paced(job, ctx, counters)
            if waited is not None:
                store.leases.settle_inflight(ctx.lease, migrated=0)
                return waited
            batch = ahead


def _stop_reason(job: Job, ctx: PartitionContext, *, first: bool) -> str | None:
    """Why the lane must not write another batch now (``None``: go on)."""
    if job.cancel.cancelled:
        return "stopped"
    if not first and monotonic() >= ctx.deadline:
        return "yielded"
    return control_outcome(ctx.read_control(), job, ctx.partition["plan"])


def _read(
    job: Job,
    ctx: PartitionContext,
    collection: Collection[Document],
    work: BatchWork,
    cursor: dict[str, Any],
    *,
    at_least: int = 0,
) -> _Batch:
    limit = max(ctx.throttle.next_batch_size(), at_least)
    query = job.partitioner.batch_query(
        ctx.partition["scope"], cursor, limit=limit, match=job.match, hint=job.hint
    )
    docs = find(collection, query, projection=work.projection)
    return _Batch(cursor, limit, docs, work.prepare(docs))


def _read_while_writing(
    job: Job,
    ctx: PartitionContext,
    collection: Collection[Document],
    work: BatchWork,
    cursor: dict[str, Any] | None,
    pending: Future[Written],
) -> _Batch | None:
    """The next batch, read while ``pending`` writes; never returns before the write ends."""
    if cursor is None:
        return None
    try:
        return _read(job, ctx, collection, work, cursor)
    except BaseException:
        wait([pending])  # no write may outlive the lane's giving up
        raise


def _written(ctx: PartitionContext, pending: Future[Written]) -> Written:
    started = monotonic()
    try:
        written = pending.result()
    except Exception as error:
        ctx.throttle_changed(ctx.throttle.after_error(error, elapsed_ms(started)))
        raise
    ctx.throttle_changed(ctx.throttle.after_batch(written.elapsed_ms))
    return written
