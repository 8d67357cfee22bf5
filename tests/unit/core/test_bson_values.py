"""BSON values: exact equality, type names, canonical id keys and deep clones."""

from __future__ import annotations

import datetime
import itertools
import re
import uuid
from typing import Any

import bson
import pytest
from bson import SON, Code, DBRef, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from bson.binary import Binary
from bson.datetime_ms import DatetimeMS
from bson.raw_bson import RawBSONDocument

from migronaut_core.bson_values import bson_equal, bson_type_name, canonical_id_key, clone_document
from migronaut_core.errors import ConfigInvalidError
from tests.support.bson_values import NAN, OID, WHEN

# ─── bson_equal ───────────────────────────────────────────────────────────────

EQUAL = [
    (1, 1),
    (2**40, Int64(2**40)),  # both encode as int64
    (1.5, 1.5),
    (NAN, NAN),
    (Decimal128("1.0"), Decimal128("1.0")),
    (Decimal128("NaN"), Decimal128("NaN")),
    ("x", "x"),
    (None, None),
    (True, True),
    (OID, ObjectId(str(OID))),
    (b"ab", Binary(b"ab", 0)),  # bytes is binary subtype 0
    (Binary(b"ab", 4), Binary(b"ab", 4)),
    (uuid.UUID(int=7), uuid.UUID(int=7)),
    (WHEN, WHEN.replace(microsecond=123999)),  # BSON keeps milliseconds
    (WHEN, WHEN.replace(tzinfo=None)),  # naive means UTC
    (WHEN, DatetimeMS(WHEN)),
    (WHEN, WHEN.astimezone(datetime.timezone(datetime.timedelta(hours=2)))),
    (Timestamp(5, 1), Timestamp(5, 1)),
    (re.compile("a.b", re.IGNORECASE), Regex("a.b", "iu")),  # str patterns carry UNICODE
    (Regex("x", "mi"), Regex("x", "im")),
    (Code("f()"), Code("f()")),
    (Code("f()", {"a": 1}), Code("f()", {"a": 1})),
    (MinKey(), MinKey()),
    (MaxKey(), MaxKey()),
    ({"a": 1, "b": [1, {"c": 2}]}, {"a": 1, "b": [1, {"c": 2}]}),
    (SON([("a", 1), ("b", 2)]), {"a": 1, "b": 2}),
    ([1, "a"], (1, "a")),  # a tuple is a BSON array
    (DBRef("c", 1), {"$ref": "c", "$id": 1}),
    ({"n": [NAN]}, {"n": [NAN]}),
]

DIFFERENT = [
    (True, 1),
    (False, 0),
    (1, 1.0),
    (1, Int64(1)),  # int32 vs int64
    (Int64(1), 1.0),
    (1, Decimal128("1")),
    (1.0, Decimal128("1")),
    (Decimal128("1.0"), Decimal128("1.00")),
    (0.0, -0.0),
    (NAN, 1.0),
    (NAN, Decimal128("NaN")),
    (None, 0),
    (None, False),
    ("1", 1),
    (str(OID), OID),
    (b"ab", Binary(b"ab", 4)),
    (Binary(b"ab", 3), Binary(b"ab", 4)),
    (uuid.UUID(int=7), Binary(uuid.UUID(int=7).bytes, 4)),
    (WHEN, WHEN + datetime.timedelta(milliseconds=1)),
    (WHEN, int(WHEN.timestamp() * 1000)),
    (Timestamp(5, 1), Timestamp(5, 2)),
    (Timestamp(5, 1), datetime.datetime(1970, 1, 1, 0, 0, 5)),
    (Regex("a", "i"), Regex("a", "m")),
    (Regex("a"), "a"),
    (Code("f()"), "f()"),
    (Code("f()"), Code("f()", {})),
    (Code("f()", {"a": 1}), Code("f()", {"a": 1.0})),
    (MinKey(), MaxKey()),
    ({"a": 1, "b": 2}, {"b": 2, "a": 1}),  # field order counts, as in BSON
    ({"a": 1}, {"a": 1, "b": None}),
    ({"a": {"x": 1}}, {"a": {"x": 1.0}}),
    ([1, 2], [2, 1]),
    ([1, 2], [1, 2, 3]),
    ([1], {"0": 1}),
    ([True], [1]),
]


@pytest.mark.parametrize(("a", "b"), EQUAL)
def test_bson_equal_same_value(a: Any, b: Any) -> None:
    assert bson_equal(a, b)
    assert bson_equal(b, a)


@pytest.mark.parametrize(("a", "b"), DIFFERENT)
def test_bson_equal_tells_types_and_orders_apart(a: Any, b: Any) -> None:
    assert not bson_equal(a, b)
    assert not bson_equal(b, a)


def test_bson_equal_is_same_bytes_on_every_pair() -> None:
    """Across every value above, "equal" is exactly "the encoder writes the same bytes"."""
    values = [pair[0] for pair in EQUAL + DIFFERENT if not _has_uuid(pair)]
    values += [pair[1] for pair in EQUAL + DIFFERENT if not _has_uuid(pair)]
    for a, b in itertools.product(values, repeat=2):
        same_bytes = bson.encode({"v": a}) == bson.encode({"v": b})
        assert bson_equal(a, b) == same_bytes, (bson_type_name(a), bson_type_name(b))


def _has_uuid(pair: tuple[Any, Any]) -> bool:
    return any(isinstance(v, uuid.UUID) for v in pair)


def test_bson_equal_reads_raw_documents_in_order() -> None:
    raw = RawBSONDocument(bson.encode({"a": Int64(1), "b": [1.5]}))
    assert bson_equal(raw, {"a": Int64(1), "b": [1.5]})
    assert not bson_equal(raw, {"a": 1, "b": [1.5]})
    assert not bson_equal(raw, {"b": [1.5], "a": Int64(1)})


def test_bson_equal_unknown_types_need_same_type_and_equality() -> None:
    class Opaque:
        def __init__(self, v: int) -> None:
            self.v = v

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Opaque) and other.v == self.v

        def __hash__(self) -> int:
            return self.v

    assert bson_equal(Opaque(1), Opaque(1))
    assert not bson_equal(Opaque(1), Opaque(2))
    assert not bson_equal(Opaque(1), 1)


@pytest.mark.parametrize(
    ("value", "name"),
    [
        (1, "int"),
        (2**31, "long"),
        (Int64(1), "long"),
        (1.0, "double"),
        (Decimal128("1"), "decimal"),
        (True, "bool"),
        ("s", "string"),
        (Code("x"), "javascript"),
        (Code("x", {}), "javascriptWithScope"),
        ({}, "object"),
        (DBRef("c", 1), "object"),
        ([], "array"),
        ((), "array"),
        (b"", "binData"),
        (uuid.uuid4(), "binData"),
        (OID, "objectId"),
        (WHEN, "date"),
        (Timestamp(1, 1), "timestamp"),
        (Regex("a"), "regex"),
        (None, "null"),
        (MinKey(), "minKey"),
        (MaxKey(), "maxKey"),
        (object(), "unknown"),
    ],
)
def test_bson_type_name(value: Any, name: str) -> None:
    assert bson_type_name(value) == name


# ─── canonical_id_key ─────────────────────────────────────────────────────────

DISTINCT_IDS = [
    OID,
    str(OID),
    1,
    "1",
    True,
    False,
    0,
    None,
    b"\x01",
    Binary(b"\x01", 4),
    Binary(b"\x01", 3),
    uuid.UUID(int=1),
    WHEN,
    Timestamp(1, 1),
    {"a": 1, "b": 2},
    {"b": 2, "a": 1},
    {"a": "1"},
    [1],
    MinKey(),
    MaxKey(),
    Regex("a", "i"),
    Code("1"),
    2.5,
    Decimal128("2.51"),
    float("inf"),
    float("-inf"),
    NAN,
    -1,
    10,
    100,
    0.1,
]


def test_canonical_keys_are_distinct_across_types_and_values() -> None:
    keys = [canonical_id_key(value) for value in DISTINCT_IDS]
    assert len(set(keys)) == len(keys)


@pytest.mark.parametrize(
    "same",
    [
        [1, 1.0, Int64(1), Decimal128("1"), Decimal128("1.000"), Decimal128("0.1E1")],
        [0, 0.0, -0.0, Int64(0), Decimal128("0"), Decimal128("-0.00")],
        [NAN, Decimal128("NaN"), -NAN],
        [2**53, Int64(2**53), float(2**53)],
        [{"a": 1}, {"a": 1.0}, SON([("a", Int64(1))])],
        [uuid.UUID(int=1), Binary(uuid.UUID(int=1).bytes, 4)],
        [b"\x01", Binary(b"\x01", 0)],
        [WHEN, WHEN.replace(tzinfo=None), DatetimeMS(WHEN)],
    ],
)
def test_canonical_keys_follow_the_id_index_equality(same: list[Any]) -> None:
    assert len({canonical_id_key(value) for value in same}) == 1


def test_canonical_keys_are_stable_strings() -> None:
    assert canonical_id_key(OID) == '["objectId","64b7f0c2a1b2c3d4e5f60718"]'
    assert canonical_id_key(str(OID)) == '["string","64b7f0c2a1b2c3d4e5f60718"]'
    assert canonical_id_key(150) == '["number","15e1"]'
    assert canonical_id_key(Decimal128("-0.25")) == '["number","-25e-2"]'
    assert canonical_id_key(0.1) != canonical_id_key(Decimal128("0.1"))  # 0.1 is not exact
    assert canonical_id_key({"k": "é"}) == '["object",[["k",["string","é"]]]]'
    assert isinstance(hash(canonical_id_key({"a": [1]})), int)


# ─── clone_document ───────────────────────────────────────────────────────────


def test_clone_is_deep_and_keeps_bson_types() -> None:
    doc: SON[str, Any] = SON(
        [
            ("_id", OID),
            ("n", Int64(5)),
            ("d", Decimal128("1.50")),
            ("b", Binary(b"\x00", 4)),
            ("when", WHEN),
            ("nested", {"list": [1, {"x": [2]}], "code": Code("f", {"s": [1]})}),
            ("re", Regex("a", "i")),
            ("t", (1, [2])),
        ]
    )
    clone = clone_document(doc)
    assert type(clone) is dict
    assert list(clone) == list(doc)
    assert bson_equal(clone, doc)
    for key in ("n", "d", "b"):
        assert type(clone[key]) is type(doc[key])
    clone["nested"]["list"][1]["x"].append(3)
    clone["nested"]["code"].scope["s"].append(2)
    clone["t"][1].append(3)
    assert doc["nested"]["list"][1]["x"] == [2]
    assert doc["nested"]["code"].scope == {"s": [1]}
    assert doc["t"] == (1, [2])


def test_clone_of_a_raw_document_is_a_mutable_dict() -> None:
    raw = RawBSONDocument(bson.encode({"a": {"b": 1}}))
    clone = clone_document(raw)
    clone["a"]["b"] = 2
    assert raw["a"]["b"] == 1


def test_clone_refuses_a_non_document() -> None:
    with pytest.raises(ConfigInvalidError):
        clone_document([1])  # type: ignore[arg-type]
