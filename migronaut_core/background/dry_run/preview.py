"""Picking a dry run's documents and previewing what a pass would write to them.

The job is the one a pass would run (the registered spec, direction and
excluded documents, else the file's), documents are read through its version
index, and each transformed copy (for an update-pipeline migration: what the
server's aggregation of its stages returned) goes through the engine's own
per-document step (:func:`~migronaut_core.background.engine.batch.document_update`),
so a preview shows exactly the fields a pass would ``$set`` and ``$unset``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

from pymongo.client_session import ClientSession
from pymongo.errors import ExecutionTimeout

from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.dry_run.isolation import (
    isolated_client,
    isolated_database,
    isolation_of,
)
from migronaut_core.background.dry_run.options import check_mode
from migronaut_core.background.dry_run.pipeline import evaluate
from migronaut_core.background.dry_run.report import DocumentPreview, Method
from migronaut_core.background.engine.batch import (
    TransformContext,
    document_update,
    transform_all,
)
from migronaut_core.background.job import Job, build_job
from migronaut_core.background.runtime import LoadedBackground, Runtime
from migronaut_core.background.spec import BackgroundSpec, read_stored
from migronaut_core.background.store import StateDocument
from migronaut_core.bson_values import canonical_id_key
from migronaut_core.errors import DocError
from migronaut_core.scrub import error_text

__all__ = [
    "COUNT_CAP",
    "COUNT_TIMEOUT_MS",
    "DRY_RUN_PARTITION",
    "Document",
    "Transformed",
    "chunks",
    "dry_run_job",
    "estimate",
    "pick",
    "pick_runs",
    "preview",
    "spec_of",
    "transform",
    "transform_context",
    "transformed",
]

#: The match's count stops here (the estimate is then a floor: ``at_least``).
COUNT_CAP: Final = 1_000_000
#: How long the count may take before the estimate is left out.
COUNT_TIMEOUT_MS: Final = 5_000
#: What a transform sees as its partition in a dry run.
DRY_RUN_PARTITION: Final = "dry-run"

Document = dict[str, Any]
Transformed = list[tuple[Document, Document | None, DocError | None]]


# ─── The job ──────────────────────────────────────────────────────────────────


def spec_of(name: str, loaded: LoadedBackground, state: StateDocument | None) -> BackgroundSpec:
    """The registered spec when there is one (it wins for running lanes), else the file's."""
    if state is not None and state.get("spec"):
        return read_stored(state["spec"], name=name)
    return loaded.spec


def dry_run_job(
    rt: Runtime,
    name: str,
    loaded: LoadedBackground,
    state: StateDocument | None,
    *,
    steps: int | None,
    from_start: bool,
) -> Job:
    """The job a pass would run: the registered spec, direction and exclusions, or the file's."""
    check_mode(name, spec_of(name, loaded, state), steps=steps, from_start=from_start)
    # Built as lanes build it, so the preview refuses what lanes refuse (a shard key change);
    # a dry run keeps no before-images.
    job = build_job(rt, name, loaded, state)
    job.journal = None
    return job


def transform_context(rt: Runtime, job: Job, session: ClientSession | None) -> TransformContext:
    """What the transforms see in a dry run (``session``: the aborted transaction's).

    ``db`` and ``client`` are isolated (:mod:`.isolation`): bound to ``session``,
    or reading only without one.
    """
    isolation = isolation_of(rt, session)
    return TransformContext(
        migration=job.name,
        direction=job.direction,
        generation=job.generation,
        partition=DRY_RUN_PARTITION,
        db=isolated_database(rt.db, isolation),
        client=isolated_client(rt.client, isolation),
        log=job.log,
        cancel=CancelToken(),
        session=session,
    )


# ─── Picking documents ────────────────────────────────────────────────────────


def _hint(job: Job) -> dict[str, Any]:
    """The version index as a command's ``hint`` option (an aggregate takes no key list)."""
    if job.hint is None:
        return {}
    if isinstance(job.hint, str | Mapping):
        return {"hint": job.hint}
    return {"hint": dict(job.hint)}


def estimate(rt: Runtime, job: Job) -> tuple[int | None, bool]:
    """Count the matching documents, up to :data:`COUNT_CAP`; ``None`` when out of time."""
    try:
        found = rt.db[job.collection].count_documents(
            job.match, limit=COUNT_CAP, maxTimeMS=COUNT_TIMEOUT_MS, **_hint(job)
        )
    except ExecutionTimeout:
        return None, False
    return found, found >= COUNT_CAP


def pick(rt: Runtime, job: Job, method: Method, size: int) -> list[Document]:
    """The documents to look at: the first ``size`` by ``_id``, or a sample in ``_id`` order."""
    collection = rt.db[job.collection]
    if method == "first":
        return list(collection.find(job.match, sort=[("_id", 1)], limit=size, **_hint(job)))
    pipeline: list[dict[str, Any]] = [
        {"$match": job.match},
        {"$sample": {"size": size}},
        {"$sort": {"_id": 1}},
    ]
    seen: set[str] = set()
    picked: list[Document] = []
    with collection.aggregate(pipeline, **_hint(job)) as sampled:
        for doc in sampled:
            key = canonical_id_key(doc["_id"])
            if key not in seen:  # $sample may repeat a document; look at it once
                seen.add(key)
                picked.append(doc)
    return picked


def pick_runs(rt: Runtime, job: Job, size: int, length: int) -> list[list[Document]]:
    """Up to ``size`` matching documents in stretches of up to ``length`` consecutive
    ones by ``_id``, each from a randomly sampled start: what a lane's batches read,
    pages and all.

    No document is picked twice. Stretches cut short (by the end of the match, or
    by one picked before) are topped up from the first matching documents, so a
    match of at least ``size`` documents always gives that many.
    """
    collection = rt.db[job.collection]
    length = max(1, min(length, size))
    runs = -(-size // length)
    starts = collection.aggregate(
        [{"$match": job.match}, {"$sample": {"size": runs}}, {"$project": {"_id": 1}}],
        **_hint(job),
    )
    with starts:
        firsts = [doc["_id"] for doc in starts]
    seen: set[str] = set()
    picked: list[list[Document]] = []
    for first in firsts:
        limit = min(length, size - len(seen))
        if limit <= 0:  # a limit of 0 is none at all
            break
        match = {"$and": [job.match, {"_id": {"$gte": first}}]}
        found = collection.find(match, sort=[("_id", 1)], limit=limit, **_hint(job))
        picked.append(_unseen(found, seen))
    short = size - len(seen)
    if short > 0:
        found = collection.find(job.match, sort=[("_id", 1)], limit=size, **_hint(job))
        rest = _unseen(found, seen)[:short]
        picked.extend(list(run) for run in chunks(rest, length))
    return [run for run in picked if run]


def _unseen(docs: Iterable[Document], seen: set[str]) -> list[Document]:
    """``docs`` not in ``seen`` (canonical ``_id`` keys), which now holds them too."""
    fresh: list[Document] = []
    for doc in docs:
        key = canonical_id_key(doc["_id"])
        if key not in seen:
            seen.add(key)
            fresh.append(doc)
    return fresh


def chunks(docs: Sequence[Document], size: int) -> Iterator[Sequence[Document]]:
    for start in range(0, len(docs), size):
        yield docs[start : start + size]


# ─── Previewing ───────────────────────────────────────────────────────────────


def transform(job: Job, docs: Sequence[Document], ctx: TransformContext) -> Transformed:
    """:func:`transform_all`, where a failing batch transform fails each of its documents.

    A per-document transform is run one document at a time, so an error it raises
    that :func:`transform_all` leaves to the batch (a dropped connection, a
    transient transaction error) is reported on that document alone. An
    update-pipeline migration's documents are evaluated by the server
    (:func:`~.pipeline.evaluate`).
    """
    if job.spec.mode == "update":
        return evaluate(job, docs, ctx)
    if job.transform_many is None:
        return [item for doc in docs for item in _transform_or_fail(job, [doc], ctx, "")]
    return _transform_or_fail(job, docs, ctx, "the batch transform failed: ")


def _transform_or_fail(
    job: Job, docs: Sequence[Document], ctx: TransformContext, prefix: str
) -> Transformed:
    try:
        return transform_all(job, docs, ctx)
    except Exception as exc:
        text = f"{prefix}{error_text(exc)}"
        return [(doc, None, DocError(doc["_id"], text, "transform")) for doc in docs]


def preview(
    job: Job, doc: Document, new_doc: Document | None, error: DocError | None
) -> DocumentPreview:
    """The fields the guarded update would write for one transformed document, or its error."""
    update = document_update(job, doc, new_doc, error)
    if isinstance(update, DocError):
        return DocumentPreview(doc["_id"], error=update.error, reason=update.reason)
    set_fields = (*update.get("$set", {}), *update.get("$inc", {}))
    unset_fields = tuple(update.get("$unset", {}))
    stamps = {job.spec.field, job.spec.revision_field}
    changed = any(name not in stamps for name in (*set_fields, *unset_fields))
    return DocumentPreview(
        doc["_id"], set_fields=set_fields, unset_fields=unset_fields, changed=changed
    )


def transformed(rt: Runtime, job: Job, docs: Sequence[Document]) -> list[DocumentPreview]:
    """Previews from the transform alone, run on copies in batches of ``batch_size``."""
    ctx = transform_context(rt, job, None)
    previews: list[DocumentPreview] = []
    for chunk in chunks(docs, job.spec.batch_size):
        previews.extend(preview(job, *item) for item in transform(job, chunk, ctx))
    return previews
