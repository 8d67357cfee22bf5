"""Work one leased partition: batch after batch in the migration's mode, until told to stop.

The loop every lane runs between claiming a partition and releasing it: it reads
the state's status before each batch (a pause or cancel stops the lane within one
batch), stops as well while a server health signal is past its hard limit
(``held``; the target's brake too), waits as the throttle says (the target's
write budget among it), then runs one plain batch (a Python or an
update-pipeline one, :mod:`.work`), one transactional batch or one step, and
judges the document error budget.
"""

from __future__ import annotations

from typing import Any

from migronaut_core.background.engine.batch import BatchResult
from migronaut_core.background.engine.partition import (
    PartitionContext,
    PartitionResult,
    add_counters,
    control_outcome,
    noted_ids,
    over_error_budget,
    paced,
    settle_dead_lane_batch,
)
from migronaut_core.background.engine.readahead import reads_ahead, work_reading_ahead
from migronaut_core.background.engine.steps import run_step
from migronaut_core.background.engine.transactional import (
    BatchStoppedError,
    TransactionSizing,
    transactional_batch,
)
from migronaut_core.background.engine.work import plain_batch
from migronaut_core.background.job import Job
from migronaut_core.background.store import BackgroundStore
from migronaut_core.clock import elapsed_ms, monotonic


def process_partition(job: Job, ctx: PartitionContext, store: BackgroundStore) -> PartitionResult:
    """Work one partition until it is drained, the slice ends, or the state says stop.

    Outcomes: ``exhausted`` (drained), ``yielded`` (the slice's time is up),
    ``paused``, ``cancelled``, ``failed`` (with ``error``: the state failed or the
    document error budget ran out), ``stale`` (another plan took over),
    ``stopped`` (the cancel token), ``held`` (with ``held_by``: a server health
    signal past its hard limit). A lost lease raises LockLostError.
    """
    counters: dict[str, int] = {}
    cursor: dict[str, Any] = dict(ctx.partition.get("cursor") or {})
    plan_token = ctx.partition["plan"]
    sizing = TransactionSizing(job.spec.batch_size)
    # A dead lane's note is settled by the first plain batch, once it has read.
    settle = bool(noted_ids(ctx))
    if settle and not _plain(job):
        settle_dead_lane_batch(job, ctx, read=())
        settle = False
    if reads_ahead(job):
        return work_reading_ahead(job, ctx, store, cursor, settle=settle)
    batches = 0
    while True:
        if job.cancel.cancelled:
            return PartitionResult("stopped", counters)
        if batches > 0 and monotonic() >= ctx.deadline:
            return PartitionResult("yielded", counters)
        if ctx.lease_lost():
            store.leases.checkpoint(ctx.lease, cursor=cursor, counters={})  # raises LockLostError
        stop = control_outcome(ctx.read_control(), job, plan_token)
        if stop is not None:
            return PartitionResult(stop, counters)
        waited = paced(job, ctx, counters)
        if waited is not None:
            return waited
        batch_size = ctx.throttle.next_batch_size()
        started = monotonic()
        try:
            result, next_cursor, batch_counters = _one_batch(
                job, ctx, cursor, batch_size, sizing, settle
            )
        except BatchStoppedError:
            return PartitionResult("stopped", counters)
        settle = False
        add_counters(counters, batch_counters)
        batches += 1
        if ctx.on_batch is not None:
            latency_ms = int(elapsed_ms(started))
            ctx.on_batch(
                {"counters": batch_counters, "latency_ms": latency_ms, "batch_size": batch_size}
            )
        if result is not None and result.errors:
            failure = over_error_budget(job, store, result.errors)
            if failure is not None:
                return PartitionResult("failed", counters, failure)
        if next_cursor is None:
            return PartitionResult("exhausted", counters)
        cursor = next_cursor


def _plain(job: Job) -> bool:
    return job.spec.mode != "step" and job.spec.transaction is None


def _one_batch(
    job: Job,
    ctx: PartitionContext,
    cursor: dict[str, Any],
    batch_size: int,
    sizing: TransactionSizing,
    settle: bool,
) -> tuple[BatchResult | None, dict[str, Any] | None, dict[str, int]]:
    if job.spec.mode == "step":
        next_cursor, counters = run_step(job, ctx, cursor)
        return None, next_cursor, counters
    if job.spec.transaction is not None:
        return transactional_batch(job, ctx, cursor, batch_size, sizing)
    return plain_batch(job, ctx, cursor, batch_size, settle=settle)
