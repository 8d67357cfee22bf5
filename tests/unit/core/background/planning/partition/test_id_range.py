"""The id-range partitioner's pure parts: scopes, batch queries, cursors, plan assembly."""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import uuid
from typing import Any

import pytest
from bson import Decimal128, Int64, MaxKey, MinKey, ObjectId
from bson.binary import Binary

from migronaut_core.background.planning.brackets import (
    BRACKETS,
    IdRange,
    keyset_filter,
    range_filter,
)
from migronaut_core.background.planning.partition import (
    MIN_PARTITION_DOCS,
    BatchQuery,
    IdRangePartitioner,
    Partitioner,
    PartitionSettings,
    Plan,
    partition_budget,
    sample_pipeline,
    scopes_from_sample,
)
from migronaut_core.errors import ConfigInvalidError

P = IdRangePartitioner()
MATCH = {"_v": 1}
HINT = [("_v", 1), ("_id", 1)]

#: Every ``$type`` alias of a BSON type the server stores.
ALL_BSON_TYPES = {
    "double", "string", "object", "array", "binData", "undefined", "objectId", "bool",
    "date", "null", "regex", "dbPointer", "javascript", "symbol", "javascriptWithScope",
    "int", "timestamp", "long", "decimal", "minKey", "maxKey",
}  # fmt: skip


def _types(*brackets: str) -> list[str]:
    return [t for b in BRACKETS if b.name in brackets for t in b.types]


def _oids(count: int) -> list[ObjectId]:
    start = int(datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC).timestamp())
    return [ObjectId(f"{start + i:08x}0000000000000000") for i in range(count)]


def _rows(values: list[Any], type_name: str) -> list[dict[str, Any]]:
    return [{"_id": v, "t": type_name} for v in values]


# ─── shapes ───────────────────────────────────────────────────────────────────


def test_every_bson_type_is_in_exactly_one_bracket() -> None:
    aliases = [t for b in BRACKETS for t in b.types]
    assert sorted(aliases) == sorted(ALL_BSON_TYPES)


def test_data_shapes_are_frozen_and_slotted() -> None:
    plan = Plan("empty", 0, at_least=False, partitions=[], degraded=None)
    query = BatchQuery({}, [("_id", 1)], 10, None)
    for value in (plan, query, PartitionSettings(1, 1, 1)):
        assert not hasattr(value, "__dict__")
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, dataclasses.fields(value)[0].name, None)
    assert plan.epoch is None


def test_the_partitioner_satisfies_the_protocol() -> None:
    partitioner: Partitioner = P
    assert partitioner.id == "id-range"
    assert P.stale({"anything": 1}) is False
    assert P.write_filter({"_id": 1}) == {}
    assert P.check_transform({"_id": 1}, {"_id": 1, "a": 2}) is None


# ─── scope filters ────────────────────────────────────────────────────────────


def test_scope_filter_of_each_kind() -> None:
    assert P.scope_filter({"kind": "all"}) == {}
    oid = ObjectId()
    scope = IdRange("objectId", oid, None).to_scope()
    assert P.scope_filter(scope) == range_filter(IdRange("objectId", oid))
    rest = P.scope_filter({"kind": "rest", "except": ["objectId", "number"]})
    others = [b.name for b in BRACKETS if b.name not in {"objectId", "number", "array"}]
    assert rest == {"_id": {"$type": _types(*others)}}


def test_rest_types_complement_the_excepted_brackets() -> None:
    excepted = ["number", "string", "objectId"]
    kept = set(P.scope_filter({"kind": "rest", "except": excepted})["_id"]["$type"])
    assert kept.isdisjoint(_types(*excepted))
    assert kept | set(_types(*excepted)) == ALL_BSON_TYPES - {"array"}  # never an _id


@pytest.mark.parametrize(
    "scope",
    [
        {"kind": "ids"},
        {"kind": "rest"},
        {"kind": "rest", "except": ["numbers"]},
        {"kind": "rest", "except": "number"},
        {"kind": "id-range"},
        {},
    ],
)
def test_scope_filter_refuses_unknown_scopes(scope: dict[str, Any]) -> None:
    with pytest.raises(ConfigInvalidError):
        P.scope_filter(scope)


# ─── batch queries ────────────────────────────────────────────────────────────


def _query(scope: dict[str, Any], cursor: dict[str, Any], match: Any = MATCH) -> BatchQuery:
    return P.batch_query(scope, cursor, limit=500, match=match, hint=HINT)


def test_batch_query_of_all_from_the_start_is_the_match() -> None:
    query = _query({"kind": "all"}, {})
    assert query == BatchQuery({"_v": 1}, [("_id", 1)], 500, HINT)
    assert _query({"kind": "all"}, {}, match={}).filter == {}


def test_batch_query_of_all_resumes_in_total_order() -> None:
    after = "k"
    query = _query({"kind": "all"}, {"after": after})
    names = [b.name for b in BRACKETS]
    later = [name for name in names[names.index("string") :] if name != "array"]
    assert query.filter == {
        "$and": [
            {"_v": 1},
            {"_id": {"$type": _types(*later), "$not": {"$lte": "k"}}},
        ]
    }


def test_batch_query_of_a_range() -> None:
    low, high = 10, Int64(2000)
    scope = IdRange("number", low, high).to_scope()
    assert _query(scope, {}).filter == {"$and": [MATCH, range_filter(IdRange("number", low, high))]}
    resumed = _query(scope, {"after": 42}).filter
    assert resumed == {
        "$and": [MATCH, range_filter(IdRange("number", low, high)), keyset_filter(42)]
    }
    nan = _query(scope, {"after": float("nan")}).filter["$and"][2]
    assert "$not" in nan["_id"]  # NaN-safe keyset


def test_batch_query_of_the_rest() -> None:
    scope = {"kind": "rest", "except": ["number", "objectId"]}
    start = _query(scope, {}).filter
    assert start == {"$and": [MATCH, P.scope_filter(scope)]}
    after_string = _query(scope, {"after": "zz"}).filter["$and"][1]["_id"]
    assert after_string["$not"] == {"$lte": "zz"}
    assert after_string["$type"] == _types("string", "object", "binData", "bool", "date",
                                           "timestamp", "regex", "code", "maxKey")  # fmt: skip


def test_rest_cursor_on_a_null_id_is_a_cursor() -> None:
    scope = {"kind": "rest", "except": ["objectId"]}
    condition = _query(scope, {"after": None}).filter["$and"][1]["_id"]
    assert condition["$not"] == {"$lte": None}
    assert condition["$type"][0] == "null"  # from the null bracket on, not from the start


def test_rest_cursor_past_its_last_bracket_matches_nothing() -> None:
    everything_but_minkey = [b.name for b in BRACKETS if b.name != "minKey"]
    scope = {"kind": "rest", "except": everything_but_minkey}
    assert _query(scope, {"after": MaxKey()}).filter["$and"][1] == {"_id": {"$in": []}}
    condition = _query(scope, {"after": MinKey()}).filter["$and"][1]["_id"]
    assert condition["$type"] == ["minKey"]


def test_batch_query_drops_empty_parts_and_checks_the_limit() -> None:
    scope = IdRange("string", "m").to_scope()
    assert _query(scope, {}, match={}).filter == range_filter(IdRange("string", "m"))
    with pytest.raises(ConfigInvalidError):
        P.batch_query({"kind": "all"}, {}, limit=0, match={}, hint=None)


def test_batch_query_never_mutates_its_inputs() -> None:
    match = {"_v": 1}
    scope = {"kind": "rest", "except": ["number"]}
    cursor = {"after": 7}
    P.batch_query(scope, cursor, limit=5, match=match, hint=None)
    assert match == {"_v": 1}
    assert scope == {"kind": "rest", "except": ["number"]}
    assert cursor == {"after": 7}


# ─── cursors ──────────────────────────────────────────────────────────────────


def test_advance_moves_after_a_full_batch_and_stops_after_a_short_one() -> None:
    docs = [{"_id": i} for i in range(3)]
    assert P.advance({}, docs, limit=3) == {"after": 2}
    assert P.advance({"after": -1}, docs, limit=4) is None
    assert P.advance({"after": 2}, [], limit=3) is None
    assert P.advance({}, docs, limit=3, left=[1]) == {"after": 2}


def test_past_moves_just_past_a_prefix() -> None:
    docs = [{"_id": "a"}, {"_id": "b"}]
    assert P.past({}, docs[:1]) == {"after": "a"}
    assert P.past({"after": "0"}, docs, left=["b"]) == {"after": "b"}
    assert P.past({"after": "0"}, []) == {"after": "0"}


# ─── plan assembly ────────────────────────────────────────────────────────────


def test_partition_budget() -> None:
    assert partition_budget(0, 8) == 1
    assert partition_budget(2 * MIN_PARTITION_DOCS - 1, 8) == 1
    assert partition_budget(2 * MIN_PARTITION_DOCS, 8) == 2
    assert partition_budget(10**9, 8) == 8
    assert partition_budget(100_000, 16, 40_000) == 2  # update mode: 4 batches of 10,000
    assert partition_budget(79_999, 16, 40_000) == 1


def test_sample_pipeline_lets_the_server_sort() -> None:
    pipeline = sample_pipeline({"_v": 1}, 100)
    assert pipeline == [
        {"$match": {"_v": 1}},
        {"$sample": {"size": 100}},
        {"$project": {"_id": 1, "t": {"$type": "$_id"}}},
        {"$sort": {"_id": 1}},
    ]


def test_one_bracket_splits_into_at_most_max_ranges_plus_the_rest() -> None:
    oids = _oids(1000)
    scopes = scopes_from_sample(_rows(oids, "objectId"), max_partitions=8)
    ranges = [IdRange.from_scope(s) for s in scopes[:-1]]
    assert len(ranges) == 8
    assert scopes[-1] == {"kind": "rest", "except": ["objectId"]}
    assert ranges[0].lower is None and ranges[-1].upper is None
    for before, after in itertools.pairwise(ranges):
        assert before.upper == after.lower
    # evenly spaced: each range holds about an eighth of the sample
    cuts = [oids.index(r.lower) for r in ranges[1:]]
    sizes = [b - a for a, b in zip([0, *cuts], [*cuts, 1000], strict=True)]
    assert max(sizes) - min(sizes) <= 2


def test_mixed_sample_splits_every_bracket_and_rests_the_others() -> None:
    rows = [
        *_rows(list(range(300)), "int"),
        *_rows([f"s{i:04}" for i in range(100)], "string"),
        *_rows([Binary(uuid.UUID(int=i).bytes, 4) for i in range(1, 200)], "binData"),
        *_rows(_oids(400), "objectId"),
        {"_id": None, "t": "null"},
        {"_id": True, "t": "bool"},
    ]
    scopes = scopes_from_sample(rows, max_partitions=10)
    assert len(scopes) <= 11
    kinds = [s["kind"] for s in scopes]
    assert kinds[-1] == "rest" and set(kinds[:-1]) == {"id-range"}
    # the string bracket (a tenth of the sample) is not worth a range of its own
    split = ["number", "binData", "objectId"]
    assert scopes[-1]["except"] == split
    brackets = [s["bracket"] for s in scopes[:-1]]
    assert brackets == sorted(brackets, key=split.index)  # server bracket order
    assert all(brackets.count(b) >= 2 for b in split)
    assert len(scopes) == 11


def test_rare_brackets_in_the_sample_go_to_the_rest() -> None:
    rows = [
        {"_id": None, "t": "null"},
        *_rows([datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)], "date"),
        *_rows(_oids(50), "objectId"),
    ]
    # The date bracket's one point could cut it in two, but the budget is small:
    # all of it goes to the ObjectIds, and null and date go to the rest.
    scopes = scopes_from_sample(rows, max_partitions=3)
    assert [s["kind"] for s in scopes] == ["id-range"] * 3 + ["rest"]
    assert {s["bracket"] for s in scopes[:-1]} == {"objectId"}
    assert scopes[-1]["except"] == ["objectId"]


def test_a_sample_with_nothing_to_split_is_one_partition() -> None:
    assert scopes_from_sample([], max_partitions=8) == [{"kind": "all"}]
    unsplittable: list[dict[str, Any]] = [{"_id": None, "t": "null"}, {"_id": False, "t": "bool"}]
    assert scopes_from_sample(unsplittable, max_partitions=8) == [{"kind": "all"}]
    assert scopes_from_sample(_rows(_oids(100), "objectId"), max_partitions=1) == [{"kind": "all"}]


def test_sampled_duplicates_and_nan_are_no_split_points() -> None:
    rows = _rows([float("nan"), 1, 1.0, Int64(1), Decimal128("1"), 2], "double")
    scopes = scopes_from_sample(rows, max_partitions=8)
    ranges = [IdRange.from_scope(s) for s in scopes[:-1]]
    assert [(r.lower, r.upper) for r in ranges] == [(None, 1), (1, 2), (2, None)]


def test_scopes_are_bson_ready() -> None:
    from bson import decode, encode

    rows = [*_rows(_oids(20), "objectId"), *_rows(["a", "b", "c"], "string")]
    for scope in scopes_from_sample(rows, max_partitions=4):
        assert decode(encode(scope)) == scope


def test_malformed_sample_rows_are_refused() -> None:
    with pytest.raises(ConfigInvalidError):
        scopes_from_sample([{"_id": 1}], max_partitions=4)
    with pytest.raises(ConfigInvalidError):
        scopes_from_sample(_rows(["a"], "int"), max_partitions=4)


def test_small_brackets_leave_the_budget_to_the_large_one() -> None:
    rows = [
        *_rows(["only"], "string"),
        *_rows(_oids(50), "objectId"),
        *_rows([datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)], "date"),
    ]
    scopes = scopes_from_sample(rows, max_partitions=3)
    assert [s.get("bracket") for s in scopes[:-1]] == ["objectId"] * 3
    assert scopes[-1] == {"kind": "rest", "except": ["objectId"]}
