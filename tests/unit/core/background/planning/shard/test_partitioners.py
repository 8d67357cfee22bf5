"""Shard facts and the shard-aware partitioner's pure parts, over recorded config documents.

No server: ``config.collections`` / ``config.chunks`` documents as MongoDB 6.0,
7.0 and 8.0 (and 4.4) return them (:mod:`tests.support.shard_shapes`) are read into
facts and planned; batch queries, cursors, write filters and staleness are
checked as data.
"""

from __future__ import annotations

import itertools
import math
import random
import re
from collections.abc import Sequence
from typing import Any

import pytest
from bson import Decimal128, Int64, MaxKey, MinKey, Regex

from migronaut_core.background.planning.keyorder import compare_keys, key_sort
from migronaut_core.background.planning.partition import MIN_PARTITION_DOCS, Partitioner, Refusal
from migronaut_core.background.planning.shard import (
    JUMBO_WEIGHT,
    MAX_LEFT,
    SHARD_SCOPE_KIND,
    Chunk,
    KeyedIdRangePartitioner,
    Sharding,
    ShardKey,
    ShardPartitioner,
    chunk_filter,
    chunk_scopes,
    chunks_from,
    runs_of,
    sampled_scopes,
    sharded_version_index_key,
    sharding_from,
    targeting_filter,
)
from migronaut_core.errors import ConfigInvalidError, ShardMetadataError
from tests.support import shard_shapes as shapes

# ─── helpers ──────────────────────────────────────────────────────────────────


def _chunks(doc: dict[str, Any], chunk_docs: list[dict[str, Any]]) -> tuple[Sharding, list[Chunk]]:
    sharding = sharding_from(doc)
    assert sharding is not None
    return sharding, chunks_from(chunk_docs, sharding.key)


def _assert_tiles(scopes: Sequence[dict[str, Any]], width: int) -> None:
    """The scopes are contiguous, in order, and cover MinKey..MaxKey exactly once."""
    assert scopes, "no partitions"
    assert all(isinstance(v, MinKey) for v in scopes[0]["min"])
    assert all(isinstance(v, MaxKey) for v in scopes[-1]["max"])
    for scope in scopes:
        assert scope["kind"] == SHARD_SCOPE_KIND
        assert len(scope["min"]) == len(scope["max"]) == width
        assert compare_keys(scope["min"], scope["max"]) < 0
    for a, b in itertools.pairwise(scopes):
        assert compare_keys(a["max"], b["min"]) == 0


def _partitioner(sharding: Sharding, chunks: list[Chunk], *, source: int = 1) -> ShardPartitioner:
    return ShardPartitioner(sharding, field="_v", source=source, chunks=lambda: chunks)


def _hint(sharding: Sharding) -> list[tuple[str, Any]]:
    return sharded_version_index_key("_v", sharding.key)


# ─── facts from config.collections ───────────────────────────────────────────


def test_a_60_hashed_collection_reads_as_sharded_by_uuid() -> None:
    sharding = sharding_from(shapes.USERS_60)
    assert sharding is not None
    assert sharding.namespace == "app.users"
    assert sharding.key == ShardKey((("userId", "hashed"),))
    assert sharding.key.hashed
    assert sharding.epoch == {
        "epoch": shapes.USERS_60["lastmodEpoch"],
        "timestamp": shapes.USERS_60["timestamp"],
    }
    assert sharding.chunks_by_uuid
    assert chunk_filter(sharding) == {"uuid": shapes.USERS_UUID}


def test_a_70_compound_ranged_key_keeps_its_field_order() -> None:
    sharding = sharding_from(shapes.ORDERS_70)
    assert sharding is not None
    assert sharding.key.names == ("region", "customerId")
    assert not sharding.key.hashed
    assert sharding.key.to_document() == {"region": 1, "customerId": 1}


def test_an_80_unsplittable_collection_is_not_sharded() -> None:
    assert sharding_from(shapes.LOGS_80) is None
    # …but an 8.0 collection sharded on a hashed _id is.
    sharding = sharding_from(shapes.EVENTS_80)
    assert sharding is not None and sharding.key.names == ("_id",)


def test_no_document_or_a_dropped_one_is_not_sharded() -> None:
    assert sharding_from(None) is None
    assert sharding_from({**shapes.USERS_44, "dropped": True}) is None
    assert sharding_from({"_id": "app.x", "uuid": shapes.USERS_UUID}) is None


def test_before_50_chunks_are_found_by_namespace() -> None:
    sharding = sharding_from(shapes.USERS_44)
    assert sharding is not None
    assert not sharding.chunks_by_uuid
    assert chunk_filter(sharding) == {"ns": "app.users"}
    assert sharding.epoch == {"epoch": shapes.USERS_44["lastmodEpoch"]}
    chunks = chunks_from(shapes.USERS_44_CHUNKS, sharding.key)
    assert [chunk.shard for chunk in chunks] == ["rs0", "rs1"]


@pytest.mark.parametrize(
    "key",
    [
        {},
        {"a": -1},
        {"a": "2d"},
        {"a": "hashed", "b": "hashed"},
        {"$a": 1},
        [("a", 1)],
        {"a": True},
    ],
)
def test_a_malformed_key_is_refused(key: Any) -> None:
    with pytest.raises(ConfigInvalidError):
        ShardKey.from_document(key)


def test_a_reshard_changes_the_epoch() -> None:
    before = sharding_from(shapes.ORDERS_70)
    after = sharding_from(shapes.ORDERS_70_RESHARDED)
    assert before is not None and after is not None
    assert before.epoch != after.epoch
    assert after.key.names == ("customerId",)
    assert chunk_filter(after) == {"uuid": shapes.RESHARDED_UUID}


# ─── chunks ───────────────────────────────────────────────────────────────────


def test_chunks_are_put_in_key_order_whatever_order_they_come_in() -> None:
    _sharding, chunks = _chunks(shapes.USERS_60, list(reversed(shapes.USERS_60_CHUNKS)))
    assert [chunk.shard for chunk in chunks] == [
        "shard0", "shard0", "shard1", "shard1", "shard2", "shard2",
    ]  # fmt: skip
    assert isinstance(chunks[0].min[0], MinKey)
    assert isinstance(chunks[-1].max[0], MaxKey)
    assert "Int64" not in repr(chunks[1]) and "shard0" in repr(chunks[1])  # no bounds in logs


def test_jumbo_chunks_are_flagged_and_weigh_more() -> None:
    _, chunks = _chunks(shapes.ORDERS_70, shapes.ORDERS_70_CHUNKS)
    assert [chunk.jumbo for chunk in chunks] == [False, False, True, False, False, False]
    assert chunks[2].weight == JUMBO_WEIGHT and chunks[0].weight == 1.0


@pytest.mark.parametrize(
    "mangle",
    [
        lambda docs: [],
        lambda docs: docs[1:],  # starts past MinKey
        lambda docs: docs[:-1],  # stops before MaxKey
        lambda docs: [docs[0], *docs[2:]],  # a gap
        lambda docs: [*docs, docs[3]],  # an overlap
    ],
)
def test_chunks_that_do_not_tile_the_key_space_are_retryable_errors(mangle: Any) -> None:
    sharding = sharding_from(shapes.USERS_60)
    assert sharding is not None
    with pytest.raises(ShardMetadataError) as raised:
        chunks_from(mangle(list(shapes.USERS_60_CHUNKS)), sharding.key)
    assert raised.value.retryable


def test_chunk_bounds_of_another_key_are_refused() -> None:
    refined = ShardKey.from_document({"userId": "hashed", "ts": 1})
    with pytest.raises(ShardMetadataError):
        chunks_from(shapes.USERS_60_CHUNKS, refined)


# ─── planning along chunks ────────────────────────────────────────────────────


def test_runs_group_consecutive_chunks_of_one_shard() -> None:
    _, chunks = _chunks(shapes.USERS_60, shapes.USERS_60_CHUNKS)
    assert [[c.shard for c in run] for run in runs_of(chunks)] == [
        ["shard0", "shard0"], ["shard1", "shard1"], ["shard2", "shard2"],
    ]  # fmt: skip


def test_every_run_gets_a_partition_and_its_group() -> None:
    _, chunks = _chunks(shapes.USERS_60, shapes.USERS_60_CHUNKS)
    scopes, degraded = chunk_scopes(chunks, parts=1, max_partitions=16)
    assert degraded is None
    assert [scope["group"] for scope in scopes] == ["shard0", "shard1", "shard2"]
    assert [scope["chunks"] for scope in scopes] == [2, 2, 2]
    _assert_tiles(scopes, 1)


def test_runs_are_cut_at_chunk_boundaries_up_to_the_budget() -> None:
    _, chunks = _chunks(shapes.USERS_60, shapes.USERS_60_CHUNKS)
    scopes, _ = chunk_scopes(chunks, parts=6, max_partitions=16)
    assert len(scopes) == 6
    assert [scope["group"] for scope in scopes] == [c.shard for c in chunks]
    _assert_tiles(scopes, 1)
    # Never finer than the chunks: the budget is capped by what they allow.
    more, _ = chunk_scopes(chunks, parts=12, max_partitions=16)
    assert len(more) == 6


def test_a_jumbo_chunk_stands_alone() -> None:
    chunk_docs = shapes.ranged_chunks(
        shapes.EVENTS_UUID, "tenant", [10, 20, 30, 40], ["s0"] * 5, jumbo=frozenset({2})
    )
    sharding = sharding_from(shapes.collection_doc("app.t", shapes.EVENTS_UUID, {"tenant": 1}))
    assert sharding is not None
    chunks = chunks_from(chunk_docs, sharding.key)
    scopes, _ = chunk_scopes(chunks, parts=3, max_partitions=16)
    assert [scope["chunks"] for scope in scopes] == [2, 1, 2]
    assert scopes[1]["min"] == [20] and scopes[1]["max"] == [30]
    _assert_tiles(scopes, 1)


def test_a_compound_key_with_a_jumbo_chunk_is_planned_per_shard() -> None:
    _, chunks = _chunks(shapes.ORDERS_70, shapes.ORDERS_70_CHUNKS)
    scopes, degraded = chunk_scopes(chunks, parts=4, max_partitions=16)
    assert degraded is None
    assert [scope["group"] for scope in scopes].count("shA") == 3
    assert [scope["group"] for scope in scopes].count("shB") == 1
    # shA's run [1, 1, jumbo, 1] in three: the jumbo chunk (weight 2) gets its own.
    assert [scope["chunks"] for scope in scopes if scope["group"] == "shA"] == [2, 1, 1]
    _assert_tiles(scopes, 2)


def test_many_tiny_chunks_in_long_runs_are_merged_per_shard() -> None:
    points = list(range(1, 300))
    shards = ["s0"] * 100 + ["s1"] * 100 + ["s2"] * 100
    sharding = sharding_from(shapes.collection_doc("app.t", shapes.EVENTS_UUID, {"n": 1}))
    assert sharding is not None
    chunks = chunks_from(
        shapes.ranged_chunks(shapes.EVENTS_UUID, "n", points, shards), sharding.key
    )
    scopes, degraded = chunk_scopes(chunks, parts=16, max_partitions=16)
    assert degraded is None
    assert len(scopes) == 16
    by_group = {g: sum(s["chunks"] for s in scopes if s["group"] == g) for g in ("s0", "s1", "s2")}
    assert by_group == {"s0": 100, "s1": 100, "s2": 100}
    for group in ("s0", "s1", "s2"):
        sizes = [scope["chunks"] for scope in scopes if scope["group"] == group]
        assert max(sizes) - min(sizes) <= 1  # balanced within a shard
    _assert_tiles(scopes, 1)


def test_more_runs_than_max_partitions_degrade_to_ungrouped_blocks() -> None:
    points = list(range(1, 300))
    shards = [f"s{n % 3}" for n in range(300)]  # scattered by the balancer
    sharding = sharding_from(shapes.collection_doc("app.t", shapes.EVENTS_UUID, {"n": 1}))
    assert sharding is not None
    chunks = chunks_from(
        shapes.ranged_chunks(shapes.EVENTS_UUID, "n", points, shards), sharding.key
    )
    scopes, degraded = chunk_scopes(chunks, parts=4, max_partitions=16)
    assert degraded == "ungrouped"
    assert len(scopes) == 16
    assert all("group" not in scope for scope in scopes)  # every block spans shards
    assert sum(scope["chunks"] for scope in scopes) == 300
    _assert_tiles(scopes, 1)


# ─── planning by samples ──────────────────────────────────────────────────────


def test_one_coarse_chunk_is_cut_at_sampled_values() -> None:
    _, chunks = _chunks(shapes.EVENTS_70, shapes.EVENTS_70_CHUNKS)
    rng = random.Random(7)
    samples = [(rng.randrange(10_000),) for _ in range(1000)]
    scopes = sampled_scopes(chunks, samples, parts=8)
    assert len(scopes) == 8
    assert {scope["group"] for scope in scopes} == {"shard0"}
    _assert_tiles(scopes, 1)
    cuts = [scope["min"][0] for scope in scopes[1:]]
    assert cuts == sorted(cuts)
    assert 800 < cuts[0] < 1700  # about an eighth of the way


def test_samples_are_shared_out_by_chunk_and_stay_inside_their_chunk() -> None:
    sharding = sharding_from(shapes.collection_doc("app.t", shapes.EVENTS_UUID, {"n": 1}))
    assert sharding is not None
    chunks = chunks_from(
        shapes.ranged_chunks(shapes.EVENTS_UUID, "n", [100], ["s0", "s1"]), sharding.key
    )
    samples = [(n,) for n in range(0, 100)] + [(n,) for n in range(100, 400)]
    scopes = sampled_scopes(chunks, samples, parts=8)
    assert [scope["group"] for scope in scopes].count("s1") > 4  # three times the samples
    assert any(scope["min"] == [100] for scope in scopes)  # the chunk boundary stays a bound
    _assert_tiles(scopes, 1)


def test_a_low_cardinality_key_yields_fewer_cuts_and_never_a_nan() -> None:
    _, chunks = _chunks(shapes.EVENTS_70, shapes.EVENTS_70_CHUNKS)
    samples = [("a",)] * 500 + [("b",)] * 500 + [(math.nan,)] * 10 + [(Decimal128("NaN"),)]
    scopes = sampled_scopes(chunks, samples, parts=8)
    assert [scope["min"][0] for scope in scopes[1:]] == ["a", "b"]
    _assert_tiles(scopes, 1)


def test_hashed_keys_are_cut_at_sampled_hashes() -> None:
    _, chunks = _chunks(shapes.USERS_60, shapes.USERS_60_CHUNKS)
    rng = random.Random(3)
    samples = [(Int64(rng.randrange(-(2**63), 2**63)),) for _ in range(2000)]
    scopes = sampled_scopes(chunks, samples, parts=16)
    assert len(scopes) == 16
    assert [scope["group"] for scope in scopes].count("shard0") >= 4
    _assert_tiles(scopes, 1)


# ─── the partitioner: plans, reads, cursors, writes, staleness ───────────────


def test_the_shard_partitioner_satisfies_the_protocol() -> None:
    sharding, chunks = _chunks(shapes.USERS_60, shapes.USERS_60_CHUNKS)
    partitioner: Partitioner = _partitioner(sharding, chunks)
    assert partitioner.id == "shard"
    keyed: Partitioner = KeyedIdRangePartitioner(sharding.key)
    assert keyed.id == "id-range"


def test_the_sharded_version_index_carries_the_key() -> None:
    users = sharding_from(shapes.USERS_60)
    orders = sharding_from(shapes.ORDERS_70)
    events = sharding_from(shapes.EVENTS_80)
    assert users is not None and orders is not None and events is not None
    assert sharded_version_index_key("_v", users.key) == [
        ("_v", 1), ("userId", "hashed"), ("_id", 1),
    ]  # fmt: skip
    assert sharded_version_index_key("v", orders.key) == [
        ("v", 1), ("region", 1), ("customerId", 1), ("_id", 1),
    ]  # fmt: skip
    assert sharded_version_index_key("_v", events.key) == [("_v", 1), ("_id", "hashed")]


def test_a_hashed_chunk_is_read_by_index_bounds_from_every_shard() -> None:
    sharding, chunks = _chunks(shapes.USERS_60, shapes.USERS_60_CHUNKS)
    partitioner = _partitioner(sharding, chunks)
    scope = {"kind": SHARD_SCOPE_KIND, "min": [Int64(0)], "max": [Int64(2**62)], "group": "shard2"}
    query = partitioner.batch_query(scope, {}, limit=100, match={"_v": 1}, hint=_hint(sharding))
    assert query.filter == {"_v": 1}  # no filter can bound a hash
    assert query.min == {"_v": 1, "userId": Int64(0), "_id": MinKey()}
    assert query.max == {"_v": 1, "userId": Int64(2**62), "_id": MinKey()}
    assert query.sort == [] and query.limit == 100
    assert query.hint == _hint(sharding)


def test_a_ranged_chunk_is_targeted_by_a_filter_on_its_bounds() -> None:
    sharding = sharding_from(shapes.USERS_44)
    assert sharding is not None
    chunks = chunks_from(shapes.USERS_44_CHUNKS, sharding.key)
    partitioner = _partitioner(sharding, chunks, source=0)
    scope = {"kind": SHARD_SCOPE_KIND, "min": [500], "max": [900]}
    query = partitioner.batch_query(
        scope, {"left": [7, 8]}, limit=10, match={"_v": None}, hint=_hint(sharding)
    )
    assert query.filter == {
        "$and": [{"_v": None}, {"userId": {"$gte": 500, "$lt": 900}}, {"_id": {"$nin": [7, 8]}}]
    }
    # Version 0 (documents without the field) reads the null index keys.
    assert query.min == {"_v": None, "userId": 500, "_id": MinKey()}


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        ((MinKey(),), (5,), {}),  # MinKey: any type below 5 is in the range
        ((5,), (MaxKey(),), {}),
        ((5,), ("x",), {}),  # two brackets: numbers >= 5, strings < "x", and between
        ((math.nan,), (5,), {}),
        ((5,), (9.5,), {"k": {"$gte": 5, "$lt": 9.5}}),
        ((None,), (None,), {}),  # null is never a bracket to bound
    ],
)
def test_targeting_filters_never_lose_documents_of_other_types(
    low: tuple[Any, ...], high: tuple[Any, ...], expected: dict[str, Any]
) -> None:
    assert targeting_filter(ShardKey((("k", 1),)), low, high) == expected


def test_a_compound_key_is_targeted_by_its_leading_field() -> None:
    key = ShardKey((("region", 1), ("customerId", 1)))
    assert targeting_filter(key, ("eu", 1000), ("eu", 5000)) == {
        "region": {"$gte": "eu", "$lte": "eu"}
    }
    assert targeting_filter(key, ("ap", MinKey()), ("eu", MinKey())) == {
        "region": {"$gte": "ap", "$lt": "eu"}
    }
    hashed_first = ShardKey((("h", "hashed"), ("b", 1)))
    assert targeting_filter(hashed_first, (Int64(1), 1), (Int64(5), 1)) == {}


def test_batch_queries_refuse_foreign_scopes_hints_and_limits() -> None:
    sharding, chunks = _chunks(shapes.USERS_60, shapes.USERS_60_CHUNKS)
    partitioner = _partitioner(sharding, chunks)
    good = {"kind": SHARD_SCOPE_KIND, "min": [MinKey()], "max": [MaxKey()]}
    with pytest.raises(ConfigInvalidError):
        partitioner.batch_query({"kind": "all"}, {}, limit=5, match={}, hint=_hint(sharding))
    with pytest.raises(ConfigInvalidError):
        partitioner.batch_query(
            {**good, "min": [1, 2]}, {}, limit=5, match={}, hint=_hint(sharding)
        )
    with pytest.raises(ConfigInvalidError):
        partitioner.batch_query(good, {}, limit=5, match={}, hint=[("_v", 1), ("_id", 1)])
    with pytest.raises(ConfigInvalidError):
        partitioner.batch_query(good, {}, limit=5, match={}, hint=None)
    with pytest.raises(ConfigInvalidError):
        partitioner.batch_query(good, {}, limit=0, match={}, hint=_hint(sharding))


def test_a_partition_drains_and_steps_over_what_it_left() -> None:
    sharding, chunks = _chunks(shapes.USERS_60, shapes.USERS_60_CHUNKS)
    partitioner = _partitioner(sharding, chunks)
    full = [{"_id": n} for n in range(10)]
    assert partitioner.advance({}, full, limit=10) == {"left": []}
    assert partitioner.advance({}, full, limit=10, left=[3]) == {"left": [3]}
    assert partitioner.advance({"left": [3]}, full, limit=10, left=[9]) == {"left": [3, 9]}
    assert partitioner.advance({"left": [3]}, full[:4], limit=10) is None  # a short batch: drained
    assert partitioner.past({}, full[:2]) == {}
    assert partitioner.past({"left": [1]}, full[:2], left=[2]) == {"left": [1, 2]}


def test_a_partition_that_left_too_many_ends_for_the_next_pass() -> None:
    sharding, chunks = _chunks(shapes.USERS_60, shapes.USERS_60_CHUNKS)
    partitioner = _partitioner(sharding, chunks)
    cursor = {"left": list(range(MAX_LEFT))}
    full = [{"_id": n} for n in range(10)]
    assert partitioner.advance(cursor, full, limit=10, left=[]) == cursor
    assert partitioner.advance(cursor, full, limit=10, left=["one more"]) is None


def test_writes_carry_the_shard_key_values() -> None:
    sharding = sharding_from(shapes.ORDERS_70)
    assert sharding is not None
    partitioner = _partitioner(sharding, [])
    assert partitioner.write_filter({"_id": 1, "region": "eu", "customerId": 42}) == {
        "region": "eu",
        "customerId": 42,
    }
    # A missing field is null to the shard key.
    assert partitioner.write_filter({"_id": 1, "region": "eu"}) == {
        "region": "eu",
        "customerId": None,
    }


def test_write_filters_follow_dotted_paths_and_never_read_a_value_as_a_condition() -> None:
    key = ShardKey((("user.id", 1), ("tag", 1), ("_id", "hashed")))
    keyed = KeyedIdRangePartitioner(key)
    doc = {"_id": 5, "user": {"id": 9}, "tag": Regex("^a")}
    assert keyed.write_filter(doc) == {"user.id": 9, "tag": {"$eq": Regex("^a")}}
    assert keyed.write_filter({"_id": 5, "user": 3, "tag": {"$gt": 1}}) == {
        "user.id": None,
        "tag": {"$eq": {"$gt": 1}},
    }


def test_a_transform_that_changes_a_shard_key_field_is_refused() -> None:
    sharding = sharding_from(shapes.ORDERS_70)
    assert sharding is not None
    partitioner = _partitioner(sharding, [])
    before = {"_id": 1, "region": "eu", "customerId": 42, "name": "x"}
    assert partitioner.check_transform(before, {**before, "name": "y"}) is None
    for after in (
        {**before, "region": "us"},
        {**before, "customerId": Int64(42)},  # BSON-exact: another type is another value
        {key: value for key, value in before.items() if key != "customerId"},
    ):
        refusal = partitioner.check_transform(before, after)
        assert isinstance(refusal, Refusal)
        assert refusal.reason == "shard-key"
        assert "eu" not in refusal.message and "42" not in refusal.message
    keyed = KeyedIdRangePartitioner(sharding.key)
    assert keyed.check_transform(before, {**before, "region": "us"}) is not None


def test_a_plan_is_stale_after_a_reshard() -> None:
    sharding, chunks = _chunks(shapes.ORDERS_70, shapes.ORDERS_70_CHUNKS)
    partitioner = _partitioner(sharding, chunks)
    assert not partitioner.stale(dict(sharding.epoch))
    resharded = sharding_from(shapes.ORDERS_70_RESHARDED)
    assert resharded is not None
    assert partitioner.stale(resharded.epoch)
    assert _partitioner(resharded, []).stale(sharding.epoch)
    assert partitioner.stale(None)  # a plan made by another partitioner
    assert not KeyedIdRangePartitioner(sharding.key).stale(None)


def test_scope_filters_are_exact_expressions() -> None:
    sharding, chunks = _chunks(shapes.USERS_60, shapes.USERS_60_CHUNKS)
    expr = _partitioner(sharding, chunks).scope_filter(
        {"kind": SHARD_SCOPE_KIND, "min": [MinKey()], "max": [Int64(0)]}
    )
    values = [{"$toHashedIndexKey": {"$ifNull": ["$userId", None]}}]
    assert expr == {
        "$expr": {
            "$and": [
                {"$gte": [values, {"$literal": [MinKey()]}]},
                {"$lt": [values, {"$literal": [Int64(0)]}]},
            ]
        }
    }


def test_the_partitioner_budget_is_sized_like_the_id_partitioner() -> None:
    assert MIN_PARTITION_DOCS == 1_000  # plan sizes in tests/integration rely on it


# ─── the server's order ───────────────────────────────────────────────────────


def test_key_order_follows_the_server_across_types() -> None:
    import datetime
    import uuid

    from bson import ObjectId, Timestamp
    from bson.binary import Binary

    expected = [
        MinKey(),
        None,
        math.nan,
        -5,
        Int64(-1),
        0.5,
        Decimal128("2"),
        3,
        "B",
        "a",
        "ab",
        "é",
        {"a": 1},
        {"a": 1, "b": 0},
        {"b": 0},  # element types compare before field names
        {"a": "x"},
        Binary(b"zz", 0),
        Binary(b"aaa", 0),
        Binary(b"aaa", 5),
        uuid.UUID(int=1),
        ObjectId("000000000000000000000001"),
        ObjectId("ffffffffffffffffffffffff"),
        False,
        True,
        datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC),
        datetime.datetime(2021, 1, 1, tzinfo=datetime.UTC),
        Timestamp(1, 2),
        Timestamp(2, 1),
        re.compile("a"),
        MaxKey(),
    ]
    shuffled = list(expected)
    random.Random(11).shuffle(shuffled)
    ordered = sorted(((v,) for v in shuffled), key=key_sort)
    assert [repr(v[0]) for v in ordered] == [repr(v) for v in expected]
    assert compare_keys((1,), (1.0,)) == 0 and compare_keys((Int64(2),), (Decimal128("2"),)) == 0
