"""Count and sample the documents a pass has to rewrite, to size its plan.

:func:`count_matching` counts up to a cap (the collection's size when the count
runs out of time) into a :class:`Count`, whose :meth:`~Count.budget` is the
partitions the pass is worth (:func:`partition_budget`: one per the spec's
``min_partition_docs``). :func:`sample_pipeline` samples matching ``_id``s
with their ``$type``; :func:`random_sample_pipeline` samples the whole
collection, for an estimate that does not grow with it. Both partitioners size
their plans here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from pymongo.errors import OperationFailure

from migronaut_core.background.planning.partition.protocol import hint_document
from migronaut_core.background.spec.model import MIN_PARTITION_DOCS, PartitionSettings
from migronaut_core.server_errors import timed_out

if TYPE_CHECKING:
    from pymongo.collection import Collection

__all__ = [
    "MIN_PARTITION_DOCS",
    "RANDOM_SAMPLE_MIN_MATCHES",
    "Count",
    "count_matching",
    "hint_option",
    "partition_budget",
    "random_sample_pipeline",
    "sample_pipeline",
]

logger = logging.getLogger(__name__)

#: Fewest matching ``_id``s a random sample of the whole collection must hold to
#: stand for the matching documents (the estimate's error is then within ~7%).
RANDOM_SAMPLE_MIN_MATCHES: Final = 200


def partition_budget(
    estimate: int, max_partitions: int, min_partition_docs: int = MIN_PARTITION_DOCS
) -> int:
    """Return how many ranges ``estimate`` documents are worth: one per
    ``min_partition_docs``, between 1 and ``max_partitions``. Below twice
    ``min_partition_docs`` a plan is one partition and no sample is taken."""
    return max(1, min(max_partitions, estimate // min_partition_docs))


def sample_pipeline(match: Mapping[str, Any], size: int) -> list[dict[str, Any]]:
    """Return the pipeline that samples ``size`` matching ``_id``s with their
    ``$type``, sorted by the server (as :func:`~.id_scopes.scopes_from_sample` needs them)."""
    return [
        {"$match": dict(match)},
        {"$sample": {"size": size}},
        {"$project": {"_id": 1, "t": {"$type": "$_id"}}},
        {"$sort": {"_id": 1}},
    ]


def random_sample_pipeline(match: Mapping[str, Any], size: int) -> list[dict[str, Any]]:
    """Return the pipeline that samples ``size`` documents of the whole collection
    and keeps the matching ``_id``s as :func:`sample_pipeline` returns them.

    With ``$sample`` first (and ``size`` under 5% of the collection) the server
    draws from a random cursor instead of reading every match, so the cost does
    not grow with the collection. One row comes back:
    ``{"sampled": [{"n": <documents drawn>}], "matched": [{_id, t}, ...]}``.
    """
    return [
        {"$sample": {"size": size}},
        {
            "$facet": {
                "sampled": [{"$count": "n"}],
                "matched": [
                    {"$match": dict(match)},
                    {"$project": {"_id": 1, "t": {"$type": "$_id"}}},
                    {"$sort": {"_id": 1}},
                ],
            }
        },
    ]


@dataclass(frozen=True, slots=True)
class Count:
    """How many documents a pass has to rewrite, as far as planning could tell.

    :param estimate: the count (capped), the collection's size after a timeout,
        or an estimate from a random sample (``approximate``).
    :param at_least: the count stopped at its cap.
    :param degraded: ``count-timeout`` when the count ran out of time, else ``None``.
    :param approximate: ``estimate`` comes from a random sample.
    """

    estimate: int
    at_least: bool
    degraded: str | None
    approximate: bool = False

    def budget(self, settings: PartitionSettings) -> int:
        """Return the ranges worth planning; a capped count is worth them all."""
        if self.at_least:
            return settings.max_partitions
        return partition_budget(self.estimate, settings.max_partitions, settings.min_partition_docs)


def count_matching(
    collection: Collection[Any],
    match: dict[str, Any],
    hint: Any | None,
    cap: int,
    budget_ms: int,
) -> Count:
    """Count matching documents up to ``cap``; on timeout, take the collection's size."""
    try:
        found = collection.count_documents(
            match, limit=cap, maxTimeMS=budget_ms, **hint_option(hint)
        )
    except OperationFailure as exc:
        if not timed_out(exc):
            raise
        logger.warning(
            "counting %s ran out of its %d ms budget: estimating from its size",
            collection.full_name,
            budget_ms,
        )
        return Count(collection.estimated_document_count(), False, "count-timeout")
    return Count(found, found >= cap, None)


def hint_option(hint: Any | None) -> dict[str, Any]:
    """Return the ``hint`` keyword of a count or an aggregation (none without a hint)."""
    return {} if hint is None else {"hint": hint_document(hint)}
