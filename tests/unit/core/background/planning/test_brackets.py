"""``_id`` brackets, ranges, their filters and how they merge — pure, no server."""

from __future__ import annotations

import datetime
import itertools
import math
import random
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from bson import Code, DBRef, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from bson.binary import Binary

from migronaut_core.background.planning.brackets import (
    BRACKETS,
    IdRange,
    bracket_of,
    bracket_of_type,
    group_by_bracket,
    keyset_filter,
    merge_ranges,
    plan_ranges,
    range_filter,
    ranges_from_split_points,
)
from migronaut_core.bson_values import bson_equal, bson_type_name
from migronaut_core.errors import ConfigInvalidError

NAN = float("nan")


# ─── brackets ─────────────────────────────────────────────────────────────────


def test_brackets_follow_the_server_comparison_order() -> None:
    assert [b.name for b in BRACKETS] == [
        "minKey",
        "null",
        "number",
        "string",
        "object",
        "array",
        "binData",
        "objectId",
        "bool",
        "date",
        "timestamp",
        "regex",
        "code",
        "maxKey",
    ]


def test_every_type_alias_belongs_to_exactly_one_bracket() -> None:
    aliases = [alias for b in BRACKETS for alias in b.types]
    assert len(aliases) == len(set(aliases))
    assert set(aliases) == {
        "minKey",
        "null",
        "undefined",
        "int",
        "long",
        "double",
        "decimal",
        "string",
        "symbol",
        "object",
        "array",
        "binData",
        "objectId",
        "bool",
        "date",
        "timestamp",
        "regex",
        "dbPointer",
        "javascript",
        "javascriptWithScope",
        "maxKey",
    }
    for bracket in BRACKETS:
        for alias in bracket.types:
            assert bracket_of_type(alias) == bracket.name


@pytest.mark.parametrize(
    ("value", "bracket"),
    [
        (MinKey(), "minKey"),
        (None, "null"),
        (1, "number"),
        (Int64(1), "number"),
        (2.5, "number"),
        (NAN, "number"),
        (Decimal128("1"), "number"),
        ("a", "string"),
        ({"a": 1}, "object"),
        (DBRef("c", 1), "object"),
        ([1], "array"),
        (b"x", "binData"),
        (Binary(b"x", 4), "binData"),
        (uuid.uuid4(), "binData"),
        (ObjectId(), "objectId"),
        (True, "bool"),
        (datetime.datetime(2024, 1, 1), "date"),
        (Timestamp(1, 1), "timestamp"),
        (Regex("a"), "regex"),
        (Code("f"), "code"),
        (Code("f", {}), "code"),
        (MaxKey(), "maxKey"),
    ],
)
def test_bracket_of(value: Any, bracket: str) -> None:
    assert bracket_of(value) == bracket


def test_unknown_values_and_names_are_refused_without_values() -> None:
    with pytest.raises(ConfigInvalidError) as caught:
        bracket_of(Decimal("1.5"))
    assert "1.5" not in str(caught.value)
    with pytest.raises(ConfigInvalidError):
        bracket_of_type("missing")


# ─── IdRange ──────────────────────────────────────────────────────────────────


def test_id_range_validates_its_bracket_and_bounds() -> None:
    assert IdRange("string").whole
    assert not IdRange("number", 1, 5).whole
    bad: Callable[[], object]
    for bad in (
        lambda: IdRange("nope"),
        lambda: IdRange("bool", True),  # never split
        lambda: IdRange("number", "1"),  # a bound of another bracket
        lambda: IdRange("number", None, True),
        lambda: IdRange("objectId", None, str(ObjectId())),
    ):
        with pytest.raises(ConfigInvalidError):
            bad()


def test_id_range_repr_hides_the_bounds() -> None:
    text = repr(IdRange("string", "alice@example.com", "bob@example.com"))
    assert "example" not in text
    assert text == "IdRange(bracket='string', lower=<set>, upper=<set>)"


def test_id_range_scope_round_trip() -> None:
    oid = ObjectId()
    for r in (IdRange("objectId", oid), IdRange("number", None, 5), IdRange("null")):
        scope = r.to_scope()
        assert scope["kind"] == "id-range"
        assert IdRange.from_scope(scope) == r
    assert IdRange("objectId", oid).to_scope() == {
        "kind": "id-range",
        "bracket": "objectId",
        "gte": oid,
    }
    with pytest.raises(ConfigInvalidError):
        IdRange.from_scope({"kind": "step"})


# ─── filters ──────────────────────────────────────────────────────────────────


def test_range_filter_shapes() -> None:
    numbers = ["int", "long", "double", "decimal"]
    assert range_filter(IdRange("number")) == {"_id": {"$type": numbers}}
    assert range_filter(IdRange("number", None, 10)) == {
        "_id": {"$type": numbers, "$not": {"$gte": 10}}
    }
    assert range_filter(IdRange("number", 10, 20)) == {
        "_id": {"$type": numbers, "$gte": 10, "$not": {"$gte": 20}}
    }
    assert range_filter(IdRange("string", "m")) == {
        "_id": {"$type": ["string", "symbol"], "$gte": "m"}
    }
    assert range_filter(IdRange("null")) == {"_id": {"$type": ["null", "undefined"]}}


def test_keyset_filter_steps_over_nan() -> None:
    assert keyset_filter(5) == {"_id": {"$gt": 5}}
    nan_key = keyset_filter(NAN)["_id"]
    assert list(nan_key) == ["$not"] and math.isnan(nan_key["$not"]["$lte"])
    assert list(keyset_filter(Decimal128("NaN"))["_id"]) == ["$not"]


# ─── ranges from split points ─────────────────────────────────────────────────


def _assert_chain(ranges: list[IdRange]) -> None:
    """Per bracket: opens at the start, closes at the end, each lower is the previous upper."""
    by_bracket: dict[str, list[IdRange]] = {}
    for r in ranges:
        by_bracket.setdefault(r.bracket, []).append(r)
    order = [b.name for b in BRACKETS]
    assert list(by_bracket) == sorted(by_bracket, key=order.index)
    for run in by_bracket.values():
        assert run[0].lower is None and run[-1].upper is None
        for before, after in itertools.pairwise(run):
            assert before.upper is not None and before.upper is after.lower


def test_split_points_make_contiguous_half_open_ranges() -> None:
    ranges = ranges_from_split_points("number", [1, 5, 9])
    assert [(r.lower, r.upper) for r in ranges] == [(None, 1), (1, 5), (5, 9), (9, None)]
    assert {r.bracket for r in ranges} == {"number"}
    _assert_chain(ranges)


def test_split_points_equal_to_the_server_are_dropped() -> None:
    ranges = ranges_from_split_points("number", [1, 1.0, Int64(1), 2, Decimal128("2.0")])
    assert [(r.lower, r.upper) for r in ranges] == [(None, 1), (1, 2), (2, None)]


def test_nan_is_never_a_split_point() -> None:
    ranges = ranges_from_split_points("number", [NAN, Decimal128("NaN"), float("-inf"), 3])
    assert [(r.lower, r.upper) for r in ranges] == [
        (None, float("-inf")),
        (float("-inf"), 3),
        (3, None),
    ]
    assert ranges_from_split_points("number", [NAN]) == [IdRange("number")]


def test_no_points_or_an_unsplittable_bracket_give_one_whole_range() -> None:
    assert ranges_from_split_points("string", []) == [IdRange("string")]
    assert ranges_from_split_points("bool", [False, True]) == [IdRange("bool")]
    assert ranges_from_split_points("null", [None]) == [IdRange("null")]


def test_split_points_of_another_bracket_are_refused() -> None:
    oid = ObjectId()
    with pytest.raises(ConfigInvalidError) as caught:
        ranges_from_split_points("string", ["a", oid])
    assert str(oid) not in str(caught.value)
    with pytest.raises(ConfigInvalidError):
        ranges_from_split_points("number", [1, True])


# ─── merging ──────────────────────────────────────────────────────────────────


def _mixed_ranges() -> list[IdRange]:
    oids = sorted(ObjectId.from_datetime(datetime.datetime(2024, 1, d)) for d in range(1, 11))
    return [
        *ranges_from_split_points("number", list(range(0, 100, 10))),  # 11 ranges
        *ranges_from_split_points("string", ["b", "d"]),  # 3 ranges
        IdRange("object"),
        *ranges_from_split_points("objectId", oids),  # 11 ranges
        IdRange("bool"),
    ]


@pytest.mark.parametrize("cap", [1, 3, 5, 6, 7, 10, 17, 25, 26, 100])
def test_merge_caps_and_keeps_coverage(cap: int) -> None:
    ranges = _mixed_ranges()
    merged = merge_ranges(ranges, cap)
    assert len(merged) == min(len(ranges), max(cap, 5))  # 5 brackets present
    _assert_chain(merged)
    assert {r.bracket for r in merged} == {r.bracket for r in ranges}


def test_merge_spends_the_budget_where_the_ranges_are() -> None:
    merged = merge_ranges(_mixed_ranges(), 12)
    counts = {b: sum(r.bracket == b for r in merged) for b in {r.bracket for r in merged}}
    assert counts["number"] >= 4 and counts["objectId"] >= 4
    assert counts["object"] == counts["bool"] == 1


def test_merge_cuts_by_weight() -> None:
    ranges = ranges_from_split_points("number", [10, 20, 30, 40])  # 5 ranges
    merged = merge_ranges(ranges, 2, weights=[100, 1, 1, 1, 1])
    assert [(r.lower, r.upper) for r in merged] == [(None, 10), (10, None)]
    merged = merge_ranges(ranges, 2, weights=[1, 1, 1, 1, 100])
    assert [(r.lower, r.upper) for r in merged] == [(None, 40), (40, None)]
    merged = merge_ranges(ranges, 2, weights=[0, 0, 0, 0, 0])
    assert len(merged) == 2
    _assert_chain(merged)


def test_merge_refuses_broken_input() -> None:
    ranges = ranges_from_split_points("number", [10, 20])
    call: Callable[[], object]
    for call in (
        lambda: merge_ranges(ranges, 0),
        lambda: merge_ranges(ranges, True),
        lambda: merge_ranges(ranges, 2, weights=[1]),
        lambda: merge_ranges(ranges, 2, weights=[1, -1, 1]),
        lambda: merge_ranges(ranges, 2, weights=[1, NAN, 1]),
        lambda: merge_ranges([ranges[0], ranges[2]], 1),  # a gap
        lambda: merge_ranges([IdRange("string"), IdRange("number")], 1),  # out of order
    ):
        with pytest.raises(ConfigInvalidError):
            call()


# ─── plans ────────────────────────────────────────────────────────────────────


def test_plan_covers_every_present_bracket_in_order() -> None:
    oid = ObjectId()
    ranges = plan_ranges(
        ["binData", "string", "number", "objectId"],
        {"number": [5, 50], "objectId": [oid], "date": []},
        max_partitions=64,
    )
    assert [r.bracket for r in ranges] == [
        "number",
        "number",
        "number",
        "string",  # present, not sampled: one open range
        "binData",
        "objectId",
        "objectId",
    ]
    _assert_chain(ranges)


def test_plan_includes_brackets_only_the_sample_saw_and_caps() -> None:
    ranges = plan_ranges([], {"string": ["a", "b", "c"]}, max_partitions=2)
    assert len(ranges) == 2 and {r.bracket for r in ranges} == {"string"}
    _assert_chain(ranges)
    assert plan_ranges([], {}, max_partitions=4) == []
    with pytest.raises(ConfigInvalidError):
        plan_ranges(["numbers"], {}, max_partitions=4)


def test_group_by_bracket_keeps_server_order() -> None:
    oid = ObjectId()
    rows: list[dict[str, Any]] = [
        {"_id": 1, "t": "int"},
        {"_id": 2.5, "t": "double"},
        {"_id": "a", "t": "string"},
        {"_id": oid, "t": "objectId"},
        {"_id": DBRef("c", 1), "t": "dbPointer"},
    ]
    assert group_by_bracket(rows) == {
        "number": [1, 2.5],
        "string": ["a"],
        "objectId": [oid],
        "code": [DBRef("c", 1)],
    }
    with pytest.raises(ConfigInvalidError):
        group_by_bracket([{"_id": 1}])


# ─── exactly-once, against a model of the server's comparisons ────────────────


def _number(value: Any) -> Any:
    return value.to_decimal() if isinstance(value, Decimal128) else value


def _server_gte(value: Any, bound: Any) -> bool:
    """``value >= bound`` as a query predicate: type bracketing, NaN matches only NaN."""
    if bracket_of(value) != bracket_of(bound):
        return False
    if bracket_of(value) != "number":
        return bool(value >= bound)
    a, b = Decimal(str(_number(value))), Decimal(str(_number(bound)))
    if a.is_nan() or b.is_nan():
        return a.is_nan() and b.is_nan()
    return a >= b


def _matches(value: Any, query: dict[str, Any]) -> bool:
    condition = query["_id"]
    ok = bson_type_name(value) in condition["$type"]
    if "$gte" in condition:
        ok = ok and _server_gte(value, condition["$gte"])
    if "$not" in condition:
        ok = ok and not _server_gte(value, condition["$not"]["$gte"])
    return ok


def test_every_id_falls_in_exactly_one_range_nan_included() -> None:
    rng = random.Random(7)
    ids: list[Any] = [NAN, Decimal128("-Infinity"), float("inf"), -0.0]
    ids += [rng.choice([int, float, Int64])(rng.randint(-50, 50)) for _ in range(200)]
    ids += [Decimal128(str(rng.randint(-50, 50))) for _ in range(20)]
    ids += ["".join(rng.choices("abc", k=rng.randint(0, 3))) for _ in range(50)]
    points: dict[str, list[Any]] = {
        # In server order: NaN first, as a sorted $sample returns it.
        "number": [NAN, float("-inf"), *sorted(rng.sample(range(-60, 60), 9))],
        "string": sorted({"".join(rng.choices("abc", k=2)) for _ in range(4)}),
    }
    for cap in (1, 2, 3, 8, 100):
        ranges = plan_ranges(["number", "string"], points, max_partitions=cap)
        for value in ids:
            hits = [r for r in ranges if _matches(value, range_filter(r))]
            assert len(hits) == 1, (bson_type_name(value), cap)


def test_the_upper_bound_is_a_complement_not_lt() -> None:
    """``$lt`` would lose a NaN ``_id``: nothing is ``< 0`` or ``>= 0`` for NaN."""
    first = IdRange("number", None, 0)
    assert _matches(NAN, range_filter(first))
    assert not _matches(NAN, range_filter(IdRange("number", 0)))
    assert bson_equal(range_filter(first)["_id"]["$not"], {"$gte": 0})
