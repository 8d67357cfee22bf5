"""The id-range partitioner against a real server: plans reach every document once.

Each test plans a pass over a real collection, then scans every partition the
way a lane does (``batch_query`` → ``find`` → ``advance``, or ``past`` after a
processed prefix) and checks that every matching document was read exactly
once — across type brackets, brackets the sample missed, a version filter, a
timed-out sample — and that a batch is one ordered scan of the version index.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
import random
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from bson import Decimal128, Int64, MaxKey, MinKey, ObjectId, Timestamp
from bson.binary import Binary
from pymongo import MongoClient
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import OperationFailure

from migronaut_core.background.planning.partition import (
    IdRangePartitioner,
    PartitionSettings,
    Plan,
    find,
)
from migronaut_core.bson_values import canonical_id_key
from migronaut_core.versioning import version_filter

UTC = datetime.UTC
P = IdRangePartitioner()
MATCH = version_filter("_v", 1)
VERSION_INDEX = [("_v", 1), ("_id", 1)]
SETTINGS = PartitionSettings(max_partitions=8, sample_size=1_000, sample_timeout_ms=30_000)
BATCH = 500

Doc = dict[str, Any]


def _object_ids(count: int) -> list[ObjectId]:
    return [ObjectId() for _ in range(count)]


def _insert(collection: Collection[Doc], ids: list[Any], version: int | None = 1) -> None:
    docs = [{"_id": i} if version is None else {"_id": i, "_v": version} for i in ids]
    for start in range(0, len(docs), 5_000):
        collection.insert_many(docs[start : start + 5_000], ordered=False)


def _plan(collection: Collection[Doc], **overrides: Any) -> Plan:
    options: dict[str, Any] = {
        "match": MATCH,
        "hint": None,
        "max_parallel": 4,
        "settings": SETTINGS,
    }
    options.update(overrides)
    return P.plan(collection, **options)


def _scan(
    collection: Collection[Doc],
    plan: Plan,
    *,
    match: dict[str, Any] = MATCH,
    hint: Any = None,
    rng: random.Random | None = None,
    limit: int = BATCH,
) -> Counter[str]:
    """Read every partition like a lane; with ``rng``, process random prefixes of batches."""
    seen: Counter[str] = Counter()
    for scope in plan.partitions:
        cursor: dict[str, Any] = {}
        for _ in range(100_000):
            query = P.batch_query(scope, cursor, limit=limit, match=match, hint=hint)
            docs = find(collection, query)
            taken = rng.randint(1, len(docs)) if rng is not None and docs else len(docs)
            seen.update(canonical_id_key(doc["_id"]) for doc in docs[:taken])
            if taken < len(docs):
                cursor = P.past(cursor, docs[:taken])
                continue
            following = P.advance(cursor, docs, limit=limit)
            if following is None:
                break
            cursor = following
        else:
            pytest.fail("a partition never drained")
    return seen


def _assert_exactly_once(seen: Counter[str], ids: list[Any]) -> None:
    expected = {canonical_id_key(i) for i in ids}
    assert len(expected) == len(ids)
    missing = expected - set(seen)
    extra = set(seen) - expected
    twice = [key for key, count in seen.items() if count > 1]
    assert (len(missing), len(extra), len(twice)) == (0, 0, 0), (
        sorted(twice)[:5],
        sorted(missing)[:5],
    )


def _mixed_ids() -> list[Any]:
    rng = random.Random(7)
    return [
        *_object_ids(4_000),
        *range(-300, 900),
        *(Int64(2**40 + i * 7) for i in range(300)),
        *(rng.uniform(-1e6, 1e6) for _ in range(300)),
        float("nan"),
        float("inf"),
        float("-inf"),
        Decimal128("1E+30"),
        *(f"key-{i:05}" for i in range(600)),
        "",
        *(Binary(uuid.UUID(int=rng.getrandbits(128)).bytes, 4) for _ in range(500)),
        Binary(b"\x00\x01", 0),
        # rare brackets, a handful of ids each
        *(datetime.datetime(2023, m, 1, tzinfo=UTC) for m in range(1, 4)),
        {"tenant": 1, "seq": 1},
        {"tenant": 2},
        None,
        True,
        False,
        Timestamp(1_700_000_000, 1),
        MinKey(),
        MaxKey(),
    ]


# ─── coverage ─────────────────────────────────────────────────────────────────


def test_object_ids_split_into_balanced_ranges_reached_once(db: Database[Doc]) -> None:
    items = db["items"]
    ids = _object_ids(20_000)
    _insert(items, ids)
    plan = _plan(items)
    assert (plan.method, plan.estimate, plan.at_least, plan.degraded) == (
        "sample",
        20_000,
        False,
        None,
    )
    assert 2 <= len(plan.partitions) <= 8 + 1
    ranges = [scope for scope in plan.partitions if scope["kind"] == "id-range"]
    assert len(ranges) == 8
    assert plan.partitions[-1] == {"kind": "rest", "except": ["objectId"]}
    sizes = [items.count_documents({"$and": [MATCH, P.scope_filter(s)]}) for s in ranges]
    assert all(20_000 / 8 / 2 < size < 20_000 / 8 * 2 for size in sizes)
    _assert_exactly_once(_scan(items, plan), ids)


@pytest.mark.parametrize("prefixes", [False, True], ids=["advance", "past"])
def test_mixed_brackets_are_each_reached_once(db: Database[Doc], prefixes: bool) -> None:
    items = db["items"]
    ids = _mixed_ids()
    _insert(items, ids)
    items.create_index(VERSION_INDEX)
    settings = PartitionSettings(max_partitions=12, sample_size=400, sample_timeout_ms=30_000)
    plan = _plan(items, settings=settings, hint=VERSION_INDEX)
    assert plan.method == "sample"
    assert plan.estimate == len(ids)
    assert plan.partitions[-1]["kind"] == "rest"
    assert {s["bracket"] for s in plan.partitions[:-1]} >= {"objectId", "number"}
    rng = random.Random(11) if prefixes else None
    _assert_exactly_once(_scan(items, plan, hint=VERSION_INDEX, rng=rng), ids)


def test_brackets_the_sample_missed_are_reached(db: Database[Doc]) -> None:
    items = db["items"]
    ids = [*_object_ids(10_000), "needle-a", "needle-b", "needle-c"]
    _insert(items, ids)
    settings = PartitionSettings(max_partitions=4, sample_size=50, sample_timeout_ms=30_000)
    for attempt in range(3):  # three different samples
        plan = _plan(items, settings=settings)
        # the three strings never earn a range of their own: the rest takes them
        assert plan.partitions[-1] == {"kind": "rest", "except": ["objectId"]}, attempt
        assert len(plan.partitions) == 5
        _assert_exactly_once(_scan(items, plan), ids)


@pytest.mark.parametrize("max_parallel", [1, 4])
def test_small_batches_cross_bracket_boundaries(db: Database[Doc], max_parallel: int) -> None:
    items = db["items"]
    ids = _mixed_ids()
    _insert(items, ids)
    settings = PartitionSettings(max_partitions=3, sample_size=100, sample_timeout_ms=30_000)
    plan = _plan(items, settings=settings, max_parallel=max_parallel)
    kinds = [s["kind"] for s in plan.partitions]
    assert kinds == (["all"] if max_parallel == 1 else ["id-range"] * 3 + ["rest"])
    _assert_exactly_once(_scan(items, plan, limit=7), ids)


def test_only_matching_documents_are_read(db: Database[Doc]) -> None:
    items = db["items"]
    current, newer, unstamped = _object_ids(3_000), _object_ids(2_500), _object_ids(2_200)
    _insert(items, current, version=1)
    _insert(items, newer, version=2)
    _insert(items, unstamped, version=None)
    items.create_index(VERSION_INDEX)
    plan = _plan(items, hint=VERSION_INDEX)
    assert (plan.method, plan.estimate) == ("sample", 3_000)
    _assert_exactly_once(_scan(items, plan, hint=VERSION_INDEX), current)
    version_zero = version_filter("_v", 0)
    plan = _plan(items, match=version_zero, hint=VERSION_INDEX)
    assert (plan.method, plan.estimate) == ("sample", 2_200)
    _assert_exactly_once(_scan(items, plan, match=version_zero, hint=VERSION_INDEX), unstamped)


def test_a_capped_count_says_at_least(db: Database[Doc]) -> None:
    items = db["items"]
    ids = _object_ids(6_000)
    _insert(items, ids)
    plan = _plan(items, count_cap=2_500)
    assert (plan.method, plan.estimate, plan.at_least) == ("sample", 2_500, True)
    _assert_exactly_once(_scan(items, plan), ids)


def test_a_large_pass_is_estimated_from_a_random_sample(db: Database[Doc]) -> None:
    """Past ``estimate_above`` matches the plan reads a sample of the collection, not
    every match: every document matches here, so the estimate is the collection's size."""
    items = db["items"]
    ids = _object_ids(40_000)
    _insert(items, ids)
    items.create_index(VERSION_INDEX)
    settings = dataclasses.replace(SETTINGS, estimate_above=5_000)
    plan = _plan(items, hint=VERSION_INDEX, settings=settings)
    assert (plan.method, plan.estimate, plan.at_least) == ("sample", 40_000, False)
    assert plan.approximate
    assert len(plan.partitions) == SETTINGS.max_partitions + 1  # the ranges and the rest
    _assert_exactly_once(_scan(items, plan, hint=VERSION_INDEX), ids)

    single = _plan(items, hint=VERSION_INDEX, settings=settings, max_parallel=1)
    assert (single.method, single.estimate, single.approximate) == ("single", 40_000, True)


def test_a_large_pass_over_a_small_share_is_counted(db: Database[Doc]) -> None:
    """A random sample holds too few matches when they are a small share (10% here,
    about 100 of 1,000 drawn): the plan counts and samples the matches instead."""
    items = db["items"]
    current, newer = _object_ids(4_000), _object_ids(36_000)
    _insert(items, newer, version=2)
    _insert(items, current, version=1)
    items.create_index(VERSION_INDEX)
    settings = dataclasses.replace(SETTINGS, estimate_above=2_000)
    plan = _plan(items, hint=VERSION_INDEX, settings=settings)
    assert (plan.method, plan.estimate, plan.at_least, plan.approximate) == (
        "sample",
        4_000,
        False,
        False,
    )
    _assert_exactly_once(_scan(items, plan, hint=VERSION_INDEX), current)


def test_small_collections_and_one_lane_get_one_partition(db: Database[Doc]) -> None:
    items = db["items"]
    ids: list[Any] = [*_object_ids(40), *range(30), "a", None]
    _insert(items, ids)
    plan = _plan(items)
    assert (plan.method, plan.estimate, plan.partitions) == ("single", 72, [{"kind": "all"}])
    _assert_exactly_once(_scan(items, plan), ids)
    more = _object_ids(5_000)
    _insert(items, more)
    plan = _plan(items, max_parallel=1)
    assert (plan.method, plan.partitions) == ("single", [{"kind": "all"}])
    _assert_exactly_once(_scan(items, plan), ids + more)


def test_an_empty_collection_plans_nothing(db: Database[Doc]) -> None:
    items = db["items"]
    assert _plan(items) == Plan("empty", 0, at_least=False, partitions=[], degraded=None)
    _insert(items, _object_ids(10), version=2)
    assert _plan(items).method == "empty"


# ─── a sample out of time ─────────────────────────────────────────────────────


@contextlib.contextmanager
def _fail_point(client: MongoClient[Doc], name: str, **options: Any) -> Iterator[None]:
    """Switch a server fail point on for the block, and always off after it."""
    try:
        client.admin.command("configureFailPoint", name, **options)
    except OperationFailure as exc:  # pragma: no cover - only on servers without test commands
        pytest.skip(f"the server refuses fail points (code {exc.code})")
    try:
        yield
    finally:
        client.admin.command("configureFailPoint", name, mode="off")


def test_a_timed_out_sample_degrades_to_one_partition(
    db: Database[Doc], mongo_uri: str, caplog: pytest.LogCaptureFixture
) -> None:
    items = db["items"]
    ids = _object_ids(8_000)
    _insert(items, ids)
    app = f"partition-test-{uuid.uuid4().hex[:8]}"
    with MongoClient[Doc](mongo_uri, appname=app) as client:
        mine = client[db.name]["items"]
        fail = {"failCommands": ["aggregate"], "errorCode": 50, "appName": app}
        with (
            caplog.at_level(logging.DEBUG),
            _fail_point(client, "failCommand", mode={"skip": 1}, data=fail),
        ):
            plan = _plan(mine)  # the count is the first aggregate; the sample fails
    assert (plan.method, plan.estimate, plan.at_least) == ("single", 8_000, False)
    assert plan.degraded == "sample-timeout"
    assert plan.partitions == [{"kind": "all"}]
    assert "ran out of its" in caplog.text
    _assert_exactly_once(_scan(items, plan), ids)


def test_a_server_out_of_time_still_plans(
    db: Database[Doc], mongo_client: MongoClient[Doc]
) -> None:
    items = db["items"]
    ids = _object_ids(5_000)
    _insert(items, ids)
    _insert(items, _object_ids(500), version=2)
    with _fail_point(mongo_client, "maxTimeAlwaysTimeOut", mode="alwaysOn"):
        plan = _plan(items)  # both the count and the sample run out of time
    assert (plan.method, plan.degraded, plan.partitions) == (
        "single",
        "sample-timeout",
        [{"kind": "all"}],
    )
    assert plan.estimate == 5_500  # the collection's size stands in for the count
    _assert_exactly_once(_scan(items, plan), ids)


# ─── reading through the version index ────────────────────────────────────────


def _stages(node: Any) -> Iterator[dict[str, Any]]:
    """Yield every plan stage of an explain output, however nested."""
    if isinstance(node, dict):
        if "stage" in node:
            yield node
        for value in node.values():
            yield from _stages(value)
    elif isinstance(node, list):
        for value in node:
            yield from _stages(value)


@pytest.mark.parametrize("version", [1, 0])
def test_batches_are_ordered_scans_of_the_version_index(db: Database[Doc], version: int) -> None:
    items = db["items"]
    ids = [*_object_ids(6_000), *range(2_000), *(f"k{i}" for i in range(10))]
    _insert(items, ids, version=version or None)
    _insert(items, _object_ids(3_000), version=version + 1)
    items.create_index(VERSION_INDEX)
    match = version_filter("_v", version)
    plan = _plan(items, match=match, hint=VERSION_INDEX)
    assert {s["kind"] for s in plan.partitions} == {"id-range", "rest"}
    scopes = [*plan.partitions, {"kind": "all"}]
    for scope, after in [(s, None) for s in scopes] + [(scopes[0], ids[0]), (scopes[-1], 5)]:
        cursor = {} if after is None else {"after": after}
        query = P.batch_query(scope, cursor, limit=BATCH, match=match, hint=VERSION_INDEX)
        explained = items.find(
            query.filter, sort=query.sort, limit=query.limit, hint=query.hint
        ).explain()
        stages = list(_stages(explained["queryPlanner"]["winningPlan"]))
        names = {stage["stage"] for stage in stages}
        assert "IXSCAN" in names, scope["kind"]
        assert {stage.get("indexName") for stage in stages if stage["stage"] == "IXSCAN"} == {
            "_v_1__id_1"
        }
        assert not names & {"SORT", "COLLSCAN"}, (scope["kind"], names)
        # tight index bounds: the scan reads little more than it returns
        assert explained["executionStats"]["totalKeysExamined"] <= query.limit + 30, scope["kind"]
    _assert_exactly_once(_scan(items, plan, match=match, hint=VERSION_INDEX), ids)


def test_logs_carry_no_id_values(db: Database[Doc], caplog: pytest.LogCaptureFixture) -> None:
    items = db["items"]
    ids: list[Any] = [*_object_ids(3_000), *(f"secret-{i}" for i in range(500))]
    _insert(items, ids)
    with caplog.at_level(logging.DEBUG, logger="migronaut_core"):
        plan = _plan(items)
        _scan(items, plan)
    assert "partition(s) by sample" in caplog.text
    assert "secret-" not in caplog.text
    assert not any(str(i) in caplog.text for i in ids[:3_000])
