"""Transactional batches: read, transform, write and checkpoint commit together, or not at all.

With ``"transaction": {...}`` in a spec, each batch runs in one multi-document
transaction: the snapshot read, the transforms (which get ``ctx.session`` for
their own side writes), the guarded updates and the fenced checkpoint. So the
counters are exact, a stale lease holder cannot commit (its checkpoint matches
nothing), and a side write happens once per migrated document.

Trouble is handled batch by batch:

- a document that fails (its transform, the validator, a duplicate key) aborts the
  batch, which is retried without it (it becomes a document error);
- a document a concurrent write moved aborts the batch too, and is read again;
- transient transaction errors, a transform's side write's too, back off (full
  jitter, 50 ms·2ⁿ up to 2 s) up to ``max_retries``, halving the batch after half
  of them;
- a batch that ran out of time or room is halved at once;
- alone in a batch, a conflicting document is passed over (the next pass takes it)
  and one too big or too slow becomes a document error;
- clean batches grow back x1.5 after five in a row;
- a commit whose result is unknown is committed again (it is idempotent), and a
  transaction this side could not abort is killed on the server (:func:`discard`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import bson
from pymongo import ReadPreference
from pymongo.client_session import ClientSession
from pymongo.errors import PyMongoError
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

from migronaut_core.background.backoff import Backoff
from migronaut_core.background.engine.batch import BatchResult, apply_batch
from migronaut_core.background.engine.partition import PartitionContext, checkpoint_batch
from migronaut_core.background.job import Job
from migronaut_core.background.planning.partition import find
from migronaut_core.background.spec import BackgroundSpec
from migronaut_core.bson_values import canonical_id_key
from migronaut_core.errors import (
    BackgroundConflictError,
    DocError,
    DocumentFailedError,
    LockLostError,
)
from migronaut_core.scrub import error_text
from migronaut_core.server_errors import (
    commit_result_unknown,
    is_transient_transaction,
    too_slow_or_too_big,
)

#: Full-jitter back-off between transient retries: up to 50 ms · 2ⁿ, never past 2 s.
TRANSIENT_BACKOFF = Backoff(first=0.1, cap=2.0, jitter=1.0)
#: A halved batch grows back x1.5 after this many clean batches in a row.
CLEAN_BATCHES_TO_GROW = 5
BATCH_GROWTH = 1.5
#: What one batch reads into a transaction, well under the 16 MiB limit.
MAX_TRANSACTION_BYTES = 8 * 1024 * 1024


@dataclass
class TransactionSizing:
    """A lane's current batch size in transactional mode, kept across its batches."""

    size: int
    clean: int = 0


def transaction_options(spec: BackgroundSpec) -> dict[str, Any]:
    """How every transaction of a migration starts: snapshot, primary, its write concern."""
    assert spec.transaction is not None
    return {
        "read_concern": ReadConcern("snapshot"),
        "write_concern": WriteConcern(**(spec.write_concern or {"w": "majority"})),
        "read_preference": ReadPreference.PRIMARY,
        "max_commit_time_ms": spec.transaction.timeout_ms,
    }


def commit(session: ClientSession) -> None:
    """Commit; again (up to twice) when the outcome is unknown, which is safe."""
    for attempt in range(3):
        try:
            session.commit_transaction()
            return
        except PyMongoError as error:
            if not commit_result_unknown(error) or attempt == 2:
                raise


def fitting(docs: Sequence[dict[str, Any]], limit_bytes: int) -> list[dict[str, Any]]:
    """The leading documents whose BSON fits in ``limit_bytes`` (at least one)."""
    total = 0
    for index, doc in enumerate(docs):
        total += len(bson.encode(doc))
        if total > limit_bytes and index > 0:
            return list(docs[:index])
    return list(docs)


def transactional_batch(
    job: Job,
    ctx: PartitionContext,
    cursor: Mapping[str, Any],
    batch_size: int,
    sizing: TransactionSizing,
) -> tuple[BatchResult, dict[str, Any] | None, dict[str, int]]:
    """One batch in one transaction, retried as the module docstring says."""
    spec = job.spec
    assert spec.transaction is not None
    size = min(sizing.size, batch_size)
    attempts = 0
    retries = 0
    excluded: dict[str, DocError] = {}
    while True:
        if job.cancel.cancelled:
            raise BatchStoppedError()
        try:
            return _attempt(job, ctx, cursor, size, sizing, excluded, retries)
        except (LockLostError, BatchStoppedError):
            raise
        except DocumentFailedError as failed:
            excluded[canonical_id_key(failed.error.id)] = failed.error
            continue
        except _AttemptFailedError as failed:
            error, attempt_docs = failed.error, failed.docs
        conflict = isinstance(error, BackgroundConflictError)
        time_or_size = too_slow_or_too_big(error)
        if not (conflict or time_or_size or is_transient_transaction(error)):
            raise error
        retries += 1
        sizing.clean = 0
        ctx.transaction_retried(_retry_reason(conflict, time_or_size))
        if size == 1 and len(attempt_docs) == 1:
            lone = attempt_docs[0]
            if time_or_size:
                excluded[canonical_id_key(lone["_id"])] = DocError(
                    lone["_id"], error_text(error), "transaction"
                )
                continue
            if conflict:
                return _pass_over(job, ctx, cursor, lone, retries)
        if time_or_size and size > 1:
            size = max(1, size // 2)
            continue
        attempts += 1
        if attempts > spec.transaction.max_retries:
            raise error
        if attempts > spec.transaction.max_retries / 2:
            size = max(1, size // 2)
        if job.cancel.sleep(TRANSIENT_BACKOFF.seconds(attempts)):
            raise BatchStoppedError()


def _retry_reason(conflict: bool, time_or_size: bool) -> str:
    if conflict:
        return "conflict"
    return "time_or_size" if time_or_size else "transient"


class BatchStoppedError(Exception):
    """The cancel token fired between attempts; the lane stops without failing."""


class _AttemptFailedError(Exception):
    def __init__(self, docs: list[dict[str, Any]], error: BaseException) -> None:
        super().__init__(type(error).__name__)
        self.docs = docs
        self.error = error


def _attempt(
    job: Job,
    ctx: PartitionContext,
    cursor: Mapping[str, Any],
    size: int,
    sizing: TransactionSizing,
    excluded: dict[str, DocError],
    retries: int,
) -> tuple[BatchResult, dict[str, Any] | None, dict[str, int]]:
    spec = job.spec
    assert spec.transaction is not None
    collection = ctx.db[job.collection]
    docs: list[dict[str, Any]] = []
    with ctx.client.start_session() as session:
        try:
            session.start_transaction(**transaction_options(spec))
            query = job.partitioner.batch_query(
                ctx.partition["scope"], cursor, limit=size, match=job.match, hint=job.hint
            )
            fetched = find(
                collection, query, session=session, max_time_ms=spec.transaction.timeout_ms
            )
            docs = fitting(fetched, MAX_TRANSACTION_BYTES)
            work = [doc for doc in docs if canonical_id_key(doc["_id"]) not in excluded]
            result = BatchResult()
            if work:
                result = apply_batch(
                    job,
                    work,
                    collection,
                    ctx.transform_context(job, session),
                    session=session,
                    strict=True,
                    abort_on_conflict=True,
                )
            # Only this attempt's documents: one excluded before a halving is read again later.
            result.errors = [
                excluded[key]
                for key in (canonical_id_key(doc["_id"]) for doc in docs)
                if key in excluded
            ]
            # Its failed documents are the batch's errors: the checkpoint steps over them.
            result, next_cursor, counters = checkpoint_batch(
                job,
                ctx,
                cursor,
                docs,
                result,
                limit=size,
                cut_short=len(docs) < len(fetched),
                retries=retries,
                session=session,
            )
            commit(session)
        except (LockLostError, DocumentFailedError):
            discard(session)
            raise
        except Exception as error:
            discard(session)
            raise _AttemptFailedError(docs, error) from error
    _grow(sizing, size, spec.batch_size)
    return result, next_cursor, counters


def discard(session: ClientSession) -> None:
    """End a failed attempt's transaction on the server now; never raises.

    An abort does it while the transaction is open on this side. After a commit
    whose outcome is unknown (its connection dropped before the server read it)
    or an abort that failed, the server still holds the transaction open, and its
    writes make every later attempt on the same documents fail with WriteConflict
    until its lifetime limit (60 s by default) — longer than the retries last.
    Killing the session aborts it at once; a commit that did apply stays applied,
    and the next attempt's guarded writes and fenced checkpoint skip what it did.
    """
    if session.in_transaction:
        with contextlib.suppress(PyMongoError):
            session.abort_transaction()
            return
    with contextlib.suppress(PyMongoError):
        session.client.admin.command("killSessions", [session.session_id])


def _grow(sizing: TransactionSizing, size: int, batch_size: int) -> None:
    sizing.clean += 1
    if sizing.clean >= CLEAN_BATCHES_TO_GROW and size < batch_size:
        sizing.size = min(batch_size, int(size * BATCH_GROWTH + 0.999))
        sizing.clean = 0
    else:
        sizing.size = size


def _pass_over(
    job: Job,
    ctx: PartitionContext,
    cursor: Mapping[str, Any],
    doc: dict[str, Any],
    retries: int,
) -> tuple[BatchResult, dict[str, Any] | None, dict[str, int]]:
    """A lone document still in the way: step past it; the next pass takes it."""
    next_cursor = job.partitioner.past(cursor, [doc], left=[doc["_id"]])
    counters = {"scanned": 1, "conflicts": 1, "batches": 1, "txn_retries": retries}
    ctx.store.leases.checkpoint(ctx.lease, cursor=next_cursor, counters=counters)
    return BatchResult(conflicts=1, left=[doc["_id"]]), next_cursor, counters
