"""Step mode: a migration that is not a per-document rewrite, run as checkpointed steps.

``"mode": "step"`` migrations define ``step(ctx)`` (and optionally
``revert_step(ctx)``), called again and again with the last checkpoint until they
say they are done. A step returns ``{"checkpoint": …, "done": bool}`` and
optionally ``processed``, ``migrated`` and ``total`` (for progress). The
checkpoint is stored on the migration's single partition after each step; a
lane killed mid-step resumes from the last one. With ``"transaction"`` the step's
writes (made with ``ctx.session``) and its checkpoint commit together.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import bson
from pymongo.client_session import ClientSession
from pymongo.database import Database

from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.engine.partition import PartitionContext
from migronaut_core.background.engine.transactional import (
    TRANSIENT_BACKOFF,
    BatchStoppedError,
    commit,
    discard,
    transaction_options,
)
from migronaut_core.background.job import Job
from migronaut_core.background.spec import MAX_CHECKPOINT_BYTES, Direction
from migronaut_core.errors import BackgroundFailedError, LockLostError
from migronaut_core.server_errors import is_transient_transaction

STEP_SCOPE = {"kind": "step"}


@dataclass(frozen=True, slots=True)
class StepContext:
    """What ``step(ctx)`` receives.

    ``checkpoint`` is what the previous step returned (None at first). Return by
    ``deadline`` (a :func:`~migronaut_core.clock.monotonic` value) when you can: the
    lane yields then.
    ``session`` is set in transactional mode: pass it to every write.
    """

    migration: str
    direction: Direction
    generation: int
    checkpoint: Any
    deadline: float
    db: Database[dict[str, Any]]
    client: Any
    log: logging.Logger
    cancel: CancelToken
    session: ClientSession | None = None
    dry_run: bool = False


@dataclass(frozen=True, slots=True)
class StepResult:
    checkpoint: Any
    done: bool
    counters: dict[str, int]
    total: int | None = None


def read_step_result(name: str, result: Any) -> StepResult:
    """Validate what a step returned.

    :raises BackgroundFailedError: not ``{checkpoint, done: bool}``, or a checkpoint
        larger than :data:`MAX_CHECKPOINT_BYTES` (keep a cursor in it, not data).
    """
    if not isinstance(result, Mapping) or not isinstance(result.get("done"), bool):
        raise BackgroundFailedError(
            f"{name}: step() must return {{'checkpoint': ..., 'done': True/False}}",
            {"migration": name, "reason": "step-result"},
        )
    checkpoint = result.get("checkpoint")
    if len(bson.encode({"checkpoint": checkpoint})) > MAX_CHECKPOINT_BYTES:
        raise BackgroundFailedError(
            f"{name}: step() returned a checkpoint larger than "
            f"{MAX_CHECKPOINT_BYTES // 1024} KiB; keep a cursor in it, not data",
            {"migration": name, "reason": "step-checkpoint"},
        )
    counters = {
        key: int(result[key])
        for key in ("processed", "migrated")
        if isinstance(result.get(key), int)
        and not isinstance(result[key], bool)
        and result[key] > 0
    }
    total = result.get("total")
    usable_total = total if isinstance(total, int) and not isinstance(total, bool) else None
    return StepResult(checkpoint, result["done"], counters, usable_total)


def run_step(
    job: Job, ctx: PartitionContext, cursor: Mapping[str, Any]
) -> tuple[dict[str, Any] | None, dict[str, int]]:
    """One step and its checkpoint; returns (next cursor or None when done, counters)."""
    function = job.fns.step_for(job.direction)
    assert function is not None  # the spec guarantees a step for each direction it runs

    def context(session: ClientSession | None) -> StepContext:
        return StepContext(
            migration=job.name,
            direction=job.direction,
            generation=job.generation,
            checkpoint=cursor.get("checkpoint"),
            deadline=ctx.deadline,
            db=ctx.db,
            client=ctx.client,
            log=job.log,
            cancel=job.cancel,
            session=session,
        )

    def save(
        result: StepResult, session: ClientSession | None
    ) -> tuple[dict[str, Any] | None, dict[str, int]]:
        next_cursor = None if result.done else {"checkpoint": result.checkpoint}
        counters = {**result.counters, "batches": 1}
        ctx.store.leases.checkpoint(
            ctx.lease,
            cursor={"checkpoint": result.checkpoint},
            counters=counters,
            done=result.done,
            fields={"step_total": result.total} if result.total is not None else None,
            session=session,
        )
        return next_cursor, counters

    if job.spec.transaction is None:
        return save(read_step_result(job.name, function(context(None))), None)
    return _in_transaction(
        job,
        ctx,
        lambda session: save(read_step_result(job.name, function(context(session))), session),
    )


def _in_transaction(
    job: Job, ctx: PartitionContext, body: Any
) -> tuple[dict[str, Any] | None, dict[str, int]]:
    assert job.spec.transaction is not None
    for attempt in range(job.spec.transaction.max_retries + 1):
        with ctx.client.start_session() as session:
            try:
                session.start_transaction(**transaction_options(job.spec))
                outcome: tuple[dict[str, Any] | None, dict[str, int]] = body(session)
                commit(session)
                return outcome
            except LockLostError:
                raise
            except Exception as error:
                discard(session)
                if (
                    not is_transient_transaction(error)
                    or attempt >= job.spec.transaction.max_retries
                ):
                    raise
                ctx.transaction_retried("transient")
        if job.cancel.sleep(TRANSIENT_BACKOFF.seconds(attempt + 1)):
            raise BatchStoppedError()
    raise AssertionError("unreachable")
