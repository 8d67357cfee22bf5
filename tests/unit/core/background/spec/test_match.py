"""What a pass matches: its query, failed documents left out, and its fingerprint."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from migronaut_core.background.spec import (
    exclude_bad_ids,
    match_hash,
    match_of,
)
from tests.support.spec import resolve

# ─── Match ────────────────────────────────────────────────────────────────────


def test_match_of_forward_and_revert() -> None:
    spec = resolve(filter={"tenant": "acme"})
    assert match_of(spec, "forward") == {"tenant": "acme", "_v": 1}
    assert match_of(spec, "revert") == {"tenant": "acme", "_v": 2}
    match = match_of(spec, "forward")
    match["tenant"] = "other"
    assert spec.filter == {"tenant": "acme"}


def test_exclude_bad_ids() -> None:
    match = {"_v": 1}
    assert exclude_bad_ids(match, []) == {"_v": 1}
    assert exclude_bad_ids(match, ()) is not match
    assert exclude_bad_ids(match, (3, "x")) == {"$and": [{"_v": 1}, {"_id": {"$nin": [3, "x"]}}]}


def test_match_hash_is_stable() -> None:
    spec = resolve(filter={"a": {"x": 1, "y": [1, {"k": 2}]}, "b": {"$gt": 1, "$lt": 5}})
    value = match_hash(spec, "forward")
    assert re.fullmatch(r"[0-9a-f]{16}", value)
    assert match_hash(copy.deepcopy(spec), "forward") == value
    assert match_hash(spec.to_document(), "forward") == value
    # Clause order and operator order mean nothing to the server.
    reordered = resolve(filter={"b": {"$lt": 5, "$gt": 1}, "a": {"x": 1, "y": [1, {"k": 2}]}})
    assert match_hash(reordered, "forward") == value


def test_match_hash_ignores_settings() -> None:
    value = match_hash(resolve(), "forward")
    for overrides in (
        {"batch_size": 7},
        {"max_parallel": 9},
        {"slice_ms": 1_000},
        {"transaction": True},
        {"adaptive": True},
        {"throttle": {"pause_ms": 5}},
        {"write_concern": {"w": 1}},
    ):
        assert match_hash(resolve(**overrides), "forward") == value


@pytest.mark.parametrize(
    "overrides",
    [
        {"filter": {"a": 1}},
        {"collection": "people"},
        {"field": "schema"},
        {"revision_field": "rev"},
        {"from": 0},
        {"to": 3},
    ],
)
def test_match_hash_changes_with_what_is_matched(overrides: dict[str, Any]) -> None:
    before = resolve(filter={"a": 2} if "filter" in overrides else {})
    after = resolve(**overrides)
    forward_changes = "to" not in overrides
    assert (match_hash(before, "forward") != match_hash(after, "forward")) == forward_changes
    revert_changes = "from" not in overrides
    assert (match_hash(before, "revert") != match_hash(after, "revert")) == revert_changes


def test_match_hash_differs_between_directions() -> None:
    spec = resolve()
    assert match_hash(spec, "forward") != match_hash(spec, "revert")


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ({"a": {"x": 1, "y": 2}}, {"a": {"y": 2, "x": 1}}),  # embedded document order
        ({"a": [1, 2]}, {"a": [2, 1]}),
        ({"a": 1}, {"a": "1"}),
        ({"a": 1}, {"a": 1.5}),
        ({"a": {"$in": [{"x": 1, "y": 2}]}}, {"a": {"$in": [{"y": 2, "x": 1}]}}),
        ({"a": {"$elemMatch": {"b": 1}}}, {"a": {"$elemMatch": {"b": 2}}}),
        ({"$or": [{"a": 1}]}, {"$nor": [{"a": 1}]}),
    ],
)
def test_match_hash_keeps_what_matters(left: dict[str, Any], right: dict[str, Any]) -> None:
    assert match_hash(resolve(filter=left), "forward") != match_hash(
        resolve(filter=right), "forward"
    )


def test_match_hash_sorts_nested_query_clauses() -> None:
    left = {"$or": [{"a": 1, "b": 2}], "c": {"$elemMatch": {"x": 1, "y": {"$gt": 1, "$lt": 3}}}}
    right = {"c": {"$elemMatch": {"y": {"$lt": 3, "$gt": 1}, "x": 1}}, "$or": [{"b": 2, "a": 1}]}
    assert match_hash(resolve(filter=left), "forward") == match_hash(
        resolve(filter=right), "forward"
    )
