"""What a pass matches: its query, failed documents left out, and its fingerprint.

:func:`match_of` is the query a pass in one direction still has to rewrite;
:func:`exclude_bad_ids` leaves out the documents that failed before;
:func:`canary_subset` and :func:`in_canary` narrow a query to a canary's subset;
:func:`match_hash` fingerprints what a pass matches (through a canonical form of
the filter) so a repinned spec that matches differently replaces its plan. Pure.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from bson import json_util

from migronaut_core.background.spec.model import (
    CANARY_BUCKETS,
    BackgroundSpec,
    CanarySettings,
    Direction,
)
from migronaut_core.background.spec.validation import read_stored
from migronaut_core.bson_values import clone_document
from migronaut_core.versioning import version_filter


def match_of(spec: BackgroundSpec, direction: Direction) -> dict[str, Any]:
    """Return the query for documents a pass in ``direction`` still has to rewrite.

    The spec's filter plus the source version's :func:`version_filter`. The
    filter never tests the version field (validated), so the merge cannot
    overwrite a clause. A fresh copy: the caller may extend it.
    """
    match = clone_document(spec.filter)
    match.update(version_filter(spec.field, spec.source_version(direction)))
    return match


def exclude_bad_ids(match: Mapping[str, Any], bad_ids: Sequence[Any]) -> dict[str, Any]:
    """Return ``match`` without the documents ``bad_ids`` (those that failed before).

    ``match`` itself (copied) when there are none, so the common query stays simple.
    """
    if not bad_ids:
        return dict(match)
    return {"$and": [dict(match), {"_id": {"$nin": list(bad_ids)}}]}


def only_ids(match: Mapping[str, Any], ids: Sequence[Any]) -> dict[str, Any]:
    """Return ``match`` narrowed to the documents ``ids`` (a failed-only retry's pass)."""
    return {"$and": [dict(match), {"_id": {"$in": list(ids)}}]}


def canary_subset(canary: CanarySettings) -> dict[str, Any]:
    """Return the query of a canary's subset (a fresh copy).

    A ``filter`` as given. A ``fraction`` ``f``: documents whose ``_id`` hashes
    (``$toHashedIndexKey``, the server's hashed-index function: the same on every
    lane, process and restart, and for any ``_id`` type) into the first ``f`` of
    :data:`~.model.CANARY_BUCKETS` buckets; at least one bucket.
    """
    if canary.filter is not None:
        return clone_document(canary.filter)
    assert canary.fraction is not None
    cut = max(1, round(canary.fraction * CANARY_BUCKETS))
    bucket = {"$abs": {"$mod": [{"$toHashedIndexKey": "$_id"}, CANARY_BUCKETS]}}
    return {"$expr": {"$lt": [bucket, cut]}}


def in_canary(match: Mapping[str, Any], canary: CanarySettings) -> dict[str, Any]:
    """Return ``match`` narrowed to the canary's subset."""
    return {"$and": [dict(match), canary_subset(canary)]}


def match_hash(spec: BackgroundSpec | Mapping[str, Any], direction: Direction) -> str:
    """Return a stable fingerprint of what a pass in ``direction`` matches.

    Two specs get the same hash when their passes match the same documents
    the same way: same mode, collection, version field, source version,
    revision field and filter. Settings such as ``batch_size`` do not count.
    The filter is compared in a canonical form that ignores the order of
    clauses and of operators (it means nothing to the server) but keeps the
    order of embedded documents and arrays (an equality on ``{a, b}`` does not
    match ``{b, a}``) and every BSON type. A changed hash after a repin means
    the current plan must be replaced. Stable across processes and releases.

    :param spec: a spec, or a stored spec document (read with
        :func:`~migronaut_core.background.spec.validation.read_stored`).
    :returns: 16 lowercase hex digits of a SHA-256.
    """
    if not isinstance(spec, BackgroundSpec):
        spec = read_stored(spec)
    payload = [
        "match/1",
        spec.mode,
        spec.collection,
        spec.field,
        spec.source_version(direction),
        spec.revision_field,
        _query_form(spec.filter),
    ]
    text = json.dumps(payload, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


_LOGICAL: Final = frozenset({"$and", "$or", "$nor"})


def _query_form(query: Mapping[str, Any]) -> list[Any]:
    """A query document: its clauses are ANDed, so their order is dropped."""
    return ["query", [[key, _clause_form(key, query[key])] for key in sorted(query)]]


def _clause_form(key: str, value: Any) -> Any:
    if key in _LOGICAL and isinstance(value, list):
        return ["all", [_query_or_literal(item) for item in value]]
    if key.startswith("$"):
        return _literal_form(value)
    return _condition_form(value)


def _condition_form(value: Any) -> Any:
    """The value a field is tested with: an operator document or a literal."""
    if not _is_operators(value):
        return _literal_form(value)
    parts = []
    for operator in sorted(value):
        operand = value[operator]
        if operator == "$not":
            parts.append([operator, _condition_form(operand)])
        elif operator == "$elemMatch" and isinstance(operand, Mapping):
            form = _condition_form(operand) if _is_operators(operand) else _query_form(operand)
            parts.append([operator, form])
        else:
            parts.append([operator, _literal_form(operand)])
    return ["operators", parts]


def _query_or_literal(item: Any) -> Any:
    return _query_form(item) if isinstance(item, Mapping) else _literal_form(item)


def _is_operators(value: Any) -> bool:
    return (
        isinstance(value, Mapping)
        and len(value) > 0
        and all(isinstance(key, str) and key.startswith("$") for key in value)
    )


def _literal_form(value: Any) -> Any:
    """A value compared as is: every order and every BSON type kept."""
    if isinstance(value, Mapping):
        return ["doc", [[str(key), _literal_form(item)] for key, item in value.items()]]
    if isinstance(value, list | tuple):
        return ["array", [_literal_form(item) for item in value]]
    return ["value", json_util.dumps(value, json_options=json_util.CANONICAL_JSON_OPTIONS)]
