"""``_id`` ranges that never cross a BSON type bracket.

MongoDB orders values of different BSON types by a fixed bracket order
(MinKey < null < numbers < strings < objects < arrays < binary < ObjectId <
bool < date < timestamp < regex < code < MaxKey), but its query inequalities
(``$gt``, ``$gte``, ``$lt``, ``$lte``) apply *type bracketing*: ``{_id: {$gte:
5}}`` matches numbers of any numeric type and nothing else. A half-open range
``[lower, upper)`` therefore only means something inside one bracket, and a
collection whose ``_id``s mix ObjectIds, numbers, strings and UUIDs has to be
split bracket by bracket (DESIGN §3.4).

This module is the pure part of the ``_id`` partitioner: which bracket a value
or a ``$type`` name falls in, the :class:`IdRange` a partition covers, the
query that reaches exactly the documents of one range, and how sampled split
points become an ordered, capped list of ranges that covers every bracket the
collection has. No database here; ``$sample`` and counting live in the
partitioner.

Coverage guarantee. :func:`range_filter` restricts every range to its
bracket's ``$type`` set and writes a range as ``_id >= lower`` and *not*
``_id >= upper``. The ranges :func:`ranges_from_split_points` builds from one
bracket share their boundaries (the upper bound of one is the lower bound of
the next, the very same value), so the ranges of a bracket are exact
complements of each other: every document of the bracket satisfies exactly
one of them — including values no inequality matches, such as a NaN ``_id``,
which falls in the bracket's first range. Split points must come in the
server's order (as ``$sort: {_id: 1}`` returns them).

Bounds are ``_id`` values, which may be natural keys: keep them in the state,
never in messages or logs. ``IdRange``'s ``repr`` hides them for that reason.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from migronaut_core.background.planning.apportion import allocate, equal_weight_spans
from migronaut_core.background.planning.filters import is_nan
from migronaut_core.bson_values import bson_equal, bson_type_name, canonical_id_key
from migronaut_core.checks import check_int
from migronaut_core.errors import ConfigInvalidError

__all__ = [
    "BRACKETS",
    "Bracket",
    "IdRange",
    "bracket_of",
    "bracket_of_type",
    "group_by_bracket",
    "keyset_filter",
    "merge_ranges",
    "plan_ranges",
    "range_filter",
    "ranges_from_split_points",
]

#: The ``kind`` of an ``_id``-range partition scope (as stored on a partition).
SCOPE_KIND: Final = "id-range"


@dataclass(frozen=True, slots=True)
class Bracket:
    """One BSON comparison bracket an ``_id`` can fall in.

    :param name: the bracket's name, as stored in a partition scope.
    :param types: the ``$type`` aliases of its BSON types.
    :param splittable: whether it may be cut into bounded ranges. Brackets
        with a handful of values (null, bool), that ``_id`` cannot hold (array,
        regex) or whose bounds the server compares specially (MinKey, MaxKey)
        are always one unbounded range.
    """

    name: str
    types: tuple[str, ...]
    splittable: bool


#: Every bracket, in the server's comparison order. ``null`` includes the
#: deprecated ``undefined`` and ``code`` folds dbPointer, javascript and
#: javascriptWithScope (three server brackets, never split, reached by one
#: ``$type`` list).
BRACKETS: Final[tuple[Bracket, ...]] = (
    Bracket("minKey", ("minKey",), splittable=False),
    Bracket("null", ("null", "undefined"), splittable=False),
    Bracket("number", ("int", "long", "double", "decimal"), splittable=True),
    Bracket("string", ("string", "symbol"), splittable=True),
    Bracket("object", ("object",), splittable=True),
    Bracket("array", ("array",), splittable=False),
    Bracket("binData", ("binData",), splittable=True),
    Bracket("objectId", ("objectId",), splittable=True),
    Bracket("bool", ("bool",), splittable=False),
    Bracket("date", ("date",), splittable=True),
    Bracket("timestamp", ("timestamp",), splittable=True),
    Bracket("regex", ("regex",), splittable=False),
    Bracket("code", ("dbPointer", "javascript", "javascriptWithScope"), splittable=False),
    Bracket("maxKey", ("maxKey",), splittable=False),
)

_BY_NAME: Final = {bracket.name: bracket for bracket in BRACKETS}
_ORDER: Final = {bracket.name: index for index, bracket in enumerate(BRACKETS)}
_BY_TYPE: Final = {alias: bracket.name for bracket in BRACKETS for alias in bracket.types}


def _bracket(name: str) -> Bracket:
    found = _BY_NAME.get(name)
    if found is None:
        raise ConfigInvalidError(f"unknown _id bracket {name!r}", {"key": "bracket"})
    return found


def bracket_of_type(type_name: str) -> str:
    """Return the bracket of a ``$type`` name (as ``{$type: "$_id"}`` reports it).

    Group sampled ``_id``s by the server's type name rather than by their
    Python value: a value the driver decodes into another type (a dbPointer
    read as a ``DBRef``) still lands in the bracket the server compares it in.

    :raises ConfigInvalidError: for a name that is no BSON type.
    """
    found = _BY_TYPE.get(type_name)
    if found is None:
        raise ConfigInvalidError("unknown BSON type name", {"key": "type"})
    return found


def bracket_of(value: Any) -> str:
    """Return the bracket the ``_id`` ``value`` is compared in, once stored.

    :raises ConfigInvalidError: for a value of a type BSON cannot store.
    """
    name = bson_type_name(value)
    if name == "unknown":
        raise ConfigInvalidError(
            f"an _id of type {type(value).__qualname__} has no BSON bracket", {"key": "_id"}
        )
    return bracket_of_type(name)


@dataclass(frozen=True, slots=True, repr=False)
class IdRange:
    """A half-open range of ``_id``s inside one bracket: ``lower <= _id < upper``.

    ``lower=None`` means from the start of the bracket and ``upper=None`` to its
    end, so ``IdRange("string")`` is every string ``_id``. Only splittable
    brackets take bounds, and a bound must belong to the range's bracket.

    :raises ConfigInvalidError: on an unknown bracket or a misplaced bound.
    """

    bracket: str
    lower: Any = None
    upper: Any = None

    def __post_init__(self) -> None:
        bracket = _bracket(self.bracket)
        for bound in (self.lower, self.upper):
            if bound is None:
                continue
            if not bracket.splittable:
                raise ConfigInvalidError(
                    f"the {bracket.name} bracket is never split", {"key": "bracket"}
                )
            if bracket_of(bound) != bracket.name:
                raise ConfigInvalidError(
                    f"a bound of a {bracket.name} range lies in another bracket",
                    {"key": "bound"},
                )

    def __repr__(self) -> str:
        # Bounds are _id values: never let them leak into logs or messages.
        lower = "open" if self.lower is None else "set"
        upper = "open" if self.upper is None else "set"
        return f"IdRange(bracket={self.bracket!r}, lower=<{lower}>, upper=<{upper}>)"

    @property
    def whole(self) -> bool:
        """Whether the range is its entire bracket."""
        return self.lower is None and self.upper is None

    def to_scope(self) -> dict[str, Any]:
        """Return the partition scope that stores this range (BSON-ready)."""
        scope: dict[str, Any] = {"kind": SCOPE_KIND, "bracket": self.bracket}
        if self.lower is not None:
            scope["gte"] = self.lower
        if self.upper is not None:
            scope["lt"] = self.upper
        return scope

    @classmethod
    def from_scope(cls, scope: Mapping[str, Any]) -> IdRange:
        """Return the range a stored partition scope describes.

        :raises ConfigInvalidError: when it is not a valid ``id-range`` scope.
        """
        if scope.get("kind") != SCOPE_KIND or not isinstance(scope.get("bracket"), str):
            raise ConfigInvalidError("not an id-range scope", {"key": "scope"})
        return cls(scope["bracket"], scope.get("gte"), scope.get("lt"))


def range_filter(id_range: IdRange) -> dict[str, Any]:
    """Return the ``_id`` query that reaches exactly the documents of ``id_range``.

    ``{"_id": {"$type": [...], "$gte": lower, "$not": {"$gte": upper}}}``, the
    bounds left out when open. The ``$type`` list keeps an unbounded side
    inside the bracket; writing the upper bound as a negated ``$gte`` makes
    adjacent ranges exact complements (see the module docstring), so a bracket
    cut at shared split points is reached once per document. NaN included: no
    NaN is ``>=`` any bound, so it falls in the bracket's first range, which
    ``$lt`` would not match (nothing is ``< bound`` for NaN either); that is
    also why NaN is never a split point.
    Combine it with ``$and`` when the query has its own ``_id`` condition.
    """
    condition: dict[str, Any] = {"$type": list(_bracket(id_range.bracket).types)}
    if id_range.lower is not None:
        condition["$gte"] = id_range.lower
    if id_range.upper is not None:
        condition["$not"] = {"$gte": id_range.upper}
    return {"_id": condition}


def keyset_filter(last_id: Any) -> dict[str, Any]:
    """Return the ``_id`` condition for the documents after ``last_id`` in ``_id`` order.

    ``{"_id": {"$gt": last_id}}`` — except after a NaN ``_id`` (which sorts
    first among numbers), where ``$gt`` would match nothing at all and end the
    scan early: then it is ``{"_id": {"$not": {"$lte": NaN}}}``, every value
    but NaN. Only meaningful ``$and``-ed with the :func:`range_filter` of the
    range being scanned, which keeps it inside one bracket.
    """
    if is_nan(last_id):
        return {"_id": {"$not": {"$lte": last_id}}}
    return {"_id": {"$gt": last_id}}


def _distinct_in_order(points: Iterable[Any]) -> list[Any]:
    """Drop NaN, and a point the server holds equal to the one before it (``1``, ``1.0``).

    NaN cannot be a boundary: no other number is ``>= NaN``, so a range
    starting at NaN would break the chain of complements. Without it, a NaN
    ``_id`` lands in the bracket's first range, as nothing is ``>=`` a bound.
    """
    kept: list[Any] = []
    last_key: str | None = None
    for point in points:
        if is_nan(point):
            continue
        key = canonical_id_key(point)
        if key != last_key:
            kept.append(point)
            last_key = key
    return kept


def ranges_from_split_points(bracket: str, sorted_points: Sequence[Any]) -> list[IdRange]:
    """Return the ranges that cut ``bracket`` at ``sorted_points``, in order.

    ``k`` distinct points give ``k + 1`` ranges, ``[start, p1)``, ``[p1, p2)``
    … ``[pk, end)``, which together are the whole bracket. Points must be in
    the server's order; a point equal to the one before it (as the server
    compares, so ``1`` and ``1.0``) is dropped, and so is a NaN (see
    :func:`range_filter`). An unsplittable bracket, or no usable points, gives
    the one whole range.

    :raises ConfigInvalidError: on an unknown bracket, or a point of another
        bracket (the message says which bracket, never the value).
    """
    info = _bracket(bracket)
    if not info.splittable or not sorted_points:
        return [IdRange(bracket)]
    if any(bracket_of(point) != bracket for point in sorted_points):
        raise ConfigInvalidError(
            f"a split point of the {bracket} bracket lies in another bracket", {"key": "bound"}
        )
    points = _distinct_in_order(sorted_points)
    if not points:
        return [IdRange(bracket)]
    bounds: list[Any] = [None, *points, None]
    return [IdRange(bracket, bounds[i], bounds[i + 1]) for i in range(len(points) + 1)]


def _check_chain(ranges: Sequence[IdRange]) -> None:
    """Refuse ranges out of bracket order, or with a gap or overlap inside a bracket."""
    for before, after in itertools.pairwise(ranges):
        order = _ORDER[before.bracket] - _ORDER[after.bracket]
        if order > 0:
            raise ConfigInvalidError("ranges are not in bracket order", {"key": "ranges"})
        if order == 0 and (
            before.upper is None or after.lower is None or not bson_equal(before.upper, after.lower)
        ):
            raise ConfigInvalidError(
                f"the {after.bracket} ranges do not follow each other", {"key": "ranges"}
            )


def _runs(ranges: Sequence[IdRange]) -> list[tuple[int, int]]:
    """Return ``[start, end)`` index runs of ranges sharing a bracket."""
    runs: list[tuple[int, int]] = []
    start = 0
    for index in range(1, len(ranges) + 1):
        if index == len(ranges) or ranges[index].bracket != ranges[start].bracket:
            runs.append((start, index))
            start = index
    return runs


def _merge_run(run: Sequence[IdRange], weights: Sequence[float], parts: int) -> list[IdRange]:
    """Merge a run of one bracket's ranges into ``parts`` ranges of about equal weight."""
    return [
        IdRange(run[start].bracket, run[start].lower, run[end - 1].upper)
        for start, end in equal_weight_spans(weights, parts)
    ]


def _check_weights(weights: Sequence[float] | None, count: int) -> list[float]:
    if weights is None:
        return [1.0] * count
    if len(weights) != count:
        raise ConfigInvalidError("weights must match the ranges one to one", {"key": "weights"})
    if any(not math.isfinite(w) or w < 0 for w in weights):
        raise ConfigInvalidError("weights must be finite and >= 0", {"key": "weights"})
    return [float(w) for w in weights]


def merge_ranges(
    ranges: Sequence[IdRange],
    max_partitions: int,
    *,
    weights: Sequence[float] | None = None,
) -> list[IdRange]:
    """Return ``ranges`` merged down to at most ``max_partitions``, coverage unchanged.

    Only neighbours of one bracket merge (a merged range is ``[first.lower,
    last.upper)``), so what the result covers is exactly what ``ranges``
    covered. Each bracket keeps at least one range, so the result has
    ``max(max_partitions, brackets present)`` ranges at most. The budget goes
    to the brackets in proportion to their weight, and each bracket is cut
    into groups of about equal weight (both by
    :mod:`~migronaut_core.background.planning.apportion`: ties go to the
    earlier bracket and the earlier boundary). ``weights`` are the expected
    documents per range (sample counts); by default every range weighs the
    same, which suits ranges cut at sampled ``_id``s.

    :param ranges: contiguous within each bracket, brackets in server order —
        as :func:`ranges_from_split_points` and :func:`plan_ranges` make them.
    :raises ConfigInvalidError: on a bad ``max_partitions`` or ``weights``, or
        ranges that are out of order or not contiguous.
    """
    check_int("max_partitions", max_partitions, 1)
    loads = _check_weights(weights, len(ranges))
    _check_chain(ranges)
    if len(ranges) <= max_partitions:
        return list(ranges)
    runs = _runs(ranges)
    parts = allocate(
        [sum(loads[start:end]) for start, end in runs],
        max_partitions,
        capacities=[end - start for start, end in runs],
    )
    merged: list[IdRange] = []
    for (start, end), count in zip(runs, parts, strict=True):
        merged.extend(_merge_run(ranges[start:end], loads[start:end], count))
    return merged


def plan_ranges(
    present_brackets: Iterable[str],
    points_by_bracket: Mapping[str, Sequence[Any]],
    *,
    max_partitions: int,
) -> list[IdRange]:
    """Return the ordered ranges that cover every bracket the collection holds.

    Each bracket that has documents (``present_brackets``) or split points
    gets ranges: cut at its points (:func:`ranges_from_split_points`), or one
    unbounded range when it has none (present, but missed by the sample) or
    is never split. The result is in server bracket order and capped by
    :func:`merge_ranges`; together the ranges reach every document whose
    ``_id`` lies in one of those brackets exactly once.

    :param present_brackets: bracket names known to hold matching documents.
    :param points_by_bracket: per bracket, sampled ``_id``s in server order
        (:func:`group_by_bracket` builds it from a sorted ``$sample``).
    :raises ConfigInvalidError: on an unknown bracket name or a misplaced point.
    """
    wanted = {_bracket(name).name for name in present_brackets}
    wanted.update(_bracket(name).name for name, points in points_by_bracket.items() if points)
    ranges: list[IdRange] = []
    for bracket in BRACKETS:
        if bracket.name in wanted:
            points = points_by_bracket.get(bracket.name, ())
            ranges.extend(ranges_from_split_points(bracket.name, points))
    return merge_ranges(ranges, max_partitions)


def group_by_bracket(
    rows: Iterable[Mapping[str, Any]], *, id_field: str = "_id", type_field: str = "t"
) -> dict[str, list[Any]]:
    """Group sampled ``_id``s by bracket, keeping their order.

    ``rows`` are what ``[{$sample}, {$project: {_id: 1, t: {$type: "$_id"}}},
    {$sort: {_id: 1}}]`` returns: each ``_id`` with the server's type name,
    in server order — which stays the order within each bracket.

    :raises ConfigInvalidError: on a row without the id or a known type name.
    """
    groups: dict[str, list[Any]] = {}
    for row in rows:
        if id_field not in row or not isinstance(row.get(type_field), str):
            raise ConfigInvalidError("a sample row lacks its id or type", {"key": type_field})
        groups.setdefault(bracket_of_type(row[type_field]), []).append(row[id_field])
    return groups
