"""Split a background migration's collection by ``_id`` and read it batch by batch.

A :class:`Plan` is a list of *scopes*, each stored on a partition document and
worked by one lane at a time. The :class:`IdRangePartitioner` makes three kinds:

``{"kind": "all"}``
    the whole collection (small collections, ``max_parallel == 1``, or a
    sample that ran out of time);
``{"kind": "id-range", "bracket": ..., "gte": ..., "lt": ...}``
    a half-open ``_id`` range inside one BSON type bracket
    (:meth:`~migronaut_core.background.planning.brackets.IdRange.to_scope`);
``{"kind": "rest", "except": [bracket, ...]}``
    every ``_id`` outside the listed brackets — the brackets the sample did
    not split, including the ones it never saw.

Coverage guarantee. The ranges of a split bracket are exact complements of
each other (see :mod:`~migronaut_core.background.planning.brackets`) and every BSON
type an ``_id`` can have (any but array) belongs to exactly one bracket, so a
sampled plan — the ranges plus the catch-all ``rest`` — reaches every document
exactly once, whatever the sample missed. Scopes that span brackets (``all``,
``rest``) resume *after* the last ``_id`` read in the server's total order,
not with ``$gt`` (which the server applies within one type bracket only), and
name their brackets with a positive ``$type`` list, which the server turns
into tight index bounds (a ``$not: {$type}`` would scan every key).

A lane's cursor is ``{}`` at the start and ``{"after": <last _id read>}``
later. ``_id`` values live in scopes and cursors only, never in messages or
logs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

from pymongo.errors import OperationFailure

from migronaut_core.background.planning.brackets import (
    BRACKETS,
    SCOPE_KIND,
    IdRange,
    bracket_of,
    group_by_bracket,
    keyset_filter,
    plan_ranges,
    range_filter,
    ranges_from_split_points,
)
from migronaut_core.background.planning.filters import conjunction, is_nan
from migronaut_core.background.spec import PartitionSettings
from migronaut_core.errors import ConfigInvalidError
from migronaut_core.server_errors import timed_out

if TYPE_CHECKING:
    from pymongo.client_session import ClientSession
    from pymongo.collection import Collection

__all__ = [
    "ALL_KIND",
    "MIN_PARTITION_DOCS",
    "RANGE_KIND",
    "REST_KIND",
    "BatchQuery",
    "Count",
    "IdRangePartitioner",
    "PartitionSettings",
    "Partitioner",
    "Plan",
    "Refusal",
    "count_matching",
    "find",
    "partition_budget",
    "random_sample_pipeline",
    "sample_pipeline",
    "scopes_from_sample",
]

logger = logging.getLogger(__name__)

#: Scope kinds the id-range partitioner makes.
ALL_KIND: Final = "all"
RANGE_KIND: Final = SCOPE_KIND
REST_KIND: Final = "rest"

#: Fewest matching documents worth a partition of their own: below twice this,
#: a plan is one partition and no sample is taken.
MIN_PARTITION_DOCS: Final = 1_000

#: Fewest matching ``_id``s a random sample of the whole collection must hold to
#: stand for the matching documents (the estimate's error is then within ~7%).
RANDOM_SAMPLE_MIN_MATCHES: Final = 200

_NAN: Final = float("nan")

_BRACKET_INDEX: Final = {bracket.name: index for index, bracket in enumerate(BRACKETS)}

Scope = dict[str, Any]


# ─── data shapes ──────────────────────────────────────────────────────────────


def _check_positive(value: Any, key: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigInvalidError(f"{key} must be an integer >= 1", {"key": key})


@dataclass(frozen=True, slots=True)
class Plan:
    """The partitions of one pass, and what planning them learned.

    :param method: ``empty`` (nothing matches), ``single`` (one ``all``
        partition) or ``sample`` (ranges cut at sampled ``_id``s).
    :param estimate: matching documents counted (capped: see ``at_least``), or
        estimated from a sample (see ``approximate``).
    :param at_least: the count stopped at its cap; ``estimate`` is a floor.
    :param partitions: one BSON-ready scope per partition; together they reach
        every matching document exactly once.
    :param degraded: why the plan is coarser than asked (``sample-timeout``,
        ``count-timeout``), else ``None``.
    :param epoch: what the plan depends on (``None``: nothing that can change).
    :param approximate: ``estimate`` is the collection's size times the share of
        a random sample that matched, not a count.
    """

    method: str
    estimate: int
    at_least: bool
    partitions: list[Scope]
    degraded: str | None
    epoch: Any = None
    approximate: bool = False


@dataclass(frozen=True, slots=True)
class BatchQuery:
    """One batch read: ``filter`` sorted by ``sort``, at most ``limit``, through ``hint``.

    ``min`` and ``max`` (both or neither) bound the scan of the hinted index
    (inclusive, exclusive), as the shard-aware partitioner reads a chunk range;
    an empty ``sort`` reads in the index's order.
    """

    filter: dict[str, Any]
    sort: list[tuple[str, int]]
    limit: int
    hint: Any | None
    min: dict[str, Any] | None = None
    max: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a partitioner refuses a transformed document (recorded as a document error).

    :param reason: a short stable code.
    :param message: for a person; never contains document values.
    """

    reason: str
    message: str


def _hint_document(hint: Any) -> str | dict[str, Any]:
    """Return ``hint`` (a name, a mapping or ``(key, direction)`` pairs) as a command accepts it."""
    if isinstance(hint, str):
        return hint
    if isinstance(hint, Mapping):
        return dict(hint)
    return {key: direction for key, direction in hint}


def find(
    collection: Collection[Any],
    query: BatchQuery,
    *,
    session: ClientSession | None = None,
    max_time_ms: int | None = None,
) -> list[dict[str, Any]]:
    """Run ``query`` on ``collection`` and return the whole batch, in ``_id`` order.

    :param session: read inside this session (a transaction's, say).
    :param max_time_ms: the server's time limit for the read.
    """
    # One round trip for the whole batch (the server's default first batch is 101).
    options: dict[str, Any] = {
        "sort": query.sort,
        "limit": query.limit,
        "batch_size": query.limit,
        "session": session,
    }
    if not query.sort:
        del options["sort"]
    if query.hint is not None:
        options["hint"] = _hint_document(query.hint)
    if query.min is not None and query.max is not None:
        options["min"] = query.min
        options["max"] = query.max
    if max_time_ms is not None:
        options["max_time_ms"] = max_time_ms
    return list(collection.find(query.filter, **options))


# ─── scopes and their filters ─────────────────────────────────────────────────


def _rest_scope(split: Sequence[str]) -> Scope:
    return {"kind": REST_KIND, "except": list(split)}


def _excluded_brackets(scope: Mapping[str, Any]) -> frozenset[str]:
    """Return the brackets a ``rest`` scope leaves to others, checked."""
    names = scope.get("except")
    if not isinstance(names, list) or not all(
        isinstance(name, str) and name in _BRACKET_INDEX for name in names
    ):
        raise ConfigInvalidError("a rest scope needs a list of bracket names", {"key": "except"})
    return frozenset(names)


def _types_from(start: int, excluded: frozenset[str]) -> list[str]:
    """Return the ``$type`` names of the brackets from index ``start`` on, less ``excluded``.

    ``array`` is left out: no ``_id`` is an array (the server refuses one), and
    naming it would widen the index bounds to every key.
    """
    return [
        alias
        for bracket in BRACKETS[start:]
        if bracket.name not in excluded and bracket.name != "array"
        for alias in bracket.types
    ]


def _spanning_filter(excluded: frozenset[str], cursor: Mapping[str, Any]) -> dict[str, Any]:
    """Return the ``_id`` condition of a scope over all brackets but ``excluded``, after ``cursor``.

    After an ``_id`` of bracket *B* it keeps the brackets from *B* on and, by
    ``$not: {$lte: after}``, drops what sorts at or before ``after`` inside *B*
    (values of other brackets are never ``<=`` it). NaN, which sorts first
    among numbers but is ``<=`` no other number, is dropped by name after a
    number (NaN is ``<=`` NaN; the server holds every NaN equal).
    """
    if "after" not in cursor:
        return {"_id": {"$type": _types_from(0, excluded)}} if excluded else {}
    after = cursor["after"]
    bracket = bracket_of(after)
    types = _types_from(_BRACKET_INDEX[bracket], excluded)
    if not types:
        return {"_id": {"$in": []}}
    condition: dict[str, Any] = {"$type": types, "$not": {"$lte": after}}
    if bracket == "number" and not is_nan(after):
        condition["$nin"] = [_NAN]
    return {"_id": condition}


def _scope_parts(scope: Mapping[str, Any], cursor: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Return the scope's conditions for the documents after ``cursor``."""
    kind = scope.get("kind")
    if kind == ALL_KIND:
        return [_spanning_filter(frozenset(), cursor)]
    if kind == REST_KIND:
        return [_spanning_filter(_excluded_brackets(scope), cursor)]
    if kind == RANGE_KIND:
        parts = [range_filter(IdRange.from_scope(scope))]
        if "after" in cursor:
            parts.append(keyset_filter(cursor["after"]))
        return parts
    raise ConfigInvalidError("unknown partition scope kind", {"key": "scope"})


# ─── plan assembly (pure) ─────────────────────────────────────────────────────


def partition_budget(estimate: int, max_partitions: int) -> int:
    """Return how many ranges ``estimate`` documents are worth: one per
    :data:`MIN_PARTITION_DOCS`, between 1 and ``max_partitions``."""
    return max(1, min(max_partitions, estimate // MIN_PARTITION_DOCS))


def sample_pipeline(match: Mapping[str, Any], size: int) -> list[dict[str, Any]]:
    """Return the pipeline that samples ``size`` matching ``_id``s with their
    ``$type``, sorted by the server (as :func:`scopes_from_sample` needs them)."""
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


def scopes_from_sample(rows: Iterable[Mapping[str, Any]], *, max_partitions: int) -> list[Scope]:
    """Return the scopes that cut the sampled brackets at sample points and catch the rest.

    Every bracket the sample hit is split at evenly spaced sampled ``_id``s
    into at most ``max_partitions`` ranges in all; a bracket left in one piece
    is not listed on its own. One ``rest`` scope takes every bracket not split —
    the ones the sample missed included — so the result reaches every document
    exactly once. Without a split bracket it is the one ``all`` scope.

    :param rows: ``{_id, t}`` rows in server order (see :func:`sample_pipeline`).
    :raises ConfigInvalidError: on a malformed row or a bad ``max_partitions``.
    """
    ranges = _split_ranges(group_by_bracket(rows), max_partitions)
    if not ranges:
        return [{"kind": ALL_KIND}]
    split = list(dict.fromkeys(r.bracket for r in ranges))
    return [*(r.to_scope() for r in ranges), _rest_scope(split)]


def _split_ranges(groups: Mapping[str, Sequence[Any]], max_partitions: int) -> list[IdRange]:
    """Return the ranges of the brackets worth splitting within ``max_partitions``.

    Only brackets with a usable split point compete for the budget. When the
    budget leaves some of them whole, the one with the fewest sampled
    ``_id``s drops out (to the catch-all) and the rest share the budget again.
    """
    splittable = {
        name: points
        for name, points in groups.items()
        if len(ranges_from_split_points(name, points)) > 1
    }
    while splittable:
        ranges = plan_ranges(splittable, splittable, max_partitions=max_partitions)
        if not any(r.whole for r in ranges):
            return ranges
        lightest = min(splittable, key=lambda name: (len(splittable[name]), -_BRACKET_INDEX[name]))
        del splittable[lightest]
    return []


# ─── the partitioner ──────────────────────────────────────────────────────────


class Partitioner(Protocol):
    """What the coordinator and the batch engine need of a partitioner."""

    @property
    def id(self) -> str:
        """The name a plan records."""
        ...

    @property
    def reads_ahead(self) -> bool:
        """Whether the next batch can be read before the current one is written.

        True when a batch's cursor moves past its documents whatever the write
        does to them; a partition that drains its scope re-reads until empty.
        """
        ...

    def plan(
        self,
        collection: Collection[Any],
        *,
        match: dict[str, Any],
        hint: Any | None,
        max_parallel: int,
        settings: PartitionSettings,
        count_cap: int = ...,
        shard_concurrency: int | None = ...,
    ) -> Plan:
        """Split what ``match`` selects into partitions."""
        ...

    def scope_filter(self, scope: Mapping[str, Any]) -> dict[str, Any]:
        """Return the query of every document of ``scope``."""
        ...

    def batch_query(
        self,
        scope: Mapping[str, Any],
        cursor: Mapping[str, Any],
        *,
        limit: int,
        match: dict[str, Any],
        hint: Any | None,
    ) -> BatchQuery:
        """Return the read of the next batch of ``scope`` after ``cursor``."""
        ...

    def advance(
        self,
        cursor: Mapping[str, Any],
        docs: Sequence[Mapping[str, Any]],
        *,
        limit: int,
        left: Sequence[Any] = ...,
    ) -> dict[str, Any] | None:
        """Return the cursor after a whole batch, ``None`` once drained."""
        ...

    def past(
        self,
        cursor: Mapping[str, Any],
        docs: Sequence[Mapping[str, Any]],
        *,
        left: Sequence[Any] = ...,
    ) -> dict[str, Any]:
        """Return the cursor just past a processed prefix of a batch."""
        ...

    def write_filter(self, doc: Mapping[str, Any]) -> dict[str, Any]:
        """Return conditions to add to the guarded write of ``doc``."""
        ...

    def check_transform(
        self, before: Mapping[str, Any], after: Mapping[str, Any]
    ) -> Refusal | None:
        """Refuse a rewrite the partitioning cannot carry, else ``None``."""
        ...

    def stale(self, epoch: Any) -> bool:
        """Whether a plan made at ``epoch`` no longer describes the collection."""
        ...


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

    def budget(self, max_partitions: int) -> int:
        """Return the ranges worth planning; a capped count is worth them all."""
        if self.at_least:
            return max_partitions
        return partition_budget(self.estimate, max_partitions)


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
            match, limit=cap, maxTimeMS=budget_ms, **_hint_option(hint)
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


def _hint_option(hint: Any | None) -> dict[str, Any]:
    return {} if hint is None else {"hint": _hint_document(hint)}


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
        shard_concurrency: int | None = None,
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

        For more than a couple of :data:`MIN_PARTITION_DOCS` and
        ``max_parallel > 1``, ranges are cut at sampled ``_id``s
        (:func:`scopes_from_sample`). A count or a sample that runs out of
        ``settings.sample_timeout_ms`` makes the plan coarser and says so in
        ``degraded``; it never fails the plan. Whatever the method, the
        partitions reach every matching document exactly once.

        :param hint: the version index, used by the count and the sample of matches.
        :param shard_concurrency: ignored (shard-aware partitioners use it).
        :raises ConfigInvalidError: on a ``count_cap`` below 1.
        """
        _check_positive(count_cap, "count_cap")
        estimate_above = settings.estimate_above
        budget_ms = settings.sample_timeout_ms
        exact_cap = min(count_cap, estimate_above + 1)
        counted = self._count(collection, match, hint, exact_cap, budget_ms)
        rows: list[dict[str, Any]] | None = None
        if counted.at_least and count_cap > estimate_above:
            estimated = self._estimate(collection, match, counted, settings)
            if estimated is None:
                counted = self._count(collection, match, hint, count_cap, budget_ms)
            else:
                counted, rows = estimated
        if counted.estimate == 0 and counted.degraded is None:
            return Plan("empty", 0, at_least=False, partitions=[], degraded=None)
        budget = counted.budget(settings.max_partitions)
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

    def _count(
        self,
        collection: Collection[Any],
        match: dict[str, Any],
        hint: Any | None,
        cap: int,
        budget_ms: int,
    ) -> Count:
        """Count matching documents up to ``cap``; on timeout, take the collection's size."""
        return count_matching(collection, match, hint, cap, budget_ms)

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
            **_hint_option(hint),
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
        return conjunction(_scope_parts(scope, {}))

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
        _check_positive(limit, "limit")
        query = conjunction([match, *_scope_parts(scope, cursor)])
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
