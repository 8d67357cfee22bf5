r"""Plain batches with the next batch read and transformed while the current one is written.

One batch at a time, a lane leaves the server idle while it reads and transforms,
and itself idle while the server writes. Here the write of batch *n* runs on a
helper thread while the lane reads and transforms batch *n+1*: a range the cursor
has already moved to, whatever the write does to batch *n*. The checkpoint of
batch *n* notes the ids of batch *n+1* as the in-flight intent in the same write,
so each write is still preceded by a durable note of its ids (totals stay exact
across ``kill -9``) without a round trip of its own.

An update-pipeline lane keeps two batches in flight (:func:`writes_in_flight`):
the ``update_many`` of *n+1* is sent before *n* returns, so the server is never
idle while the lane checkpoints *n* and reads *n+2*. The checkpoint of *n* is
written only once *n* has returned (and every batch before it was
checkpointed), moves the cursor just past *n*, and notes the ids of *n+1* and
*n+2*; a successor settles such a note of two batches as it settles one (it
reads at least as many documents from the cursor and counts the noted ones
already at the target version).

The loop is the same for Python and update-pipeline migrations: a
:class:`~.work.BatchWork` says how a batch is read, written and counted (an
update-pipeline batch reads the next range's ``_id`` values while the current
``update_many`` runs). Only for plain batches (no transaction, no steps) of
partitioners whose cursor
does not depend on the write
(:attr:`~migronaut_core.background.planning.partition.Partitioner.reads_ahead`).
Pause, cancel and the slice deadline are judged before each checkpoint: a lane
sends no further batch and finishes those in flight (one, or two in update
mode), so it stops within the batches it had sent and never leaves an intent it
will not write; a maintenance window, a server health signal past its hard limit
or the brake stop it the same way after the checkpoint, its read-ahead batch
settled unwritten. A write that fails is raised once every other write in flight
has returned; the note still names them all, for the next holder to settle.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from pymongo.collection import Collection

from migronaut_core.background.engine.batch import BatchResult, Document, Written
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
from migronaut_core.errors import BackgroundFailedError


@dataclass
class _Batch:
    """A batch read and prepared (a Python batch: transformed), not yet written."""

    cursor: dict[str, Any]
    limit: int
    docs: list[Document]
    prepared: Any
    #: The cursor just past the batch; ``None``: the partition is drained with it.
    after: dict[str, Any] | None

    @property
    def ids(self) -> list[Any]:
        return [doc["_id"] for doc in self.docs]


def reads_ahead(job: Job) -> bool:
    """Whether :func:`work_reading_ahead` can work this job's partitions."""
    return job.spec.mode != "step" and job.spec.transaction is None and job.partitioner.reads_ahead


def writes_in_flight(job: Job) -> int:
    """How many of a lane's batches may be written at once: two for an update pipeline.

    An update-pipeline batch is one ``update_many`` the server runs on its own
    cores; with a second one sent before the first returns, the server never waits
    for the lane's checkpoint and read (measured at 1M: one lane 1.17x the raw
    serial loop of batches, docs/performance.md). A Python batch keeps one: its
    write is short next to its transform, which the read-ahead already overlaps.
    """
    return 2 if job.spec.mode == "update" else 1


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
    depth = writes_in_flight(job)
    with ThreadPoolExecutor(max_workers=depth, thread_name_prefix="migronaut-write") as writer:
        lane = _Lane(job, ctx, store, work, writer, counters)
        lane.submit(batch)
        last, ahead = batch, None
        while True:
            if ahead is None and last.after is not None:
                ahead = last = _read_while_writing(job, ctx, collection, work, last.after, lane)
            more = ahead is not None and bool(ahead.docs)
            if more and len(lane.flight) < depth:
                # Filling the pipeline: nothing to retire, the note grows by the batch.
                stop = _stop_reason(job, ctx, first=False)
                if stop is not None:
                    return lane.drain(PartitionResult(stop, counters), more=True)
                assert ahead is not None
                store.leases.record_intent(ctx.lease, [*lane.ids(), *ahead.ids])
            else:
                ended = lane.retire(ahead if more else None)
                if ended is not None:
                    return ended
                if not more:
                    continue
            assert ahead is not None
            waited = paced(job, ctx, counters)
            if waited is not None:
                return lane.drain(waited, more=True, noted_ahead=True)
            lane.submit(ahead)
            ahead = None


@dataclass
class _Writing:
    """A batch sent to be written, and since when."""

    batch: _Batch
    pending: Future[Written]
    started: float


class _Lane:
    """A lane's batches being written, oldest first, and how each is retired.

    A batch is retired once its write has returned and every batch before it is
    retired: its checkpoint moves the cursor just past it, so a checkpoint never
    passes a batch that is not written. The checkpoint's intent note names every
    batch still in flight plus the one about to be sent, so each write is still
    preceded by a durable note of its ids, and a successor's settle counts a dead
    lane's batches exactly (the note of up to two batches is one range after the
    cursor).
    """

    def __init__(
        self,
        job: Job,
        ctx: PartitionContext,
        store: BackgroundStore,
        work: BatchWork,
        writer: ThreadPoolExecutor,
        counters: dict[str, int],
    ) -> None:
        self._job = job
        self._ctx = ctx
        self._store = store
        self._work = work
        self._writer = writer
        self._counters = counters
        self.flight: deque[_Writing] = deque()

    def submit(self, batch: _Batch) -> None:
        pending = self._writer.submit(self._work.write, batch.prepared)
        self.flight.append(_Writing(batch, pending, monotonic()))

    def ids(self) -> list[Any]:
        return [doc_id for writing in self.flight for doc_id in writing.batch.ids]

    def pending(self) -> list[Future[Written]]:
        return [writing.pending for writing in self.flight]

    def retire(self, ahead: _Batch | None) -> PartitionResult | None:
        """Retire the oldest batch; ``ahead`` (read, with documents) is the next to send.

        The state is asked whether to go on before the checkpoint, which notes
        ``ahead`` only when it will be sent. A result: the partition ends here
        (drained, stopped, or over the error budget), nothing left in flight.
        """
        job, ctx = self._job, self._ctx
        oldest, result = self._finish_oldest()
        more = ahead is not None
        stop = _stop_reason(job, ctx, first=False) if more else None
        go_on = more and stop is None
        self._checkpoint(oldest, result, ahead.ids if go_on and ahead is not None else (), more)
        failure = self._budget_failure(result)
        if failure is not None:
            return self.drain(
                PartitionResult("failed", self._counters, failure), more=more, noted_ahead=go_on
            )
        if not more and not self.flight:
            return PartitionResult("exhausted", self._counters)
        if stop is not None:
            return self.drain(PartitionResult(stop, self._counters), more=True)
        return None

    def drain(
        self, ending: PartitionResult, *, more: bool, noted_ahead: bool = False
    ) -> PartitionResult:
        """Retire every batch in flight (the lane sends no other) and end with ``ending``.

        A read batch noted but never sent leaves the note with the last
        checkpoint, or is forgotten. A drained batch over the error budget fails
        the partition instead.
        """
        if not self.flight:
            if noted_ahead:
                self._store.leases.settle_inflight(self._ctx.lease, migrated=0)
            return ending
        while self.flight:
            oldest, result = self._finish_oldest()
            self._checkpoint(oldest, result, (), more)
            failure = self._budget_failure(result)
            if failure is not None and ending.outcome != "failed":
                ending = PartitionResult("failed", self._counters, failure)
        return ending

    def _finish_oldest(self) -> tuple[_Writing, BatchResult]:
        """The oldest batch in flight, out of the flight once its write returned, and
        what its write did."""
        oldest = self.flight.popleft()
        written = _written(self._ctx, oldest.pending)
        return oldest, self._work.finish(oldest.batch.prepared, written)

    def _budget_failure(self, result: BatchResult) -> BackgroundFailedError | None:
        """Why the partition fails when this batch's errors spent the error budget."""
        if not result.errors:
            return None
        return over_error_budget(self._job, self._store, result.errors)

    def _checkpoint(
        self, oldest: _Writing, result: BatchResult, ahead_ids: Sequence[Any], more: bool
    ) -> None:
        """Record a retired batch: the cursor past it, its counters, the note of what follows."""
        job, ctx, batch = self._job, self._ctx, oldest.batch
        batch_counters = result.counters(len(batch.docs))
        add_counters(self._counters, batch_counters)
        bad_ids, doc_errors = errors_of(result.errors, job.generation)
        self._store.leases.checkpoint(
            ctx.lease,
            cursor=batch.after if batch.after is not None else batch.cursor,
            counters=batch_counters,
            bad_ids=bad_ids,
            doc_errors=doc_errors,
            done=not more and not self.flight,
            throttle=ctx.throttle.state(),
            intent=[*self.ids(), *ahead_ids],
        )
        if ctx.on_batch is not None:
            ctx.on_batch(
                {
                    "counters": batch_counters,
                    "latency_ms": int(elapsed_ms(oldest.started)),
                    "batch_size": batch.limit,
                }
            )


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
    after = job.partitioner.advance(cursor, docs, limit=limit)
    return _Batch(cursor, limit, docs, work.prepare(docs), after)


def _read_while_writing(
    job: Job,
    ctx: PartitionContext,
    collection: Collection[Document],
    work: BatchWork,
    cursor: dict[str, Any],
    lane: _Lane,
) -> _Batch:
    """The next batch, read while the lane's batches write; on an error, not before they end."""
    try:
        return _read(job, ctx, collection, work, cursor)
    except BaseException:
        wait(lane.pending())  # no write may outlive the lane's giving up
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
