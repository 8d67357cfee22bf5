"""Dry runs of background migrations: what a pass would do to a few documents, with nothing kept.

A dry run picks a handful of the documents a pass would rewrite (a ``$sample``
of them, or the first ``n`` by ``_id``) and runs the migration's transform on
copies of them. For each document the report says which top-level fields the
rewrite would ``$set`` and ``$unset`` (names only, never values), or why the
document would fail (``transform``, ``shape``, and with ``validate`` also
``write`` and ``conflict``).

``validate`` goes further: it sends the documents through the engine's real
write path (:func:`~migronaut_core.background.engine.batch.apply_batch`) inside a
snapshot transaction on the primary that is always aborted. Unique indexes and
collection validators are then checked by the server itself. A write error
aborts a MongoDB transaction on the spot, so a failed document is recorded and
the transaction is started again without it, until one attempt writes every
remaining document; each document's transform runs once, and later attempts
replay its result.

Nothing is written: no state document, no partition, no changelog record, no
change to the collection. (A transform that writes elsewhere on its own, without
``ctx.session``, is beyond reach; with ``validate`` the writes it makes through
``ctx.session`` are aborted with the rest.) Works for a registered migration
(its registered spec, direction and excluded documents) and for one that is
only a file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import bson
from pymongo import ReadPreference
from pymongo.client_session import ClientSession
from pymongo.collection import Collection
from pymongo.errors import ExecutionTimeout, PyMongoError
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.engine.batch import (
    TransformContext,
    apply_batch,
    transform_all,
)
from migronaut_core.background.engine.steps import StepContext, read_step_result
from migronaut_core.background.job import Job, partitioner_for
from migronaut_core.background.runtime import LoadedBackground, Runtime
from migronaut_core.background.spec import (
    BackgroundFunctions,
    BackgroundSpec,
    Direction,
    exclude_bad_ids,
    match_of,
)
from migronaut_core.background.views import json_safe
from migronaut_core.errors import (
    BackgroundFailedError,
    ConfigInvalidError,
    DocError,
    DocumentFailedError,
    MigronautError,
    StoreError,
    TransactionsUnsupportedError,
)
from migronaut_core.runner import supports_transactions
from migronaut_core.scrub import error_text
from migronaut_core.server_errors import is_transient_transaction
from migronaut_core.versioning import canonical_id_key, clone_document, stamped_diff, version_of

__all__ = [
    "DEFAULT_SAMPLE",
    "MAX_DOCUMENTS",
    "DocumentPreview",
    "DryRunReport",
    "check_options",
    "dry_run",
]

log = logging.getLogger("migronaut_core.background")

#: Documents a dry run looks at when neither ``sample`` nor ``first`` is given.
DEFAULT_SAMPLE: Final = 20
#: The most documents one dry run looks at.
MAX_DOCUMENTS: Final = 10_000
#: The match's count stops here (the estimate is then a floor: ``at_least``).
COUNT_CAP: Final = 1_000_000
#: How long the count may take before the estimate is left out.
COUNT_TIMEOUT_MS: Final = 5_000
#: Write errors a validating dry run isolates one by one (a transaction each) before
#: it leaves the rest unvalidated.
MAX_WRITE_FAILURES: Final = 50
#: Transient transaction errors (a concurrent write) a validating dry run retries.
MAX_TRANSIENT_RETRIES: Final = 5
#: What a transform sees as its partition in a dry run.
DRY_RUN_PARTITION: Final = "dry-run"

Method = Literal["sample", "first"]
Document = dict[str, Any]
_Transformed = list[tuple[Document, Document | None, DocError | None]]


# ─── The report ───────────────────────────────────────────────────────────────


@dataclass(frozen=True, slots=True)
class DocumentPreview:
    """What a pass would do to one document: the fields it would write, or why it would fail.

    :param id: the document's ``_id``.
    :param set_fields: top-level fields the update would ``$set`` (the version
        and revision stamps included), in the update's order.
    :param unset_fields: top-level fields the update would ``$unset``.
    :param changed: the transform changed something besides the stamps.
    :param error: a value-free text, when the document would fail.
    :param reason: with ``error``: ``transform`` (it raised or returned no
        document), ``shape`` (what it returned cannot be written), and with
        ``validate`` also ``write`` (the server refused the update: a duplicate
        key, a validator), ``conflict`` (the document changed meanwhile) or
        ``unvalidated`` (too many others failed to write first).
    """

    id: Any
    set_fields: tuple[str, ...] = ()
    unset_fields: tuple[str, ...] = ()
    changed: bool = False
    error: str | None = None
    reason: str | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: ``{id, changes: {set, unset}}`` or ``{id, error, reason}``."""
        if self.failed:
            return {"id": json_safe(self.id), "error": self.error, "reason": self.reason}
        return {
            "id": json_safe(self.id),
            "changes": {"set": list(self.set_fields), "unset": list(self.unset_fields)},
        }


@dataclass(frozen=True, slots=True)
class DryRunReport:
    """The outcome of a dry run; nothing it describes was kept.

    :param migration: the background migration's name.
    :param collection: the collection it rewrites.
    :param direction: ``forward``, or ``revert`` for a registered way back.
    :param status: the registered migration's status; ``None`` when only the file exists.
    :param file_changed: the file on disk differs from the registered one (its
        functions ran with the registered spec; lanes wait until it is repinned).
    :param method: ``sample`` (random matching documents) or ``first`` (by ``_id``).
    :param size: how many documents were asked for.
    :param validate: the real write path ran in an aborted transaction.
    :param estimate: matching documents counted (``None``: the count ran out of time).
    :param at_least: the count stopped at its cap; ``estimate`` is a floor.
    :param documents: one preview per document looked at, in ``_id`` order.
    """

    migration: str
    collection: str
    direction: Direction
    status: str | None
    file_changed: bool
    method: Method
    size: int
    validate: bool
    estimate: int | None
    at_least: bool
    documents: tuple[DocumentPreview, ...]

    @property
    def registered(self) -> bool:
        return self.status is not None

    @property
    def totals(self) -> dict[str, int]:
        """``documents`` looked at, how many ``would_change`` (beyond the version stamp),
        stay ``unchanged`` but for the stamp, and ``errors``."""
        errors = sum(1 for doc in self.documents if doc.failed)
        changing = sum(1 for doc in self.documents if not doc.failed and doc.changed)
        return {
            "documents": len(self.documents),
            "would_change": changing,
            "unchanged": len(self.documents) - errors - changing,
            "errors": errors,
        }

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-safe data (ids rendered like the status views render them)."""
        return {
            "migration": self.migration,
            "collection": self.collection,
            "direction": self.direction,
            "registered": self.registered,
            "status": self.status,
            "file_changed": self.file_changed,
            self.method: self.size,
            "validate": self.validate,
            "estimate": self.estimate,
            "at_least": self.at_least,
            "totals": self.totals,
            "documents": [doc.to_dict() for doc in self.documents],
        }


# ─── Options ──────────────────────────────────────────────────────────────────


def _count_option(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DOCUMENTS:
        raise ConfigInvalidError(
            f"dry run: {key} must be an integer from 1 to {MAX_DOCUMENTS}", {"key": key}
        )
    return value


def check_options(*, sample: int | None, first: int | None) -> tuple[Method, int]:
    """Validate how a dry run picks documents; return the method and how many.

    :raises ConfigInvalidError: ``sample`` and ``first`` together, or a size out
        of 1..:data:`MAX_DOCUMENTS`.
    """
    if sample is not None and first is not None:
        raise ConfigInvalidError(
            "dry run: give sample or first, not both", {"key": "sample", "conflicts": "first"}
        )
    if first is not None:
        return "first", _count_option(first, "first")
    if sample is not None:
        return "sample", _count_option(sample, "sample")
    return "sample", DEFAULT_SAMPLE


def _check_mode(name: str, spec: BackgroundSpec, *, steps: int | None, from_start: bool) -> None:
    """Refuse step options for a declarative migration."""
    if spec.mode == "step":
        return
    if steps is not None or from_start:
        key = "steps" if steps is not None else "from_start"
        raise ConfigInvalidError(
            f"dry run of {name}: {name} is declarative; dry-run it on a sample (sample, first), "
            f"not by steps (`{key}`)",
            {"migration": name, "key": key},
        )


# ─── Entry point ──────────────────────────────────────────────────────────────


def dry_run(
    rt: Runtime,
    name: str,
    *,
    sample: int | None = None,
    first: int | None = None,
    validate: bool = False,
    steps: int | None = None,
    from_start: bool = False,
) -> DryRunReport | StepDryRunReport:
    """Preview a background migration on a few of its documents, writing nothing.

    A step migration is previewed by steps instead (:func:`dry_run_steps`).

    :param sample: look at this many random matching documents (default
        :data:`DEFAULT_SAMPLE` when ``first`` is not given either).
    :param first: look at the first this many matching documents by ``_id``.
    :param validate: run the real write path in a transaction that is always
        aborted, so duplicate keys and validator failures show as ``write`` errors.
    :param steps: (step migrations) how many steps to run (default 1).
    :param from_start: (step migrations) start from no checkpoint.
    :raises ConfigInvalidError: bad options (before anything is read), step
        options for a declarative migration, or a step migration.
    :raises TransactionsUnsupportedError: ``validate`` on a standalone server.
    :raises MigrationFileNotFoundError: no such migration file.
    """
    method, size = check_options(sample=sample, first=first)
    loaded = rt.load(name)
    state = rt.store.get(name, projection={"history": 0, "doc_errors": 0})
    if _spec_of(name, loaded, state).mode == "step":
        return dry_run_steps(rt, name, steps=steps, from_start=from_start)
    job = _job(rt, name, loaded, state, steps=steps, from_start=from_start)
    if validate and not supports_transactions(rt.client):
        raise TransactionsUnsupportedError(
            f"dry run of {name}: validate runs the write path in a transaction, which needs a "
            "replica set or a sharded cluster; this server is standalone",
            {"migration": name},
        )
    estimate, at_least = _estimate(rt, job)
    picked = _pick(rt, job, method, size)
    previews = _validated(rt, job, picked) if validate else _transformed(rt, job, picked)
    report = DryRunReport(
        migration=name,
        collection=job.collection,
        direction=job.direction,
        status=None if state is None else str(state.get("status")),
        file_changed=state is not None and state.get("checksum") not in (None, loaded.checksum),
        method=method,
        size=size,
        validate=validate,
        estimate=estimate,
        at_least=at_least,
        documents=tuple(previews),
    )
    totals = report.totals
    log.info(
        "dry run of %s%s: %d document(s), %d would change, %d unchanged, %d error(s)",
        name,
        " (validated)" if validate else "",
        totals["documents"],
        totals["would_change"],
        totals["unchanged"],
        totals["errors"],
    )
    return report


def _job(
    rt: Runtime,
    name: str,
    loaded: LoadedBackground,
    state: Mapping[str, Any] | None,
    *,
    steps: int | None,
    from_start: bool,
) -> Job:
    """The job a pass would run: the registered spec, direction and exclusions, or the file's."""
    spec = _spec_of(name, loaded, state)
    _check_mode(name, spec, steps=steps, from_start=from_start)
    assert spec.collection is not None  # a declarative spec always names its collection
    direction: Direction = (
        "revert" if state is not None and state.get("direction") == "revert" else "forward"
    )
    bad_ids = list((state or {}).get("bad_ids") or [])
    # The preview refuses what lanes refuse (a transform that changes a shard key).
    splitting = partitioner_for(rt, spec, direction)
    return Job(
        name=name,
        spec=spec,
        fns=loaded.fns,
        direction=direction,
        match=exclude_bad_ids(match_of(spec, direction), bad_ids),
        partitioner=splitting.partitioner,
        hint=splitting.hint,
        log=logging.getLogger(f"migronaut.background.{name}"),
        generation=int((state or {}).get("generation", 0)),
        guard="pipeline" if rt.supports_pipeline_guard() else "filter",
    )


def _spec_of(
    name: str, loaded: LoadedBackground, state: Mapping[str, Any] | None
) -> BackgroundSpec:
    """The registered spec when there is one (it wins for running lanes), else the file's."""
    if state is not None and state.get("spec"):
        return BackgroundSpec.from_document(state["spec"], name=name)
    return loaded.spec


def _context(rt: Runtime, job: Job, session: ClientSession | None) -> TransformContext:
    return TransformContext(
        migration=job.name,
        direction=job.direction,
        generation=job.generation,
        partition=DRY_RUN_PARTITION,
        db=rt.db,
        client=rt.client,
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


def _estimate(rt: Runtime, job: Job) -> tuple[int | None, bool]:
    """Count the matching documents, up to :data:`COUNT_CAP`; ``None`` when out of time."""
    try:
        found = rt.db[job.collection].count_documents(
            job.match, limit=COUNT_CAP, maxTimeMS=COUNT_TIMEOUT_MS, **_hint(job)
        )
    except ExecutionTimeout:
        return None, False
    return found, found >= COUNT_CAP


def _pick(rt: Runtime, job: Job, method: Method, size: int) -> list[Document]:
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


def _chunks(docs: Sequence[Document], size: int) -> Iterator[Sequence[Document]]:
    for start in range(0, len(docs), size):
        yield docs[start : start + size]


# ─── Transforming ─────────────────────────────────────────────────────────────


def _transform(job: Job, docs: Sequence[Document], ctx: TransformContext) -> _Transformed:
    """:func:`transform_all`, where a failing batch transform fails each of its documents."""
    try:
        return transform_all(job, docs, ctx)
    except Exception as exc:
        text = f"the batch transform failed: {error_text(exc)}"
        return [(doc, None, DocError(doc["_id"], text, "transform")) for doc in docs]


def _preview(
    job: Job, doc: Document, new_doc: Document | None, error: DocError | None
) -> DocumentPreview:
    """The fields the guarded update would write for one transformed document, or its error."""
    if error is not None or new_doc is None:
        error = error or DocError(doc["_id"], "no result", "shape")
        return DocumentPreview(doc["_id"], error=error.error, reason=error.reason)
    refused = job.partitioner.check_transform(doc, new_doc)
    if refused is not None:
        return DocumentPreview(doc["_id"], error=refused.message, reason=refused.reason)
    spec = job.spec
    try:
        update = stamped_diff(
            doc,
            new_doc,
            field=spec.field,
            target_version=job.target,
            revision_field=spec.revision_field,
        )
    except MigronautError as exc:
        return DocumentPreview(doc["_id"], error=exc.message, reason="shape")
    set_fields = (*update.get("$set", {}), *update.get("$inc", {}))
    unset_fields = tuple(update.get("$unset", {}))
    stamps = {spec.field, spec.revision_field}
    changed = any(name not in stamps for name in (*set_fields, *unset_fields))
    return DocumentPreview(
        doc["_id"], set_fields=set_fields, unset_fields=unset_fields, changed=changed
    )


def _transformed(rt: Runtime, job: Job, docs: Sequence[Document]) -> list[DocumentPreview]:
    """Previews from the transform alone, run on copies in batches of ``batch_size``."""
    ctx = _context(rt, job, None)
    previews: list[DocumentPreview] = []
    for chunk in _chunks(docs, job.spec.batch_size):
        previews.extend(_preview(job, *item) for item in _transform(job, chunk, ctx))
    return previews


# ─── Validating ───────────────────────────────────────────────────────────────


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

    def _one(self, transform: Callable[..., Any]) -> Callable[..., Any]:
        def one(doc: Document, ctx: TransformContext) -> Any:
            key = canonical_id_key(doc["_id"])
            if key not in self._outcomes:
                try:
                    self._outcomes[key] = _Outcome(False, self._kept(transform(doc, ctx)))
                except Exception as exc:
                    self._outcomes[key] = _Outcome(True, exc)
            return self._replay(key)

        return one

    def _many(self, transform: Callable[..., Any]) -> Callable[..., Any]:
        def many(docs: list[Document], ctx: TransformContext) -> list[Any]:
            missing = [doc for doc in docs if canonical_id_key(doc["_id"]) not in self._outcomes]
            if missing:
                out = transform(missing, ctx)
                if not isinstance(out, list) or len(out) != len(missing):
                    got = len(out) if isinstance(out, list) else "no"
                    raise BackgroundFailedError(
                        f"{self._job.name}: the batch transform returned {got} result(s) for "
                        f"{len(missing)} document(s); it must return one per document, in order",
                        {"migration": self._job.name},
                    )
                for doc, result in zip(missing, out, strict=True):
                    self._outcomes[canonical_id_key(doc["_id"])] = _Outcome(
                        False, self._kept(result)
                    )
            return [self._kept(self._outcomes[canonical_id_key(doc["_id"])].value) for doc in docs]

        return many


def _validated(rt: Runtime, job: Job, picked: Sequence[Document]) -> list[DocumentPreview]:
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
            for doc_id in ids:
                key = canonical_id_key(doc_id)
                if key not in failed:
                    failed[key] = DocumentPreview(
                        doc_id,
                        error=f"not validated: {MAX_WRITE_FAILURES} other documents failed to "
                        "write first",
                        reason="unvalidated",
                    )
            break
    previews = []
    for doc_id in ids:
        key = canonical_id_key(doc_id)
        previews.append(failed.get(key) or passed[key])
    return previews


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
            ctx = _context(rt, job, session)
            for chunk in _chunks(docs, job.spec.batch_size):
                writable = []
                for item in _transform(job, chunk, ctx):
                    preview = _preview(job, *item)
                    if preview.failed:
                        failed[canonical_id_key(preview.id)] = preview
                    else:
                        passed[canonical_id_key(preview.id)] = preview
                        writable.append(item[0])
                if not writable:
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


# ─── Step migrations ──────────────────────────────────────────────────────────


MAX_DRY_STEPS = 100


@dataclass(frozen=True)
class StepDryRunReport:
    """What ``steps`` steps of a step migration would do, from where it stands.

    Each step reports ``done``, its counters, ``total`` and the size of the
    checkpoint it returned (never the checkpoint itself), or a value-free error.
    """

    migration: str
    direction: str
    status: str | None
    from_checkpoint: bool
    steps: tuple[dict[str, Any], ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "migration": self.migration,
            "mode": "step",
            "direction": self.direction,
            "status": self.status,
            "from_checkpoint": self.from_checkpoint,
            "steps": [dict(step) for step in self.steps],
        }


def dry_run_steps(
    rt: Runtime, name: str, *, steps: int | None = None, from_start: bool = False
) -> StepDryRunReport:
    """Run ``steps`` steps of a step migration in a transaction that is always aborted.

    It starts from the migration's last checkpoint (``from_start``: from none).
    Only writes made with ``ctx.session`` are rolled back: a step that writes
    without it writes for real, as it would in transactional mode.

    :raises ConfigInvalidError: a declarative migration, or ``steps`` outside 1-100.
    :raises TransactionsUnsupportedError: on a standalone server.
    """
    count = _count_option(1 if steps is None else steps, "steps")
    if count > MAX_DRY_STEPS:
        raise ConfigInvalidError(f"steps must be at most {MAX_DRY_STEPS}", {"key": "steps"})
    loaded = rt.load(name)
    state = rt.store.get(name, projection={"history": 0, "doc_errors": 0})
    spec = _spec_of(name, loaded, state)
    if spec.mode != "step":
        raise ConfigInvalidError(
            f"dry run of {name}: {name} is declarative; dry-run it on a sample (sample, first)",
            {"migration": name, "key": "steps"},
        )
    if not supports_transactions(rt.client):
        raise TransactionsUnsupportedError(
            f"dry run of {name}: steps run in an aborted transaction, which needs a replica "
            "set or a sharded cluster; this server is standalone",
            {"migration": name},
        )
    direction: Direction = "revert" if (state or {}).get("direction") == "revert" else "forward"
    checkpoint = None if from_start else _last_checkpoint(rt, name, state)
    previews = _run_steps(rt, name, loaded, spec, direction, checkpoint, count, state)
    return StepDryRunReport(
        migration=name,
        direction=direction,
        status=None if state is None else str(state.get("status")),
        from_checkpoint=checkpoint is not None,
        steps=tuple(previews),
    )


def _last_checkpoint(rt: Runtime, name: str, state: Mapping[str, Any] | None) -> Any:
    if state is None:
        return None
    partitions = rt.store.list_partitions(name, generation=int(state.get("generation", 0)))
    return (partitions[0].get("cursor") or {}).get("checkpoint") if partitions else None


def _run_steps(
    rt: Runtime,
    name: str,
    loaded: LoadedBackground,
    spec: BackgroundSpec,
    direction: Direction,
    checkpoint: Any,
    count: int,
    state: Mapping[str, Any] | None,
) -> list[dict[str, Any]]:
    function = loaded.fns.step_for(direction)
    assert function is not None  # the spec guarantees a step for each direction it runs
    previews: list[dict[str, Any]] = []
    with rt.client.start_session() as session:
        session.start_transaction(
            read_concern=ReadConcern("snapshot"),
            write_concern=WriteConcern("majority"),
            read_preference=ReadPreference.PRIMARY,
        )
        try:
            for number in range(1, count + 1):
                ctx = StepContext(
                    migration=name,
                    direction=direction,
                    generation=int((state or {}).get("generation", 0)),
                    checkpoint=checkpoint,
                    deadline=time.monotonic() + spec.slice_ms / 1000,
                    db=rt.db,
                    client=rt.client,
                    log=logging.getLogger(f"migronaut.background.{name}"),
                    cancel=CancelToken(),
                    session=session,
                    dry_run=True,
                )
                try:
                    result = read_step_result(name, function(ctx))
                except Exception as exc:
                    previews.append({"step": number, "error": error_text(exc)})
                    break
                size = len(bson.encode({"checkpoint": result.checkpoint}))
                previews.append(
                    {
                        "step": number,
                        "done": result.done,
                        "counters": result.counters,
                        "total": result.total,
                        "checkpoint_bytes": size,
                    }
                )
                checkpoint = result.checkpoint
                if result.done:
                    break
        finally:
            with contextlib.suppress(PyMongoError):
                session.abort_transaction()
    return previews
