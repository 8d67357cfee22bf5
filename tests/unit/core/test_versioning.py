"""Version and OCC filters, revisions, the stamped diff and the updated document."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest
from bson import Decimal128, Int64, ObjectId

from migronaut_core.bson_values import bson_equal, bson_type_name, clone_document
from migronaut_core.errors import BackgroundFailedError, ConfigInvalidError, MigronautError
from migronaut_core.versioning import (
    occ_filter,
    revision_of,
    stamped_diff,
    updated_document,
    version_filter,
    version_of,
)
from tests.support.bson_values import NAN, OID, WHEN

# ─── versions and revisions ───────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ({}, 0),
        ({"_v": None}, 0),
        ({"_v": 0}, 0),
        ({"_v": 3}, 3),
        ({"_v": Int64(3)}, 3),
        ({"_v": 3.0}, 3),
        ({"_v": Decimal128("3")}, 3),
        ({"_v": 3.5}, None),
        ({"_v": -1}, None),
        ({"_v": True}, None),
        ({"_v": "3"}, None),
        ({"_v": NAN}, None),
        ({"_v": [3]}, None),
    ],
)
def test_version_of(doc: dict[str, Any], expected: int | None) -> None:
    assert version_of(doc, "_v") == expected
    result = version_of(doc, "_v")
    assert result is None or type(result) is int


def test_revision_of_follows_the_same_rules() -> None:
    assert revision_of({}, "_r") == 0
    assert revision_of({"_r": Int64(9)}, "_r") == 9
    assert revision_of({"_r": "9"}, "_r") is None
    assert revision_of({"_r": 9}, None) is None


def test_version_filter_zero_means_never_stamped() -> None:
    assert version_filter("_v", 0) == {"_v": None}
    assert version_filter("_v", 4) == {"_v": 4}
    assert type(version_filter("_v", 4)["_v"]) is int


@pytest.mark.parametrize("version", [-1, 1.0, True, "1", None])
def test_version_filter_refuses_bad_versions(version: Any) -> None:
    with pytest.raises(ConfigInvalidError):
        version_filter("_v", version)


@pytest.mark.parametrize("field", ["", "$v", "a.b", "_id", 3])
def test_version_filter_refuses_bad_field_names(field: Any) -> None:
    with pytest.raises(ConfigInvalidError):
        version_filter(field, 1)


def test_occ_filter_without_revisions() -> None:
    doc = {"_id": OID, "_v": 1, "name": "x"}
    assert occ_filter(doc, field="_v", version=1) == {"_id": OID, "_v": 1}


def test_occ_filter_matches_a_missing_revision_as_missing_not_zero() -> None:
    doc = {"_id": 5, "_v": 1}
    assert occ_filter(doc, field="_v", version=1, revision_field="_r") == {
        "_id": 5,
        "_v": 1,
        "_r": None,
    }
    assert occ_filter({**doc, "_r": None}, field="_v", version=1, revision_field="_r")["_r"] is None
    zero = occ_filter({**doc, "_r": 0}, field="_v", version=1, revision_field="_r")
    assert zero["_r"] == 0
    assert zero["_r"] is not None


def test_occ_filter_keeps_the_stored_revision_value() -> None:
    doc = {"_id": 5, "_v": 1, "_r": Int64(41)}
    query = occ_filter(doc, field="_v", version=1, revision_field="_r")
    assert query["_r"] == 41
    assert isinstance(query["_r"], Int64)


def test_occ_filter_from_version_zero_and_document_ids() -> None:
    doc = {"_id": {"tenant": 1, "seq": 2}, "_r": 3}
    query = occ_filter(doc, field="_v", version=0, revision_field="_r")
    # A document _id is matched with $eq so its fields are never read as operators.
    assert query == {"_id": {"$eq": {"tenant": 1, "seq": 2}}, "_v": None, "_r": 3}


def test_occ_filter_refuses_a_document_without_id_and_clashing_names() -> None:
    with pytest.raises(ConfigInvalidError):
        occ_filter({"_v": 1}, field="_v", version=1)
    with pytest.raises(ConfigInvalidError):
        occ_filter({"_id": 1}, field="_v", version=1, revision_field="_v")


# ─── stamped_diff ─────────────────────────────────────────────────────────────


def _before() -> dict[str, Any]:
    return {
        "_id": OID,
        "_v": 1,
        "_r": Int64(7),
        "name": "Ada Lovelace",
        "count": Int64(3),
        "ratio": 1.0,
        "tags": ["a", "b"],
        "address": {"city": "London", "geo": {"lat": 51.5, "lng": -0.12}},
        "legacy": True,
    }


def _diff(before: dict[str, Any], after: dict[str, Any], **kw: Any) -> dict[str, Any]:
    kw.setdefault("field", "_v")
    kw.setdefault("target_version", 2)
    kw.setdefault("revision_field", "_r")
    return stamped_diff(before, after, **kw)


def test_diff_writes_only_what_changed_and_stamps() -> None:
    before = _before()
    after = clone_document(before)
    first, last = after.pop("name").split()
    after["first"], after["last"] = first, last
    after["address"]["geo"]["lat"] = 51.51
    after["tags"].append("c")
    del after["legacy"]
    update = _diff(before, after)
    assert update == {
        "$set": {
            "address": {"city": "London", "geo": {"lat": 51.51, "lng": -0.12}},
            "tags": ["a", "b", "c"],
            "first": "Ada",
            "last": "Lovelace",
            "_v": 2,
        },
        "$unset": {"name": "", "legacy": ""},
        "$inc": {"_r": 1},
    }
    assert "count" not in update["$set"] and "ratio" not in update["$set"]


def test_diff_of_an_untouched_document_is_the_stamp_alone() -> None:
    before = _before()
    assert _diff(before, clone_document(before)) == {"$set": {"_v": 2}, "$inc": {"_r": 1}}
    assert _diff(before, clone_document(before), revision_field=None) == {"$set": {"_v": 2}}


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (Int64(3), 3),  # same number, other type: rewritten
        (1.0, 1),
        (1, True),
        (Decimal128("1.0"), Decimal128("1.00")),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}),  # reordered subdocument
        ([1, [2, 3]], [1, [2, 3.0]]),
        (0.0, -0.0),
    ],
)
def test_diff_sees_type_and_order_changes(old: Any, new: Any) -> None:
    before = {"_id": 1, "_v": 1, "x": old}
    update = _diff(before, {"_id": 1, "_v": 1, "x": new}, revision_field=None)
    assert "x" in update["$set"]
    assert bson_equal(update["$set"]["x"], new)


def test_diff_leaves_nan_alone() -> None:
    before = {"_id": 1, "x": NAN, "y": [NAN]}
    update = _diff(before, clone_document(before), revision_field=None)
    assert update == {"$set": {"_v": 2}}


def test_diff_revision_missing_or_null_is_set_to_one() -> None:
    for before in ({"_id": 1, "_v": 1}, {"_id": 1, "_v": 1, "_r": None}):
        update = _diff(before, dict(before))
        assert update["$set"]["_r"] == 1
        assert "$inc" not in update
        assert revision_of(updated_document(before, update), "_r") == 1


def test_diff_revision_numeric_is_incremented_in_its_type() -> None:
    for stored in (0, 5, Int64(5), 5.0, Decimal128("5")):
        before = {"_id": 1, "_v": 1, "_r": stored}
        update = _diff(before, dict(before))
        assert update["$inc"] == {"_r": 1}
        after = updated_document(before, update)
        assert revision_of(after, "_r") == revision_of(before, "_r") + 1  # type: ignore[operator]
        assert bson_type_name(after["_r"]) in {bson_type_name(stored), "long"}


@pytest.mark.parametrize("stored", ["7", True, -1, 1.5, [1], {"n": 1}])
def test_diff_refuses_a_stored_revision_that_is_no_count(stored: Any) -> None:
    before = {"_id": 1, "_v": 1, "_r": stored}
    with pytest.raises(BackgroundFailedError) as caught:
        _diff(before, dict(before))
    assert caught.value.context == {"reason": "shape", "field": "_r"}


def test_diff_to_version_zero_unsets_the_field() -> None:
    before = {"_id": 1, "_v": 2, "_r": 4, "a": 1}
    update = _diff(before, {"_id": 1, "_v": 2, "_r": 4}, target_version=0)
    assert update == {"$unset": {"a": "", "_v": ""}, "$inc": {"_r": 1}}
    assert updated_document(before, update) == {"_id": 1, "_r": 5}


@pytest.mark.parametrize(
    ("after", "field"),
    [
        ({"_id": ObjectId(), "_v": 1}, "_id"),
        ({"_id": str(OID), "_v": 1}, "_id"),
        ({"_v": 1}, "_id"),
        ({"_id": OID, "_v": 7}, "_v"),
        ({"_id": OID, "_v": "2"}, "_v"),
        ({"_id": OID, "_v": True}, "_v"),
        ({"_id": OID, "_v": 1, "_r": 8}, "_r"),
        ({"_id": OID, "_v": 1, "_r": None}, "_r"),
        ({"_id": OID, "_v": 1, "a.b": 1}, "a.b"),
        ({"_id": OID, "_v": 1, "$x": 1}, "$x"),
        ({"_id": OID, "_v": 1, "": 1}, ""),
    ],
)
def test_diff_refuses_a_bad_transform(after: dict[str, Any], field: str) -> None:
    before = {"_id": OID, "_v": 1, "_r": 7}
    with pytest.raises(BackgroundFailedError) as caught:
        _diff(before, after)
    error = caught.value
    assert isinstance(error, MigronautError)
    assert not isinstance(error, ConfigInvalidError)
    assert error.context == {"reason": "shape", "field": field}
    # The message names the problem, never a value from the document.
    assert str(OID) not in str(error)


def test_diff_refuses_something_that_is_no_document() -> None:
    with pytest.raises(BackgroundFailedError) as caught:
        _diff({"_id": 1}, [("_id", 1)])  # type: ignore[arg-type]
    assert caught.value.context == {"reason": "shape"}


def test_diff_accepts_the_version_left_alone_dropped_or_set_to_target() -> None:
    before = {"_id": 1, "_v": 1, "_r": 2, "a": 1}
    for after in (
        {"_id": 1, "_v": 1, "_r": 2, "a": 2},
        {"_id": 1, "a": 2},  # a fresh dict without the system fields
        {"_id": 1, "_v": 2, "a": 2},
        {"_id": 1, "_v": Int64(2), "a": 2},
        {"_id": 1, "_v": 2.0, "a": 2},
    ):
        update = _diff(before, after)
        assert update == {"$set": {"a": 2, "_v": 2}, "$inc": {"_r": 1}}


def test_diff_of_a_stored_dotted_field_left_alone_is_fine() -> None:
    before = {"_id": 1, "a.b": 1, "$weird": 2}
    assert _diff(before, dict(before), revision_field=None) == {"$set": {"_v": 2}}
    with pytest.raises(BackgroundFailedError):
        _diff(before, {"_id": 1, "$weird": 2}, revision_field=None)  # removing a.b


def test_diff_refuses_bad_arguments_as_config_errors() -> None:
    for kw in (
        {"target_version": -1},
        {"target_version": True},
        {"field": "_id"},
        {"revision_field": "_v"},
    ):
        with pytest.raises(ConfigInvalidError):
            _diff({"_id": 1}, {"_id": 1}, **kw)


def test_diff_never_mutates_its_inputs_nor_shares_values() -> None:
    before = _before()
    after = clone_document(before)
    after["address"]["city"] = "Paris"
    after["tags"] = [["nested"]]
    before_copy, after_copy = copy.deepcopy(before), copy.deepcopy(after)
    update = _diff(before, after)
    assert before == before_copy and after == after_copy
    assert bson_equal(before, before_copy) and bson_equal(after, after_copy)
    update["$set"]["address"]["city"] = "Rome"
    update["$set"]["tags"][0].append("x")
    assert after == after_copy


def test_updated_document_matches_the_transform() -> None:
    before = _before()
    after = clone_document(before)
    after["count"] = Int64(4)
    after["extra"] = {"k": [1, 2]}
    del after["ratio"]
    result = updated_document(before, _diff(before, after))
    expected = {**after, "_v": 2, "_r": Int64(8)}
    assert result.keys() == expected.keys()
    for key, value in expected.items():
        assert bson_equal(result[key], value), key
    assert bson_equal(before, _before())


def test_updated_document_refuses_what_it_cannot_apply() -> None:
    with pytest.raises(ConfigInvalidError):
        updated_document({"_id": 1}, {"$rename": {"a": "b"}})
    with pytest.raises(ConfigInvalidError):
        updated_document({"_id": 1}, {"$set": {"a.b": 1}})
    with pytest.raises(ConfigInvalidError):
        updated_document({"_id": 1, "n": None}, {"$inc": {"n": 1}})
    with pytest.raises(ConfigInvalidError):
        updated_document({"_id": 1, "n": "1"}, {"$inc": {"n": 1}})


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    scalars: list[Any] = [
        rng.randint(-5, 5),
        Int64(rng.randint(-5, 5)),
        float(rng.randint(-5, 5)),
        Decimal128(str(rng.randint(-5, 5))),
        rng.choice([True, False]),
        rng.choice(["a", "b", ""]),
        None,
        rng.choice([OID, WHEN]),
    ]
    if depth < 2 and rng.random() < 0.3:
        if rng.random() < 0.5:
            return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
        keys = rng.sample(["p", "q", "r"], rng.randint(0, 3))
        return {key: _random_value(rng, depth + 1) for key in keys}
    return rng.choice(scalars)


def test_diff_round_trips_random_transforms() -> None:
    rng = random.Random(20240501)
    for _ in range(500):
        before: dict[str, Any] = {"_id": rng.randint(0, 9), "_v": 1}
        for key in rng.sample("abcdef", rng.randint(0, 6)):
            before[key] = _random_value(rng)
        after = clone_document(before)
        for key in rng.sample("abcdefg", rng.randint(0, 4)):
            if key in after and rng.random() < 0.3:
                del after[key]
            else:
                after[key] = _random_value(rng)
        update = stamped_diff(before, after, field="_v", target_version=2, revision_field="_r")
        result = updated_document(before, update)
        assert set(result) == set(after) | {"_v", "_r"}
        for key in after:
            if key != "_v":
                assert bson_equal(result[key], after[key])
        assert result["_v"] == 2 and result["_r"] == 1
        written = set(update.get("$set", {})) | set(update.get("$unset", {}))
        untouched = {k for k in before if k in after and bson_equal(before[k], after[k])}
        assert not (written & (untouched - {"_v"}))
