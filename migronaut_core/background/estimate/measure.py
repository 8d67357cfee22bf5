"""Measuring a migration's per-document cost on a sample of its documents, writing nothing.

The sample is stretches of :data:`CHUNK` consecutive documents (by ``_id``) its pass
matches, each from a ``$sample``d start: lanes read and write in ``_id`` order, and
on a large collection documents picked one by one at random each touch a page of
their own, which a run does not (at 1M documents, an estimate from single documents
was 1.39x the run, one from stretches 1.14x: docs/performance.md).
Each chunk's transform is timed in this process (an update-pipeline
migration's transform runs in its write), and its guarded write — the engine's own
(:func:`~migronaut_core.background.engine.batch.write_ops`, or
:func:`~migronaut_core.background.engine.pipeline.write_pipeline`) — is timed in a
snapshot transaction on the primary that is always aborted. Each chunk gives one
per-document cost; the costs reported are the chunks' medians (a chunk that met a
checkpoint or another client's burst says little about a run that lasts minutes),
and their spread is the sample's error, which widens the range.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import bson
from pymongo import ReadPreference
from pymongo.errors import OperationFailure, PyMongoError
from pymongo.read_concern import ReadConcern

from migronaut_core.background.dry_run.preview import (
    Document,
    Transformed,
    pick_runs,
    transform,
    transform_context,
)
from migronaut_core.background.engine.batch import build_ops, document_update, write_ops
from migronaut_core.background.engine.pipeline import write_pipeline
from migronaut_core.background.estimate.report import SampledCosts
from migronaut_core.background.eta import OPLOG_ENTRY_BYTES, WRITE_FACTOR, relative_error
from migronaut_core.background.job import Job
from migronaut_core.background.runtime import Runtime
from migronaut_core.errors import DocError, StoreError
from migronaut_core.scrub import error_text
from migronaut_core.server_errors import is_transient_transaction

__all__ = ["CHUNK", "measure", "server_cores"]

#: Documents per timed chunk (a sample of 1,000 gives 10 costs to judge the spread by).
CHUNK: Final = 100
#: Transient transaction errors (a concurrent write) retried per chunk.
_RETRIES: Final = 3


@dataclass(frozen=True, slots=True)
class _Chunk:
    documents: int
    transform_s: float
    write_s: float


def measure(rt: Runtime, job: Job, size: int) -> SampledCosts:
    """Time the transform and the write of ``size`` sampled documents (nothing is kept).

    :raises StoreError: the aborted transaction failed for a reason not transient.
    """
    runs = pick_runs(rt, job, size, CHUNK)
    namespace = len(rt.db.name) + 1 + len(job.collection)
    ctx = transform_context(rt, job, None)
    timed: list[_Chunk] = []
    before: list[int] = []
    after: list[int] = []
    oplog: list[int] = []
    failed = 0
    for chunk in runs:
        started = time.perf_counter()
        items = transform(job, chunk, ctx)
        spent = 0.0 if job.spec.mode == "update" else time.perf_counter() - started
        writable = [item for item in items if _sizes(job, item, namespace, before, after, oplog)]
        failed += len(items) - len(writable)
        if writable:
            write_s = _timed_write(rt, job, writable)
            timed.append(_Chunk(len(writable), spent * len(writable) / len(items), write_s))
    return _costs(timed, failed, before, after, oplog)


def _sizes(
    job: Job,
    item: tuple[Document, Document | None, DocError | None],
    namespace: int,
    before: list[int],
    after: list[int],
    oplog: list[int],
) -> bool:
    """Record one transformed document's sizes; False when it would fail instead.

    The oplog entry holds the whole rewritten document under the ``$replaceWith``
    guard (a replacement), else the update's diff when smaller; ``namespace`` is
    the length of its ``ns``.
    """
    doc = item[0]
    update = document_update(job, *item)
    if isinstance(update, DocError):
        return False
    unset = set(update.get("$unset", {}))
    changed = {**update.get("$set", {}), **{key: 0 for key in update.get("$inc", {})}}
    rewritten = {key: value for key, value in doc.items() if key not in unset} | changed
    whole = len(bson.encode(rewritten))
    diff = len(bson.encode({"u": changed, "d": dict.fromkeys(unset, False)}))
    before.append(len(bson.encode(doc)))
    after.append(whole)
    logged = whole if job.guard == "pipeline" else min(diff, whole)
    oplog.append(logged + OPLOG_ENTRY_BYTES + namespace)
    return True


def _timed_write(rt: Runtime, job: Job, items: Transformed) -> float:
    """Seconds the guarded write of ``items`` took in a transaction that was aborted."""
    collection = rt.db[job.collection]
    for attempt in range(_RETRIES + 1):
        with rt.client.start_session(causal_consistency=False) as session:
            session.start_transaction(
                read_concern=ReadConcern("snapshot"), read_preference=ReadPreference.PRIMARY
            )
            try:
                started = time.perf_counter()
                if job.spec.mode == "update":
                    write_pipeline(
                        job, collection, [doc["_id"] for doc, _, _ in items], session=session
                    )
                else:
                    ops, _, _ = build_ops(job, items)
                    write_ops(collection, ops, write_concern=None, session=session)
                return time.perf_counter() - started
            except PyMongoError as exc:
                if not is_transient_transaction(exc) or attempt >= _RETRIES:
                    raise StoreError(
                        f"estimate of {job.name}: the timed write failed: {error_text(exc)}",
                        {"migration": job.name},
                    ) from exc
            finally:
                if session.in_transaction:
                    session.abort_transaction()
    raise AssertionError("unreachable")  # pragma: no cover


def _costs(
    timed: Sequence[_Chunk], failed: int, before: list[int], after: list[int], oplog: list[int]
) -> SampledCosts:
    documents = sum(chunk.documents for chunk in timed)
    if not documents:
        return SampledCosts(0, failed, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    per_doc = [
        (chunk.transform_s + WRITE_FACTOR * chunk.write_s) / chunk.documents for chunk in timed
    ]
    return SampledCosts(
        documents=documents,
        failed=failed,
        transform_ms=round(1000 * _median_per_doc(timed, "transform_s"), 4),
        write_ms=round(1000 * _median_per_doc(timed, "write_s"), 4),
        before_bytes=round(statistics.fmean(before), 1),
        after_bytes=round(statistics.fmean(after), 1),
        oplog_bytes=round(statistics.fmean(oplog), 1),
        relative_error=round(relative_error(per_doc), 4),
    )


def _median_per_doc(timed: Sequence[_Chunk], cost: str) -> float:
    """The median over chunks of one cost per document (seconds)."""
    costs: list[float] = [getattr(chunk, cost) / chunk.documents for chunk in timed]
    return statistics.median(costs)


def server_cores(rt: Runtime) -> int | None:
    """The server's CPU cores (``hostInfo``); None when this user may not ask."""
    try:
        info: Mapping[str, Any] = rt.client.admin.command("hostInfo")
    except OperationFailure:
        return None
    cores = (info.get("system") or {}).get("numCores")
    return cores if isinstance(cores, int) and cores > 0 else None
