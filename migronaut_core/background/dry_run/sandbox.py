"""A validating dry run: the engine's real write path in transactions that are always aborted.

The documents go through :func:`~migronaut_core.background.engine.batch.apply_batch`
(an update-pipeline migration's through its pipeline, one update per ``_id``:
:func:`~migronaut_core.background.engine.pipeline.first_refusal`) inside a
snapshot transaction on the primary, so unique indexes and collection
validators are checked by the server itself. A write error aborts a MongoDB
transaction on the spot, so a failed document is recorded and the transaction
is started again without it, until one attempt writes every remaining document
(or :data:`MAX_WRITE_FAILURES` have failed); each document's transform runs
once, and later attempts replay its result. Nothing is ever committed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pymongo import ReadPreference
from pymongo.client_session import ClientSession
from pymongo.collection import Collection
from pymongo.errors import PyMongoError
from pymongo.read_concern import ReadConcern

from migronaut_core.background.dry_run.preview import (
    Document,
    chunks,
    preview,
    transform,
    transform_context,
)
from migronaut_core.background.dry_run.report import DocumentPreview
from migronaut_core.background.engine.batch import TransformContext, apply_batch, batch_results
from migronaut_core.background.engine.pipeline import first_refusal
from migronaut_core.background.job import Job
from migronaut_core.background.runtime import Runtime
from migronaut_core.background.spec import BackgroundFunctions
from migronaut_core.bson_values import canonical_id_key, clone_document
from migronaut_core.errors import DocError, DocumentFailedError, StoreError
from migronaut_core.scrub import error_text
from migronaut_core.server_errors import is_transient_transaction
from migronaut_core.versioning import version_of

__all__ = ["MAX_TRANSIENT_RETRIES", "MAX_WRITE_FAILURES", "validated"]

#: Write errors a validating dry run isolates one by one (a transaction each) before
#: it leaves the rest unvalidated.
MAX_WRITE_FAILURES: Final = 50
#: Transient transaction errors (a concurrent write) a validating dry run retries.
MAX_TRANSIENT_RETRIES: Final = 5


@dataclass(frozen=True, slots=True)
class _Outcome:
    raised: bool
    value: Any


class _Memo:
    """A job's transforms, run once per document; a later call replays the first result.

    A validating dry run may start its transaction again several times (a write
    error aborts it); the user's code must not run, or log, once per attempt.
    """

    def __init__(self, job: Job) -> None:
        self._job = job
        self._outcomes: dict[str, _Outcome] = {}

    def job(self) -> Job:
        one, many = self._job.fns.transforms(self._job.direction)
        wrapped_one = self._one(one) if one is not None else None
        wrapped_many = self._many(many) if many is not None else None
        if self._job.direction == "revert":
            fns: BackgroundFunctions = dataclasses.replace(
                self._job.fns, revert=wrapped_one, revert_batch=wrapped_many
            )
        else:
            fns = dataclasses.replace(
                self._job.fns, migrate=wrapped_one, migrate_batch=wrapped_many
            )
        return dataclasses.replace(self._job, fns=fns)

    @staticmethod
    def _kept(value: Any) -> Any:
        return clone_document(value) if isinstance(value, Mapping) else value

    def _replay(self, key: str) -> Any:
        outcome = self._outcomes[key]
        if outcome.raised:
            raise outcome.value
        return self._kept(outcome.value)

    def _one(self, function: Callable[..., Any]) -> Callable[..., Any]:
        def one(doc: Document, ctx: TransformContext) -> Any:
            key = canonical_id_key(doc["_id"])
            if key not in self._outcomes:
                try:
                    self._outcomes[key] = _Outcome(False, self._kept(function(doc, ctx)))
                except Exception as exc:
                    self._outcomes[key] = _Outcome(True, exc)
            return self._replay(key)

        return one

    def _many(self, function: Callable[..., Any]) -> Callable[..., Any]:
        def many(docs: list[Document], ctx: TransformContext) -> list[Any]:
            missing = [doc for doc in docs if canonical_id_key(doc["_id"]) not in self._outcomes]
            if missing:
                out = batch_results(self._job, function(missing, ctx), len(missing))
                for doc, result in zip(missing, out, strict=True):
                    self._outcomes[canonical_id_key(doc["_id"])] = _Outcome(
                        False, self._kept(result)
                    )
            return [self._kept(self._outcomes[canonical_id_key(doc["_id"])].value) for doc in docs]

        return many


def validated(rt: Runtime, job: Job, picked: Sequence[Document]) -> list[DocumentPreview]:
    """Previews from the real write path, in transactions that are always aborted."""
    memo = _Memo(job)
    replaying = memo.job()
    failed: dict[str, DocumentPreview] = {}
    passed: dict[str, DocumentPreview] = {}
    ids = [doc["_id"] for doc in picked]
    write_failures = transient = 0
    while True:
        pending = [doc_id for doc_id in ids if canonical_id_key(doc_id) not in failed]
        try:
            passed, write_error = _attempt(rt, replaying, pending, failed)
        except PyMongoError as exc:
            if not is_transient_transaction(exc) or transient >= MAX_TRANSIENT_RETRIES:
                raise StoreError(
                    f"dry run of {job.name}: the validating transaction failed: {error_text(exc)}",
                    {"migration": job.name},
                ) from exc
            transient += 1
            continue
        if write_error is None:
            break
        failed[canonical_id_key(write_error.id)] = DocumentPreview(
            write_error.id, error=write_error.error, reason=write_error.reason
        )
        write_failures += 1
        if write_failures >= MAX_WRITE_FAILURES:
            passed = {}
            _give_up(ids, failed)
            break
    previews = []
    for doc_id in ids:
        key = canonical_id_key(doc_id)
        previews.append(failed.get(key) or passed[key])
    return previews


def _give_up(ids: Sequence[Any], failed: dict[str, DocumentPreview]) -> None:
    """Mark every document not failed yet as ``unvalidated`` (too many others failed first)."""
    for doc_id in ids:
        key = canonical_id_key(doc_id)
        if key not in failed:
            failed[key] = DocumentPreview(
                doc_id,
                error=f"not validated: {MAX_WRITE_FAILURES} other documents failed to write first",
                reason="unvalidated",
            )


def _attempt(
    rt: Runtime,
    job: Job,
    ids: Sequence[Any],
    failed: dict[str, DocumentPreview],
) -> tuple[dict[str, DocumentPreview], DocError | None]:
    """Write ``ids`` in one snapshot transaction on the primary, then abort it.

    Transform and shape errors go into ``failed`` (they are final: the transform
    is replayed). Returns the previews of the documents written, or the first
    write error, which aborted the transaction (the caller tries again without
    that document).
    """
    passed: dict[str, DocumentPreview] = {}
    collection = rt.db[job.collection]
    with rt.client.start_session(causal_consistency=False) as session:
        session.start_transaction(
            read_concern=ReadConcern("snapshot"), read_preference=ReadPreference.PRIMARY
        )
        try:
            by_key = {
                canonical_id_key(doc["_id"]): doc
                for doc in collection.find(
                    {"$and": [job.match, {"_id": {"$in": list(ids)}}]}, session=session
                )
            }
            docs = []
            for doc_id in ids:
                key = canonical_id_key(doc_id)
                if key in by_key:
                    docs.append(by_key[key])
                else:
                    passed[key] = DocumentPreview(
                        doc_id,
                        error="the document changed since it was picked: it no longer matches",
                        reason="conflict",
                    )
            ctx = transform_context(rt, job, session)
            # A failing aggregation would abort the transaction: evaluate outside it.
            evaluating = transform_context(rt, job, None) if job.spec.mode == "update" else ctx
            for chunk in chunks(docs, job.spec.batch_size):
                writable = []
                for item in transform(job, chunk, evaluating):
                    shown = preview(job, *item)
                    if shown.failed:
                        failed[canonical_id_key(shown.id)] = shown
                    else:
                        passed[canonical_id_key(shown.id)] = shown
                        writable.append(item[0])
                if not writable:
                    continue
                if job.spec.mode == "update":
                    ids_written = [doc["_id"] for doc in writable]
                    refused = first_refusal(job, collection, ids_written, session=session)
                    if refused is not None:
                        return {}, refused
                    _mark_unwritten(job, writable, (), passed, collection, session)
                    continue
                try:
                    result = apply_batch(
                        job, writable, collection, ctx, session=session, strict=True
                    )
                except DocumentFailedError as exc:
                    return {}, exc.error
                _mark_unwritten(job, writable, result.left, passed, collection, session)
        finally:
            if session.in_transaction:
                session.abort_transaction()
    return passed, None


def _mark_unwritten(
    job: Job,
    written: Sequence[Document],
    left: Sequence[Any],
    passed: dict[str, DocumentPreview],
    collection: Collection[Document],
    session: ClientSession,
) -> None:
    """Turn documents the batch did not bring to the target version into conflicts."""
    at_target = {
        canonical_id_key(doc["_id"])
        for doc in collection.find(
            {"_id": {"$in": [doc["_id"] for doc in written]}},
            {job.spec.field: 1},
            session=session,
        )
        if version_of(doc, job.spec.field) == job.target
    }
    left_keys = {canonical_id_key(doc_id) for doc_id in left}
    for doc in written:
        key = canonical_id_key(doc["_id"])
        if key in at_target and key not in left_keys:
            continue
        passed[key] = DocumentPreview(
            doc["_id"],
            error="the document changed during the dry run; a pass would read it again",
            reason="conflict",
        )
