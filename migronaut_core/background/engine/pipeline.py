"""Update-pipeline batches: a batch rewritten by one server-side ``update_many``.

A migration written as ``background.update`` never brings a document to the
client. Its batches are read through the version index as ``_id`` values only (a
covered read), noted as the batch's intent like any batch, then rewritten by one
``update_many`` whose filter is those ``_id`` values, the source version and the
migration's filter, and whose pipeline is the user's stages followed by the
engine's stamps (:func:`~migronaut_core.versioning.stamped_pipeline`). The server
applies each document's update atomically to its current state, so a concurrent
application write is never overwritten with stale data and there are no
conflicts to re-read; a document the application moved off the source version
meanwhile simply no longer matches (``skipped``).

The filter names the ids read rather than their ``_id`` range: measured the same
speed, and the update then touches exactly the documents of the intent note, so
a successor settles a dead lane's batch exactly
(:func:`~.batch.settle_dead_lane_batch`) even while the application inserts into
the range.

An ``update_many`` stops at the first document the server refuses (validation,
duplicate key, an expression over an unexpected type), and its reply does not
say how many it rewrote before that one. Such a batch is isolated: the batch's
documents already at the target version are counted as rewritten (the rule the
dead-lane settle uses), and the rest are written again one update per ``_id`` in
one unordered bulk, so the good documents migrate and each failing ``_id``
becomes a document error (``reason == "update"``, the code, never a value).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from pymongo import UpdateMany, UpdateOne
from pymongo.client_session import ClientSession
from pymongo.collection import Collection
from pymongo.errors import BulkWriteError
from pymongo.write_concern import WriteConcern

from migronaut_core.background.engine.batch import BatchResult, Document, Written
from migronaut_core.background.job import Job
from migronaut_core.clock import elapsed_ms, monotonic
from migronaut_core.errors import DocError
from migronaut_core.scrub import write_error_text
from migronaut_core.server_errors import pipeline_write_errors
from migronaut_core.versioning import stamped_pipeline, version_filter

#: The index every update-pipeline write goes through. Left to itself the planner
#: races the version index (whose key the update rewrites) against ``_id`` on each
#: batch, and a batch of 2,000 then took 450-560 ms instead of 60-85 ms (measured on
#: one ``mongod``): the ``_id`` index finds exactly the batch's documents.
_BY_ID: Final = [("_id", 1)]

#: The projection of an update-pipeline batch's read: ``_id`` alone, covered by
#: the version index.
ID_ONLY: Final[Mapping[str, Any]] = {"_id": 1}


def pipeline_of(job: Job) -> list[dict[str, Any]]:
    """The stages a batch of ``job`` runs: the user's for its direction, then the stamps."""
    stages = job.spec.pipeline(job.direction)
    assert stages is not None  # update mode has a pipeline for every direction it runs
    spec = job.spec
    return stamped_pipeline(
        stages, field=spec.field, target_version=job.target, revision_field=spec.revision_field
    )


def _matching(job: Job, ids: Any) -> Document:
    """The documents of ``ids`` (an ``$in`` list or one id) still as a pass matches them."""
    if "_id" in job.match:
        return {"$and": [job.match, {"_id": ids}]}
    return {**job.match, "_id": ids}


def write_pipeline(
    job: Job,
    collection: Collection[Document],
    ids: Sequence[Any],
    *,
    session: ClientSession | None = None,
) -> tuple[int, dict[int, Document]]:
    """Rewrite the documents of ``ids`` still at the source version; isolate failures.

    :returns: (documents rewritten, {index in ``ids``: write error}) — the
        errors those of documents the server refused; every other document
        of ``ids`` was rewritten or no longer matched.
    :raises PyMongoError: a fault of the batch (not-primary, a time limit, a
        write concern error, …): nothing is counted, the batch runs again.
    """
    if not ids:
        return 0, {}
    target = collection
    if job.spec.write_concern and session is None:
        target = collection.with_options(write_concern=WriteConcern(**job.spec.write_concern))
    stages = pipeline_of(job)
    try:
        result = target.bulk_write(
            [UpdateMany(_matching(job, {"$in": list(ids)}), stages, hint=_BY_ID)],
            session=session,
        )
        return result.modified_count, {}
    except BulkWriteError as exc:
        if pipeline_write_errors(exc) is None:
            raise
    done = collection.count_documents(
        {"_id": {"$in": list(ids)}, **version_filter(job.spec.field, job.target)},
        session=session,
    )
    ops = [UpdateOne(_matching(job, one), stages, hint=_BY_ID) for one in ids]
    try:
        result = target.bulk_write(ops, ordered=False, session=session)
        return done + result.modified_count, {}
    except BulkWriteError as exc:
        failed = pipeline_write_errors(exc)
        if failed is None:
            raise
        return done + int(exc.details.get("nModified", 0)), failed


def first_refusal(
    job: Job,
    collection: Collection[Document],
    ids: Sequence[Any],
    *,
    session: ClientSession,
) -> DocError | None:
    """Rewrite ``ids`` one update each, in order, inside ``session``'s transaction.

    For a validating dry run: a write error aborts a transaction, so the first
    document the server refuses is returned (the caller starts again without it).

    :raises PyMongoError: a fault of the batch, not of a document.
    """
    if not ids:
        return None
    stages = pipeline_of(job)
    ops = [UpdateOne(_matching(job, one), stages, hint=_BY_ID) for one in ids]
    try:
        collection.bulk_write(ops, ordered=True, session=session)
    except BulkWriteError as exc:
        failed = pipeline_write_errors(exc)
        if not failed:
            raise
        index, entry = min(failed.items())
        text = write_error_text(entry.get("code"), entry.get("errmsg"))
        return DocError(ids[index], text, "update")
    return None


def pipeline_result(ids: Sequence[Any], written: Written) -> BatchResult:
    """Count a written update-pipeline batch as a :class:`~.batch.BatchResult`."""
    errors = [
        DocError(ids[index], write_error_text(entry.get("code"), entry.get("errmsg")), "update")
        for index, entry in sorted(written.failed.items())
    ]
    migrated = min(written.applied, len(ids) - len(errors))
    return BatchResult(migrated=migrated, skipped=len(ids) - migrated - len(errors), errors=errors)


class PipelineWork:
    """How an update-pipeline lane reads, writes and counts a batch (see ``BatchWork``)."""

    projection: Final[Mapping[str, Any] | None] = ID_ONLY

    def __init__(
        self,
        job: Job,
        collection: Collection[Document],
        session: ClientSession | None = None,
    ) -> None:
        self._job = job
        self._collection = collection
        self._session = session

    def prepare(self, docs: Sequence[Document]) -> list[Any]:
        """The batch's ids: nothing is computed on the client."""
        return [doc["_id"] for doc in docs]

    def write(self, prepared: list[Any]) -> Written:
        started = monotonic()
        applied, failed = write_pipeline(
            self._job, self._collection, prepared, session=self._session
        )
        return Written(applied, failed, elapsed_ms(started))

    def finish(self, prepared: list[Any], written: Written) -> BatchResult:
        return pipeline_result(prepared, written)


def apply_pipeline_batch(
    job: Job,
    docs: Sequence[Document],
    collection: Collection[Document],
    *,
    session: ClientSession | None = None,
) -> BatchResult:
    """Rewrite ``docs`` (only their ``_id`` values are read) by the pipeline; count them."""
    work = PipelineWork(job, collection, session)
    ids = work.prepare(docs)
    return work.finish(ids, work.write(ids))
