"""The one write path: a batch of documents transformed and written under a version guard.

A batch is read through the version index in ``_id`` order after the partition's
cursor, transformed on copies, and written as one unordered ``bulk_write`` of
updates, each guarded by the document's ``_id``, its exact old version and (with a
revision field) its exact revision. An application write that lands in between
makes the guarded update match nothing: the engine reads those documents again and
transforms them again, up to ``max_conflict_retries`` rounds, then leaves them for
the next pass. Only fields the transform changed are written, so every other
field keeps its stored BSON type. A crash between a batch's writes and its
checkpoint (:mod:`.partition`) replays the batch, which the version guard turns
into a no-op.

:func:`apply_batch` is the one write path: lanes, the drift watcher and the
dry-run sandbox all go through it. What a lane does around it on its leased
partition (the fenced checkpoint, the error budget, a dead lane's note) is
:mod:`.partition`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pymongo import UpdateOne
from pymongo.client_session import ClientSession
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import BulkWriteError
from pymongo.write_concern import WriteConcern

from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.job import Job
from migronaut_core.background.planning.partition import Partitioner
from migronaut_core.background.spec import Direction
from migronaut_core.background.undo import CHANGED, ChangedSinceError
from migronaut_core.bson_values import canonical_id_key, clone_document
from migronaut_core.clock import elapsed_ms, monotonic
from migronaut_core.errors import (
    BackgroundConflictError,
    BackgroundFailedError,
    DocError,
    DocumentFailedError,
    MigronautError,
)
from migronaut_core.scrub import error_text, write_error_text
from migronaut_core.server_errors import document_write_errors, is_batch_fault
from migronaut_core.versioning import (
    exact_value,
    guarded_pipeline,
    occ_filter,
    revision_of,
    stamped_diff,
    version_of,
)

Document = dict[str, Any]


@dataclass(frozen=True, slots=True)
class TransformContext:
    """What a transform receives besides the document.

    ``session`` is set in transactional mode: side writes made with it commit
    with the batch. ``db`` and ``client`` are always there for lookups.
    """

    migration: str
    direction: Direction
    generation: int
    partition: str
    db: Database[Document]
    client: Any
    log: logging.Logger
    cancel: CancelToken
    session: ClientSession | None = None


@dataclass
class BatchResult:
    migrated: int = 0
    skipped: int = 0
    conflicts: int = 0
    retried: int = 0
    errors: list[DocError] = field(default_factory=list)
    #: Ids read and not rewritten (conflicts left to the next pass).
    left: list[Any] = field(default_factory=list)

    def counters(self, scanned: int) -> dict[str, int]:
        return {
            "scanned": scanned,
            "migrated": self.migrated,
            "skipped": self.skipped,
            "conflicts": self.conflicts,
            "retried": self.retried,
            "failed": len(self.errors),
            "batches": 1,
        }


# -- transforming ----------------------------------------------------------------------


def transform_all(
    job: Job, docs: Sequence[Document], ctx: TransformContext
) -> list[tuple[Document, Document | None, DocError | None]]:
    """Transform copies of ``docs``: ``(doc, new_doc, None)`` or ``(doc, None, error)``.

    A batch transform that raises, or returns the wrong number of results, fails
    the slice: it cannot say which document was at fault. An error that is the
    batch's, not the document's (:func:`~migronaut_core.server_errors.is_batch_fault`:
    a side write through ``ctx.session`` that hit a write conflict, or a side read
    or write through ``ctx.db`` whose connection dropped) is raised, so the whole
    transaction is retried or the slice cut off and claimed again, uncharged.
    """
    many = job.transform_many
    if many is not None:
        out = batch_results(job, many([clone_document(doc) for doc in docs], ctx), len(docs))
        return [_one_result(doc, result) for doc, result in zip(docs, out, strict=True)]
    one = job.transform_one
    assert one is not None  # the spec guarantees a transform for each direction it runs
    results = []
    for doc in docs:
        try:
            results.append(_one_result(doc, one(clone_document(doc), ctx)))
        except Exception as exc:
            if is_batch_fault(exc):
                raise
            results.append((doc, None, DocError(doc["_id"], error_text(exc), "transform")))
    return results


def batch_results(job: Job, out: Any, count: int) -> list[Any]:
    """What a batch transform returned for ``count`` documents, checked: one result each.

    :raises BackgroundFailedError: anything but a list of ``count`` results.
    """
    if not isinstance(out, list) or len(out) != count:
        got = len(out) if isinstance(out, list) else "no"
        raise BackgroundFailedError(
            f"{job.name}: the batch transform returned {got} result(s) for {count} "
            "document(s); it must return one per document, in order",
            {"migration": job.name},
        )
    return out


def _one_result(doc: Document, result: Any) -> tuple[Document, Document | None, DocError | None]:
    if isinstance(result, ChangedSinceError):
        return doc, None, DocError(doc["_id"], error_text(result), CHANGED)
    if isinstance(result, Exception):
        return doc, None, DocError(doc["_id"], error_text(result), "transform")
    if not isinstance(result, Mapping):
        text = f"the transform returned {type(result).__name__}, not a document"
        return doc, None, DocError(doc["_id"], text, "shape")
    return doc, dict(result), None


def build_ops(
    job: Job, transformed: Sequence[tuple[Document, Document | None, DocError | None]]
) -> tuple[list[UpdateOne], list[Document], list[DocError]]:
    """Guarded updates for the transformed documents, the document behind each, and errors."""
    ops: list[UpdateOne] = []
    owners: list[Document] = []
    errors: list[DocError] = []
    for doc, new_doc, error in transformed:
        update = document_update(job, doc, new_doc, error)
        if isinstance(update, DocError):
            errors.append(update)
            continue
        ops.append(guarded_update(job, doc, update))
        owners.append(doc)
    return ops, owners, errors


def document_update(
    job: Job, doc: Document, new_doc: Document | None, error: DocError | None
) -> Document | DocError:
    """The stamped update that rewrites one transformed document, or why it cannot be written.

    ``(doc, new_doc, error)`` is one item of :func:`transform_all`. The update
    touches only the fields the transform changed, plus the version (and
    revision) stamps; the error's reason is ``transform``, ``shape`` or the
    partitioner's refusal (a changed shard key).
    """
    if error is not None or new_doc is None:
        return error or DocError(doc["_id"], "no result", "shape")
    refused = job.partitioner.check_transform(doc, new_doc)
    if refused is not None:
        return DocError(doc["_id"], refused.message, refused.reason)
    spec = job.spec
    try:
        return stamped_diff(
            doc,
            new_doc,
            field=spec.field,
            target_version=job.target,
            revision_field=spec.revision_field,
        )
    except MigronautError as exc:
        return DocError(doc["_id"], exc.message, "shape")


def guarded_update(job: Job, doc: Document, update: Document) -> UpdateOne:
    """The write of one document, applied only while it is as it was read.

    Measured side by side (``bench.write_shapes``), keying the write by ``_id``
    alone and testing version and revision inside a ``$replaceWith`` pipeline
    keeps the server's ``_id`` fast path, which a filter on all three loses.
    """
    spec = job.spec
    if job.guard == "pipeline":
        pipeline = guarded_pipeline(
            doc, update, field=spec.field, version=job.source, revision_field=spec.revision_field
        )
        key = {"_id": exact_value(doc["_id"]), **job.partitioner.write_filter(doc)}
        return UpdateOne(key, pipeline)
    guard = occ_filter(
        doc, field=spec.field, version=job.source, revision_field=spec.revision_field
    )
    return UpdateOne({**guard, **job.partitioner.write_filter(doc)}, update)


# -- writing ---------------------------------------------------------------------------


def write_ops(
    collection: Collection[Document],
    ops: Sequence[UpdateOne],
    *,
    write_concern: Mapping[str, Any] | None,
    session: ClientSession | None,
) -> tuple[int, dict[int, Document]]:
    """Write ``ops`` unordered; return (documents modified, {index: write error}).

    Each op matches its document only while it is still as it was read, and then
    always changes it (the version stamp), so "modified" counts the writes that
    applied. Only single-document errors
    (duplicate key, validation, …) are taken apart; a write concern error or
    anything else fails the batch.
    """
    if not ops:
        return 0, {}
    target = collection
    if write_concern and session is None:
        target = collection.with_options(write_concern=WriteConcern(**write_concern))
    try:
        result = target.bulk_write(list(ops), ordered=False, session=session)
        return result.modified_count, {}
    except BulkWriteError as exc:
        failed = document_write_errors(exc)
        if failed is None:
            raise
        return int(exc.details.get("nModified", 0)), failed


def _by_ids(docs: Sequence[Document], partitioner: Partitioner) -> Document:
    """A filter for exactly these documents (with their shard keys when there are any)."""
    branches = [{"_id": doc["_id"], **partitioner.write_filter(doc)} for doc in docs]
    if any(len(branch) > 1 for branch in branches):
        return {"$or": branches}
    return {"_id": {"$in": [doc["_id"] for doc in docs]}}


@dataclass
class WriteRound:
    """One round of a batch, ready to write: the guarded updates and who they are for."""

    ops: list[UpdateOne]
    owners: list[Document]
    errors: list[DocError]


@dataclass(frozen=True)
class Written:
    """What the server said of a round: updates applied, per-op errors, time taken."""

    applied: int
    failed: dict[int, Document]
    elapsed_ms: float


def prepare_round(
    job: Job, docs: Sequence[Document], ctx: TransformContext, *, strict: bool = False
) -> WriteRound:
    """Transform ``docs`` and build their guarded updates (no database write)."""
    ops, owners, errors = build_ops(job, transform_all(job, docs, ctx))
    if strict and errors:
        raise DocumentFailedError(errors[0])
    return WriteRound(ops, owners, errors)


def write_round(
    job: Job,
    collection: Collection[Document],
    round_: WriteRound,
    session: ClientSession | None = None,
) -> Written:
    """Write a prepared round; safe to run on another thread than the one preparing the next.

    A journaling job (``undo = "journal"``) keeps the round's before-images first:
    in ``session``'s transaction, else acknowledged before the guarded write.
    """
    started = monotonic()
    if job.journal is not None and round_.owners:
        job.journal(round_.owners, session)
    applied, failed = write_ops(
        collection, round_.ops, write_concern=job.spec.write_concern, session=session
    )
    return Written(applied, failed, elapsed_ms(started))


def apply_batch(
    job: Job,
    docs: Sequence[Document],
    collection: Collection[Document],
    ctx: TransformContext,
    *,
    session: ClientSession | None = None,
    strict: bool = False,
    abort_on_conflict: bool = False,
) -> BatchResult:
    """Transform and write one batch, re-reading documents a concurrent write moved.

    :param strict: (transactions) raise on the first failed document instead of
        recording it, so its side writes never commit with the others.
    :param abort_on_conflict: (transactions) raise BackgroundConflictError when a
        document changed under the batch instead of re-reading it.
    """
    round_ = prepare_round(job, docs, ctx, strict=strict)
    written = write_round(job, collection, round_, session)
    return finish_batch(
        job,
        round_,
        written,
        collection,
        ctx,
        session=session,
        strict=strict,
        abort_on_conflict=abort_on_conflict,
    )


def finish_batch(
    job: Job,
    round_: WriteRound,
    written: Written,
    collection: Collection[Document],
    ctx: TransformContext,
    *,
    session: ClientSession | None = None,
    strict: bool = False,
    abort_on_conflict: bool = False,
) -> BatchResult:
    """Count a written round, and re-read, transform and write again what a concurrent write moved.

    Every applied update rewrote one document (the stamp always changes it), so the
    server's modified count is a floor of what this round migrated, whatever the
    application does to those documents afterwards. When fewer applied than were
    sent, the documents are read back: those at the target version exactly one
    revision past what was read were rewritten once since — by this round, or by a
    stalled lane of this migration whose own checkpoint its fence then refused —
    and count as migrated when they outnumber the applied updates.
    """
    result = BatchResult()
    conflict_round = 0
    while True:
        _record_round(round_, written, result, strict=strict)
        expected = len(round_.ops) - len(written.failed)
        if written.applied == expected:
            result.migrated += written.applied
            return result
        if abort_on_conflict:
            raise BackgroundConflictError(
                "a document changed under the transactional batch", {"reason": "write-conflict"}
            )
        candidates = [o for index, o in enumerate(round_.owners) if index not in written.failed]
        stale, rewritten_once = _read_back(job, candidates, collection, session)
        migrated = max(written.applied, rewritten_once)
        result.migrated += migrated
        result.skipped += expected - migrated - len(stale)
        if not stale:
            return result
        retry = list(
            collection.find({"$and": [job.match, _by_ids(stale, job.partitioner)]}, session=session)
        )
        result.skipped += len(stale) - len(retry)
        if not retry:
            return result
        if conflict_round >= job.spec.max_conflict_retries:
            result.conflicts += len(retry)
            result.left.extend(doc["_id"] for doc in retry)
            return result
        result.retried += len(retry)
        conflict_round += 1
        round_ = prepare_round(job, retry, ctx, strict=strict)
        written = write_round(job, collection, round_, session)


def _record_round(
    round_: WriteRound, written: Written, result: BatchResult, *, strict: bool
) -> None:
    """Add a round's transform errors and per-document write errors to ``result``."""
    result.errors.extend(round_.errors)
    write_errors = [
        DocError(
            round_.owners[index]["_id"],
            write_error_text(entry.get("code"), entry.get("errmsg")),
            "write",
        )
        for index, entry in written.failed.items()
    ]
    if strict and write_errors:
        raise DocumentFailedError(write_errors[0])
    result.errors.extend(write_errors)


def _read_back(
    job: Job,
    candidates: Sequence[Document],
    collection: Collection[Document],
    session: ClientSession | None,
) -> tuple[list[Document], int]:
    """After a short match: the candidates still at the source version (their update
    missed a concurrent write), and how many are at the target one revision on."""
    spec = job.spec
    projection = {spec.field: 1, **({spec.revision_field: 1} if spec.revision_field else {})}
    now_by_key = {
        canonical_id_key(doc["_id"]): doc
        for doc in collection.find(
            _by_ids(candidates, job.partitioner), projection, session=session
        )
    }
    stale: list[Document] = []
    rewritten_once = 0
    for before in candidates:
        now = now_by_key.get(canonical_id_key(before["_id"]))
        if now is None:
            continue
        version = version_of(now, spec.field)
        if version == job.source:
            stale.append(before)
        elif version == job.target and _one_revision_on(before, now, spec.revision_field):
            rewritten_once += 1
    return stale, rewritten_once


def _one_revision_on(before: Document, now: Document, revision_field: str | None) -> bool:
    if revision_field is None:
        return True
    return revision_of(now, revision_field) == (revision_of(before, revision_field) or 0) + 1
