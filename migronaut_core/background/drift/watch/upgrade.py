"""Upgrading what a change stream brought: old-shape documents rewritten through the lanes' path.

The ids a stream gathered are read again (only documents still at an edge's
source version), rewritten as the lanes rewrite them
(:func:`~migronaut_core.background.engine.work.apply_work`: guarded per-document
updates, or for an update-pipeline migration its pipeline and stamps by ``_id``,
guarded on the source version) — in a transaction per document when the
migration asks for transactions — and counted. What
cannot be upgraded reopens its migration (``on_drift = "reopen"``, its lanes
take the documents) or is only reported. Events say names and counts, never
ids or values.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pymongo.client_session import ClientSession
from pymongo.collection import Collection
from pymongo.errors import PyMongoError

from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.control.actions import control
from migronaut_core.background.drift.verify import verify
from migronaut_core.background.drift.watch.edges import Edge
from migronaut_core.background.drift.watch.settings import WatchSettings
from migronaut_core.background.engine.batch import BatchResult, TransformContext, apply_batch
from migronaut_core.background.engine.transactional import transaction_options
from migronaut_core.background.engine.work import apply_work
from migronaut_core.background.job import Job
from migronaut_core.background.runtime import Runtime
from migronaut_core.bson_values import canonical_id_key
from migronaut_core.changelog import Actor
from migronaut_core.errors import (
    BackgroundConflictError,
    DocError,
    DocumentFailedError,
    MigronautError,
)
from migronaut_core.scrub import error_text

__all__ = ["WATCH_ACTOR", "Upgrader"]

log = logging.getLogger(__name__)

Document = dict[str, Any]

#: Who the watcher's controls (reopen) are recorded as.
WATCH_ACTOR = "migronaut-watch"


class Upgrader:
    """Upgrades one collection's old-shape documents for its watcher.

    :param count: adds to one of the watcher's counters (``upgraded``,
        ``errors``, ``skipped``).
    """

    def __init__(
        self,
        rt: Runtime,
        collection: str,
        settings: WatchSettings,
        cancel: CancelToken,
        count: Callable[[str, int], None],
    ) -> None:
        self.rt = rt
        self.collection = collection
        self.settings = settings
        self.cancel = cancel
        self._count = count

    def upgrade(self, edges: list[Edge], ids: Mapping[str, Any]) -> bool:
        """Upgrade these documents edge by edge; True when a migration was reopened."""
        collection = self.rt.db[self.collection]
        keys = list(ids.values())
        touched: set[str] = set()
        reopened = False
        for edge in edges:
            docs = list(collection.find({"$and": [edge.job.match, {"_id": {"$in": keys}}]}))
            if not docs:
                continue
            touched.update(canonical_id_key(doc["_id"]) for doc in docs)
            try:
                result = self._rewrite(edge.job, docs, collection)
            except PyMongoError:
                raise  # the server's trouble: the stream reopens and the batch is served again
            except Exception as error:
                # A batch transform that failed cannot say which document was at fault:
                # all of them failed, rather than the same batch failing forever.
                text = error_text(error)
                result = BatchResult(
                    errors=[DocError(doc["_id"], text, "transform") for doc in docs]
                )
            self._count("upgraded", result.migrated)
            if result.migrated:
                self._drift(edge.name, "upgraded", result.migrated)
            if result.errors:
                self._count("errors", len(result.errors))
                reopened = self._failed(edge, result.errors) or reopened
        self._count("skipped", len(ids) - len(touched))
        return reopened

    def _rewrite(
        self, job: Job, docs: list[Document], collection: Collection[Document]
    ) -> BatchResult:
        if job.spec.transaction is None:
            return apply_work(job, docs, collection, self._context(job))
        # One transaction per document, so a transform's side writes commit with it
        # and one bad document does not hold the others back.
        total = BatchResult()
        with self.rt.client.start_session() as session:
            for doc in docs:

                def attempt(s: ClientSession, doc: Document = doc) -> BatchResult:
                    return self._one_in_transaction(job, doc, collection, s)

                try:
                    one = session.with_transaction(attempt, **transaction_options(job.spec))
                except DocumentFailedError as failed:
                    total.errors.append(failed.error)
                    continue
                except BackgroundConflictError:
                    continue  # a concurrent write moved it; its own event comes next
                total.migrated += one.migrated
                total.errors.extend(one.errors)
        return total

    def _one_in_transaction(
        self, job: Job, doc: Document, collection: Collection[Document], session: ClientSession
    ) -> BatchResult:
        current = collection.find_one({"$and": [job.match, {"_id": doc["_id"]}]}, session=session)
        if current is None:
            return BatchResult()
        return apply_batch(
            job,
            [current],
            collection,
            self._context(job, session),
            session=session,
            strict=True,
            abort_on_conflict=True,
        )

    def _context(self, job: Job, session: ClientSession | None = None) -> TransformContext:
        return TransformContext(
            migration=job.name,
            direction=job.direction,
            generation=job.generation,
            partition="watch",
            db=self.rt.db,
            client=self.rt.client,
            log=job.log,
            cancel=self.cancel,
            session=session,
        )

    def _failed(self, edge: Edge, errors: Sequence[DocError]) -> bool:
        log.warning(
            "drift watcher %s: %d document(s) could not be upgraded by %s",
            self.collection,
            len(errors),
            edge.name,
        )
        if self.settings.on_drift != "reopen":
            self._drift(edge.name, "failed", len(errors))
            return False
        actor = Actor(requested_by=WATCH_ACTOR, reason="the drift watcher could not upgrade")
        try:
            applied = control(self.rt, edge.name, "retry", actor=actor).applied
        except MigronautError as error:
            self.report(error)
            applied = "unchanged"
        self._drift(edge.name, "reopened" if applied == "changed" else "failed", len(errors))
        return applied == "changed"

    def catch_up(self) -> bool:
        """Verify the collection (old shapes from before the stream); True: one reopened."""
        actor = Actor(requested_by=WATCH_ACTOR, reason="old-shape documents found at stream start")
        result = verify(
            self.rt, on_drift=self.settings.on_drift, collections=[self.collection], actor=actor
        )
        reopened = False
        for row in result["drifted"]:
            self._drift(row["migration"], row["action"], None, source="verify")
            reopened = reopened or row["action"] == "reopened"
        return reopened

    def _drift(
        self, migration: str, action: str, count: int | None, *, source: str = "stream"
    ) -> None:
        payload: Document = {
            "migration": migration,
            "collection": self.collection,
            "source": source,
            "action": action,
        }
        if count is not None:
            payload["count"] = count
        self.rt.emit("background:drift", payload)

    def report(self, error: BaseException) -> None:
        """Log a watcher error by its value-free text (the follower's too)."""
        log.warning("drift watcher %s: %s", self.collection, error_text(error))
