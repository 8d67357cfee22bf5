"""The scopes of the ``_id``-range partitioner, and the filters that read them.

Three kinds of scope:

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
sampled plan (:func:`scopes_from_sample`) — the ranges plus the catch-all
``rest`` — reaches every document exactly once, whatever the sample missed.
Scopes that span brackets (``all``, ``rest``) resume *after* the last ``_id``
read in the server's total order, not with ``$gt`` (which the server applies
within one type bracket only), and name their brackets with a positive
``$type`` list, which the server turns into tight index bounds (a ``$not:
{$type}`` would scan every key).

A lane's cursor is ``{}`` at the start and ``{"after": <last _id read>}``
later (:func:`scope_parts`). Pure. ``_id`` values live in scopes and cursors
only, never in messages or logs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

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
from migronaut_core.background.planning.filters import is_nan
from migronaut_core.background.planning.partition.protocol import Scope
from migronaut_core.errors import ConfigInvalidError

__all__ = ["ALL_KIND", "RANGE_KIND", "REST_KIND", "scope_parts", "scopes_from_sample"]

#: Scope kinds the id-range partitioner makes.
ALL_KIND: Final = "all"
RANGE_KIND: Final = SCOPE_KIND
REST_KIND: Final = "rest"

_NAN: Final = float("nan")

_BRACKET_INDEX: Final = {bracket.name: index for index, bracket in enumerate(BRACKETS)}


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


def scope_parts(scope: Mapping[str, Any], cursor: Mapping[str, Any]) -> list[dict[str, Any]]:
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


def scopes_from_sample(rows: Iterable[Mapping[str, Any]], *, max_partitions: int) -> list[Scope]:
    """Return the scopes that cut the sampled brackets at sample points and catch the rest.

    Every bracket the sample hit is split at evenly spaced sampled ``_id``s
    into at most ``max_partitions`` ranges in all; a bracket left in one piece
    is not listed on its own. One ``rest`` scope takes every bracket not split —
    the ones the sample missed included — so the result reaches every document
    exactly once. Without a split bracket it is the one ``all`` scope.

    :param rows: ``{_id, t}`` rows in server order (see :func:`~.counting.sample_pipeline`).
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
