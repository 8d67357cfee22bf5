"""What one batch of a migration's mode is: how it is read, written and counted.

A lane's loop (:mod:`.worker`, :mod:`.readahead`) is the same for every
non-transactional mode; what differs is a :class:`BatchWork`: a Python
migration reads whole documents and writes guarded per-document updates
(:class:`TransformWork`, :mod:`.batch`), an update-pipeline migration reads
``_id`` values only and writes one server-side ``update_many``
(:class:`~.pipeline.PipelineWork`). :func:`work_for` picks it from the job;
:func:`apply_work` is the one call the drift watcher and the dry-run sandbox
rewrite a batch of read documents with, in either mode. :func:`plain_batch` is
one batch without read-ahead, with its fenced checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from pymongo.client_session import ClientSession
from pymongo.collection import Collection

from migronaut_core.background.engine.batch import (
    BatchResult,
    Document,
    TransformContext,
    Written,
    finish_batch,
    prepare_round,
    write_round,
)
from migronaut_core.background.engine.partition import (
    PartitionContext,
    checkpoint_batch,
    noted_ids,
    settle_dead_lane_batch,
)
from migronaut_core.background.engine.pipeline import PipelineWork
from migronaut_core.background.job import Job
from migronaut_core.background.planning.partition import find
from migronaut_core.clock import elapsed_ms, monotonic


class BatchWork(Protocol):
    """One mode's batch: ``prepare`` on the lane's thread, ``write`` on any thread,
    then ``finish`` on the lane's thread with what ``write`` returned."""

    @property
    def projection(self) -> Mapping[str, Any] | None:
        """What a batch's read returns of each document (``None``: all of it)."""
        ...

    def prepare(self, docs: Sequence[Document]) -> Any:
        """Everything the write needs, computed before it (no database write)."""
        ...

    def write(self, prepared: Any) -> Written:
        """Write a prepared batch; safe on another thread than the one preparing the next."""
        ...

    def finish(self, prepared: Any, written: Written) -> BatchResult:
        """Count the written batch (a Python batch re-reads what a concurrent write moved)."""
        ...


class TransformWork:
    """A Python migration's batch: transform, guarded bulk write, conflict re-reads."""

    projection: Mapping[str, Any] | None = None

    def __init__(
        self,
        job: Job,
        collection: Collection[Document],
        ctx: TransformContext,
        session: ClientSession | None = None,
    ) -> None:
        self._job = job
        self._collection = collection
        self._ctx = ctx
        self._session = session

    def prepare(self, docs: Sequence[Document]) -> Any:
        return prepare_round(self._job, docs, self._ctx)

    def write(self, prepared: Any) -> Written:
        return write_round(self._job, self._collection, prepared, self._session)

    def finish(self, prepared: Any, written: Written) -> BatchResult:
        return finish_batch(
            self._job, prepared, written, self._collection, self._ctx, session=self._session
        )


def work_for(
    job: Job,
    collection: Collection[Document],
    ctx: TransformContext,
    session: ClientSession | None = None,
) -> BatchWork:
    """The batch work of ``job``'s mode (declarative or update; not step)."""
    if job.spec.mode == "update":
        return PipelineWork(job, collection, session)
    return TransformWork(job, collection, ctx, session)


def apply_work(
    job: Job,
    docs: Sequence[Document],
    collection: Collection[Document],
    ctx: TransformContext,
    *,
    session: ClientSession | None = None,
) -> BatchResult:
    """Rewrite the read ``docs`` as ``job``'s mode does, and count them."""
    work = work_for(job, collection, ctx, session)
    prepared = work.prepare(docs)
    return work.finish(prepared, work.write(prepared))


def plain_batch(
    job: Job,
    ctx: PartitionContext,
    cursor: Mapping[str, Any],
    batch_size: int,
    *,
    settle: bool = False,
) -> tuple[BatchResult, dict[str, Any] | None, dict[str, int]]:
    """One batch without a transaction: read, write, fenced checkpoint.

    With ``settle``, the batch is the first after a dead lane's: it reads at least
    as many documents as that lane noted, and settles the note once it has read.
    """
    collection = ctx.db[job.collection]
    work = work_for(job, collection, ctx.transform_context(job))
    limit = max(batch_size, len(noted_ids(ctx))) if settle else batch_size
    query = job.partitioner.batch_query(
        ctx.partition["scope"], cursor, limit=limit, match=job.match, hint=job.hint
    )
    docs = find(collection, query, projection=work.projection)
    if settle:
        settle_dead_lane_batch(job, ctx, read=docs)
    elif docs:
        ctx.store.leases.record_intent(ctx.lease, [doc["_id"] for doc in docs])
    started = monotonic()
    try:
        prepared = work.prepare(docs)
        result = work.finish(prepared, work.write(prepared))
    except Exception as error:
        ctx.throttle_changed(ctx.throttle.after_error(error, elapsed_ms(started)))
        raise
    ctx.throttle_changed(ctx.throttle.after_batch(elapsed_ms(started)))
    return checkpoint_batch(
        job, ctx, cursor, docs, result, limit=limit, throttle=ctx.throttle.state()
    )
