"""The ``_id``-range partitioner: cut at sampled ``_id``s, read in ``_id`` order.

Plans with :mod:`.counting` and :mod:`.id_scopes`; the partitioner of every
unsharded collection (and, through
:class:`~migronaut_core.background.planning.shard.KeyedIdRangePartitioner`,
of a sharded one that cannot be split shard-aware).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from pymongo.errors import OperationFailure

from migronaut_core.background.planning.filters import conjunction
from migronaut_core.background.planning.partition.counting import (
    RANDOM_SAMPLE_MIN_MATCHES,
    Count,
    count_matching,
    hint_option,
    random_sample_pipeline,
    sample_pipeline,
)
from migronaut_core.background.planning.partition.id_scopes import (
    ALL_KIND,
    scope_parts,
    scopes_from_sample,
)
from migronaut_core.background.planning.partition.protocol import (
    BatchQuery,
    Plan,
    Refusal,
    Scope,
)
from migronaut_core.background.spec import PartitionSettings
from migronaut_core.checks import check_int
from migronaut_core.server_errors import timed_out

if TYPE_CHECKING:
    from pymongo.collection import Collection

__all__ = ["IdRangePartitioner"]

logger = logging.getLogger(__name__)


class IdRangePartitioner:
    """Partition by ``_id`` ranges cut at sampled ``_id``s; read in ``_id`` order.

    Stateless: one instance serves any number of migrations and threads.
    """

    id: Final = "id-range"
    reads_ahead: Final = True

    # ── planning ──

    def plan(
        self,
        collection: Collection[Any],
        *,
        match: dict[str, Any],
        hint: Any | None,
        max_parallel: int,
        settings: PartitionSettings,
        count_cap: int = 1_000_000,
    ) -> Plan:
        """Split the documents ``match`` selects into partitions for one pass.

        Counts them, exactly up to ``settings.estimate_above``. Past that, a count and a
        sample of the matches would read every one of them, so planning draws a
        random sample of the whole collection instead
        (:func:`random_sample_pipeline`): the estimate is the collection's size
        times the share that matched (``approximate``), and the matching
        ``_id``s are the split points, so planning stops growing with the
        collection. When fewer than
        :data:`RANDOM_SAMPLE_MIN_MATCHES` of the sample match (a pass over a
        small share of a large collection), it counts up to ``count_cap`` and
        samples the matches, as for smaller collections.

        For more than a couple of ``settings.min_partition_docs`` and
        ``max_parallel > 1``, ranges are cut at sampled ``_id``s
        (:func:`scopes_from_sample`). A count or a sample that runs out of
        ``settings.sample_timeout_ms`` makes the plan coarser and says so in
        ``degraded``; it never fails the plan. Whatever the method, the
        partitions reach every matching document exactly once.

        :param hint: the version index, used by the count and the sample of matches.
        :raises ConfigInvalidError: on a ``count_cap`` below 1.
        """
        check_int("count_cap", count_cap, 1)
        estimate_above = settings.estimate_above
        budget_ms = settings.sample_timeout_ms
        exact_cap = min(count_cap, estimate_above + 1)
        counted = count_matching(collection, match, hint, exact_cap, budget_ms)
        rows: list[dict[str, Any]] | None = None
        if counted.at_least and count_cap > estimate_above:
            estimated = self._estimate(collection, match, counted, settings)
            if estimated is None:
                counted = count_matching(collection, match, hint, count_cap, budget_ms)
            else:
                counted, rows = estimated
        if counted.estimate == 0 and counted.degraded is None:
            return Plan("empty", 0, at_least=False, partitions=[], degraded=None)
        budget = counted.budget(settings)
        if max_parallel <= 1 or budget <= 1:
            return self._single(collection, counted, counted.degraded)
        if rows is None:
            try:
                rows = self._sample(collection, match, hint, settings)
            except OperationFailure as exc:
                if not timed_out(exc):
                    raise
                logger.warning(
                    "sampling %s ran out of its %d ms budget: one partition this pass",
                    collection.full_name,
                    budget_ms,
                )
                return self._single(collection, counted, "sample-timeout")
        scopes = scopes_from_sample(rows, max_partitions=budget)
        if len(scopes) == 1:  # nothing (left) to split
            return self._single(collection, counted, counted.degraded)
        return self._planned("sample", collection, counted, scopes, counted.degraded)

    def _estimate(
        self,
        collection: Collection[Any],
        match: dict[str, Any],
        counted: Count,
        settings: PartitionSettings,
    ) -> tuple[Count, list[dict[str, Any]]] | None:
        """Estimate the matches from a random sample of the collection, with the
        matching ``_id``s it drew; None when too few matched to stand for them."""
        try:
            with collection.aggregate(
                random_sample_pipeline(match, settings.sample_size),
                maxTimeMS=settings.sample_timeout_ms,
            ) as cursor:
                drawn = next(cursor, None)
        except OperationFailure as exc:
            if not timed_out(exc):
                raise
            logger.warning(
                "sampling %s ran out of its %d ms budget: counting instead",
                collection.full_name,
                settings.sample_timeout_ms,
            )
            return None
        answer = drawn or {}
        matched = list(answer.get("matched") or [])
        if len(matched) < RANDOM_SAMPLE_MIN_MATCHES:
            return None
        sampled = int(answer["sampled"][0]["n"])
        share = len(matched) / sampled
        estimate = max(counted.estimate, round(collection.estimated_document_count() * share))
        return Count(estimate, False, None, approximate=True), matched

    def _sample(
        self,
        collection: Collection[Any],
        match: dict[str, Any],
        hint: Any | None,
        settings: PartitionSettings,
    ) -> list[dict[str, Any]]:
        """Sample matching ``_id``s with their types, server-sorted, within the time budget."""
        cursor = collection.aggregate(
            sample_pipeline(match, settings.sample_size),
            maxTimeMS=settings.sample_timeout_ms,
            batchSize=settings.sample_size,
            **hint_option(hint),
        )
        with cursor:
            return list(cursor)

    def _single(self, collection: Collection[Any], counted: Count, degraded: str | None) -> Plan:
        return self._planned("single", collection, counted, [{"kind": ALL_KIND}], degraded)

    def _planned(
        self,
        method: str,
        collection: Collection[Any],
        counted: Count,
        scopes: list[Scope],
        degraded: str | None,
    ) -> Plan:
        logger.debug(
            "planned %s: %d partition(s) by %s for %s%d document(s)",
            collection.full_name,
            len(scopes),
            method,
            "at least " if counted.at_least else "about " if counted.approximate else "",
            counted.estimate,
        )
        return Plan(
            method,
            counted.estimate,
            counted.at_least,
            scopes,
            degraded,
            approximate=counted.approximate,
        )

    # ── reading ──

    def scope_filter(self, scope: Mapping[str, Any]) -> dict[str, Any]:
        """Return the ``_id`` query that reaches exactly the documents of ``scope``.

        :raises ConfigInvalidError: on a scope this partitioner did not make.
        """
        return conjunction(scope_parts(scope, {}))

    def batch_query(
        self,
        scope: Mapping[str, Any],
        cursor: Mapping[str, Any],
        *,
        limit: int,
        match: dict[str, Any],
        hint: Any | None,
    ) -> BatchQuery:
        """Return the read of the next ``limit`` documents of ``scope`` after ``cursor``.

        ``match`` and the scope's and cursor's ``_id`` conditions, sorted by
        ``_id``. With ``hint`` the version index ``{field: 1, _id: 1}`` and an
        equality ``match`` on the version, the read is one ordered index scan.

        :raises ConfigInvalidError: on a bad scope or a ``limit`` below 1.
        """
        check_int("limit", limit, 1)
        query = conjunction([match, *scope_parts(scope, cursor)])
        return BatchQuery(query, [("_id", 1)], limit, hint)

    def advance(
        self,
        cursor: Mapping[str, Any],
        docs: Sequence[Mapping[str, Any]],
        *,
        limit: int,
        left: Sequence[Any] = (),
    ) -> dict[str, Any] | None:
        """Return the cursor after the batch ``docs``, or ``None`` when it was the last.

        A batch shorter than ``limit`` drains the partition. Documents in
        ``left`` (not rewritten this time) need nothing here: they still match
        and the next pass reads them again.
        """
        if len(docs) < limit:
            return None
        return {"after": docs[-1]["_id"]}

    def past(
        self,
        cursor: Mapping[str, Any],
        docs: Sequence[Mapping[str, Any]],
        *,
        left: Sequence[Any] = (),
    ) -> dict[str, Any]:
        """Return the cursor just past ``docs``, a processed prefix of a batch.

        The rest of the batch is read again by the next query. Without ``docs``
        the cursor stays where it was.
        """
        if not docs:
            return dict(cursor)
        return {"after": docs[-1]["_id"]}

    def write_filter(self, doc: Mapping[str, Any]) -> dict[str, Any]:
        """Return no extra write conditions: ``_id`` alone finds the document."""
        return {}

    def check_transform(
        self, before: Mapping[str, Any], after: Mapping[str, Any]
    ) -> Refusal | None:
        """Refuse nothing: the transform may not change ``_id`` anyway."""
        return None

    def stale(self, epoch: Any) -> bool:
        """Return ``False``: ``_id`` ranges stay valid however the collection changes."""
        return False
