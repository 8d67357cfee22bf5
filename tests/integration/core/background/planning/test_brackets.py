"""``_id`` ranges against a real server: every document of a mixed-type collection once.

The unit tests prove the ranges are complements of each other on paper; these
check the server agrees — type bracketing, numeric cross-type comparison, NaN,
``$not`` of ``$gte``, the ``$type`` lists — and that a lane-style keyset scan
through the version index, writing with the OCC filter and the stamped diff,
rewrites each document exactly once.
"""

from __future__ import annotations

import datetime
import uuid
from collections import Counter
from typing import Any

import pytest
from bson import Code, Decimal128, Int64, MaxKey, MinKey, ObjectId, Timestamp
from bson.binary import Binary
from pymongo.collection import Collection
from pymongo.database import Database

from migronaut_core.background.planning.brackets import (
    BRACKETS,
    IdRange,
    bracket_of_type,
    group_by_bracket,
    keyset_filter,
    plan_ranges,
    range_filter,
)
from migronaut_core.bson_values import bson_equal, canonical_id_key
from migronaut_core.versioning import occ_filter, stamped_diff, version_filter

UTC = datetime.UTC
VERSION_INDEX = [("_v", 1), ("_id", 1)]


def _mixed_ids() -> list[Any]:
    oid = ObjectId("65a1b2c3d4e5f60718293a4b")
    return [
        # numbers: every numeric type, negative, huge, NaN and infinities
        *range(-3, 6),
        Int64(2**40),
        Int64(-(2**40)),
        2.5,
        -7.25,
        float("nan"),
        float("inf"),
        float("-inf"),
        Decimal128("3.5"),
        Decimal128("1E+30"),
        # strings, one of them the hex of an ObjectId below
        "",
        "alpha",
        "Zulu",
        "ünïcode",
        str(oid),
        # ObjectIds
        oid,
        *(ObjectId.from_datetime(datetime.datetime(2024, 1, d, tzinfo=UTC)) for d in range(1, 8)),
        # UUIDs (binary subtype 4) and other binary
        *(Binary(uuid.UUID(int=i * 7919).bytes, 4) for i in range(1, 6)),
        Binary(b"\x00\x01", 0),
        Binary(b"\x00\x01", 3),
        # embedded documents, field order mattering
        {"tenant": 1, "seq": 1},
        {"tenant": 1, "seq": 2},
        {"seq": 1, "tenant": 1},
        {"tenant": "b"},
        # dates, and the rest of the brackets
        *(datetime.datetime(2023, m, 1, tzinfo=UTC) for m in range(1, 6)),
        True,
        False,
        None,
        Timestamp(1_700_000_000, 1),
        Timestamp(1_700_000_000, 2),
        Code("function () {}"),
        MinKey(),
        MaxKey(),
    ]


@pytest.fixture
def mixed(db: Database[dict[str, Any]]) -> Collection[dict[str, Any]]:
    collection = db["mixed"]
    docs = [{"_id": value, "n": Int64(i), "ratio": 1.0} for i, value in enumerate(_mixed_ids())]
    collection.insert_many(docs, ordered=True)
    collection.create_index(VERSION_INDEX)
    return collection


def _sorted_sample(collection: Collection[dict[str, Any]]) -> list[dict[str, Any]]:
    pipeline = [{"$project": {"_id": 1, "t": {"$type": "$_id"}}}, {"$sort": {"_id": 1}}]
    return list(collection.aggregate(pipeline))


def _present(collection: Collection[dict[str, Any]]) -> list[str]:
    """The brackets holding documents, one indexed lookup each (as the partitioner asks)."""
    return [
        b.name
        for b in BRACKETS
        if collection.find_one(range_filter(IdRange(b.name)), {"_id": 1}) is not None
    ]


def _every_kth(groups: dict[str, list[Any]], k: int) -> dict[str, list[Any]]:
    return {name: ids[k // 2 :: k] for name, ids in groups.items()}


def test_present_brackets_match_the_server_types(mixed: Collection[dict[str, Any]]) -> None:
    truth = {bracket_of_type(row["t"]) for row in _sorted_sample(mixed)}
    assert set(_present(mixed)) == truth
    assert len(truth) == 12  # every bracket but array and regex, which _id refuses


@pytest.mark.parametrize("cap", [1, 2, 5, 12, 13, 20, 500])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_ranges_reach_every_document_exactly_once(
    mixed: Collection[dict[str, Any]], cap: int, k: int
) -> None:
    total = mixed.count_documents({})
    points = _every_kth(group_by_bracket(_sorted_sample(mixed)), k)
    ranges = plan_ranges(_present(mixed), points, max_partitions=cap)
    assert len(ranges) <= max(cap, 12)
    seen: Counter[str] = Counter()
    for id_range in ranges:
        for doc in mixed.find(range_filter(id_range), {"_id": 1}):
            seen[canonical_id_key(doc["_id"])] += 1
    assert sum(seen.values()) == total
    assert set(seen.values()) == {1}


def test_the_first_number_range_holds_nan(mixed: Collection[dict[str, Any]]) -> None:
    first = IdRange("number", None, -3)
    ids = [doc["_id"] for doc in mixed.find(range_filter(first))]
    assert sorted(map(canonical_id_key, ids)) == sorted(
        map(canonical_id_key, [float("nan"), float("-inf"), Int64(-(2**40)), -7.25])
    )
    # What `$lt` would have done: NaN is lost.
    assert mixed.count_documents({"_id": {"$lt": -3}}) == 3


def test_keyset_scan_through_the_version_index_rewrites_each_document_once(
    mixed: Collection[dict[str, Any]],
) -> None:
    points = _every_kth(group_by_bracket(_sorted_sample(mixed)), 4)
    ranges = plan_ranges(_present(mixed), points, max_partitions=10)
    written: Counter[str] = Counter()
    for id_range in ranges:
        for doc in _scan(mixed, id_range, batch=3):
            after = dict(doc, doubled=Int64(doc["n"] * 2))
            update = stamped_diff(doc, after, field="_v", target_version=1, revision_field="_r")
            query = occ_filter(doc, field="_v", version=0, revision_field="_r")
            assert mixed.update_one(query, update).matched_count == 1
            written[canonical_id_key(doc["_id"])] += 1
    total = mixed.count_documents({})
    assert sum(written.values()) == total and set(written.values()) == {1}
    assert mixed.count_documents({"_v": 1, "_r": 1}) == total
    for doc in mixed.find():
        # Untouched fields keep their stored BSON type.
        assert isinstance(doc["n"], Int64) and bson_equal(doc["ratio"], 1.0)


def _scan(
    collection: Collection[dict[str, Any]], id_range: IdRange, *, batch: int
) -> list[dict[str, Any]]:
    """Read a range as a lane does: version 0, keyset on _id, hinted, in batches."""
    out: list[dict[str, Any]] = []
    conditions: list[dict[str, Any]] = [version_filter("_v", 0), range_filter(id_range)]
    while True:
        docs = list(
            collection.find({"$and": conditions}).sort("_id", 1).limit(batch).hint(VERSION_INDEX)
        )
        out.extend(docs)
        if len(docs) < batch:
            return out
        conditions = [*conditions[:2], keyset_filter(docs[-1]["_id"])]


def test_occ_filter_misses_a_document_written_in_between(
    db: Database[dict[str, Any]],
) -> None:
    collection = db["occ"]
    collection.insert_many([{"_id": 1, "a": 1}, {"_id": 2, "a": 1, "_r": Int64(4)}])
    for doc in list(collection.find()):
        query = occ_filter(doc, field="_v", version=0, revision_field="_r")
        update = stamped_diff(
            doc, dict(doc, a=2), field="_v", target_version=1, revision_field="_r"
        )
        # An application write in between: it sets (or bumps) the revision.
        collection.update_one({"_id": doc["_id"]}, {"$inc": {"_r": 1}})
        assert collection.update_one(query, update).matched_count == 0
    # A revision written as 0 is not "missing": the guard still holds.
    collection.insert_one({"_id": 3, "a": 1})
    doc = collection.find_one({"_id": 3})
    assert doc is not None
    collection.update_one({"_id": 3}, {"$set": {"_r": 0}})
    query = occ_filter(doc, field="_v", version=0, revision_field="_r")
    assert collection.count_documents(query) == 0
