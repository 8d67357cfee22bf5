"""Previewing an update-pipeline migration: its stages run by the server as an aggregation.

An update pipeline's stages (``$set``, ``$unset``, ``$replaceWith``, …) mean the
same in an aggregation, so the server computes what each picked document would
become without writing anything; the result then goes through the same
per-document preview as a Python transform's, so the report shows the fields a
pass would ``$set`` and ``$unset`` and stamps them the same way. A stage that
fails on one document's values (``$toInt`` of text, say) fails the whole
aggregation: the documents are then evaluated one by one, so each failing one is
reported on its own (reason ``update``, the server's code, never a value).
Validators and unique indexes are only checked by the real write
(``validate``: :mod:`.sandbox`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pymongo.client_session import ClientSession
from pymongo.collection import Collection
from pymongo.errors import OperationFailure

from migronaut_core.background.engine.batch import TransformContext
from migronaut_core.background.job import Job
from migronaut_core.bson_values import bson_equal
from migronaut_core.errors import DocError
from migronaut_core.scrub import write_error_text
from migronaut_core.server_errors import is_batch_fault

__all__ = ["evaluate"]

Document = dict[str, Any]
Evaluated = list[tuple[Document, Document | None, DocError | None]]


def evaluate(job: Job, docs: Sequence[Document], ctx: TransformContext) -> Evaluated:
    """What the pipeline makes of each of ``docs``: ``(doc, after, None)`` or ``(doc, None, err)``.

    ``after`` keeps the document's ``_id`` (as an update does) and carries no stamps
    of its own; the caller stamps it as a pass would. Reads through ``ctx.db``
    (the dry run's isolated handles), in ``ctx.session`` when there is one.

    :raises PyMongoError: a fault that is not the documents' (a dropped connection,
        a stepped-down primary).
    """
    if not docs:
        return []
    stages = job.spec.pipeline(job.direction)
    assert stages is not None  # update mode has a pipeline for every direction it runs
    collection = ctx.db[job.collection]
    ids = [doc["_id"] for doc in docs]
    try:
        afters = _aggregate(collection, {"$in": ids}, stages, ctx.session)
    except OperationFailure as exc:
        if is_batch_fault(exc):
            raise
        afters = None
    if afters is not None and _aligned(docs, afters):
        return [(doc, _with_id(doc, after), None) for doc, after in zip(docs, afters, strict=True)]
    return [_one(collection, doc, stages, ctx.session) for doc in docs]


def _aggregate(
    collection: Collection[Document],
    ids: Any,
    stages: list[dict[str, Any]],
    session: ClientSession | None,
) -> list[Document]:
    # Every update-pipeline stage maps one document to one, in order: results pair up.
    pipeline = [{"$match": {"_id": ids}}, {"$sort": {"_id": 1}}, *stages]
    return list(collection.aggregate(pipeline, session=session))


def _aligned(docs: Sequence[Document], afters: Sequence[Document]) -> bool:
    """Whether the results pair with ``docs`` by position (none vanished meanwhile)."""
    if len(afters) != len(docs):
        return False
    return all(
        "_id" not in after or bson_equal(after["_id"], doc["_id"])
        for doc, after in zip(docs, afters, strict=True)
    )


def _one(
    collection: Collection[Document],
    doc: Document,
    stages: list[dict[str, Any]],
    session: ClientSession | None,
) -> tuple[Document, Document | None, DocError | None]:
    try:
        found = _aggregate(collection, doc["_id"], stages, session)
    except OperationFailure as exc:
        if is_batch_fault(exc):
            raise
        return doc, None, DocError(doc["_id"], write_error_text(exc.code, None), "update")
    if not found:
        text = "the document changed since it was picked: it no longer exists"
        return doc, None, DocError(doc["_id"], text, "conflict")
    return doc, _with_id(doc, found[0]), None


def _with_id(doc: Document, after: Document) -> Document:
    """``after`` with ``doc``'s ``_id`` first: an update never changes or drops it."""
    return {"_id": doc["_id"], **{key: value for key, value in after.items() if key != "_id"}}
