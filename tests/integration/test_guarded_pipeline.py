"""The guarded pipeline update: applies exactly when the document is as it was read."""

from __future__ import annotations

from typing import Any

import pytest
from bson import Int64
from pymongo.database import Database

from migronaut_core.versioning import guarded_pipeline, id_filter, stamped_diff


def rewrite(
    db: Database[dict[str, Any]], before: dict[str, Any], revision_field: str | None
) -> int:
    after = {k: v for k, v in before.items() if k != "name"} | {"first": "A", "last": "B"}
    update = stamped_diff(
        before, after, field="_v", target_version=2, revision_field=revision_field
    )
    pipeline = guarded_pipeline(
        before, update, field="_v", version=before.get("_v") or 0, revision_field=revision_field
    )
    return db.items.update_one(id_filter(before), pipeline).modified_count


@pytest.mark.parametrize("revision", [None, 0, 3, Int64(3), 3.0])
def test_applies_when_nothing_changed(db: Database[dict[str, Any]], revision: Any) -> None:
    doc = {"_id": 1, "_v": 1, "name": "A B", "keep": Int64(5)}
    if revision is not None:
        doc["rev"] = revision
    db.items.insert_one(doc)
    assert rewrite(db, doc, "rev") == 1
    stored = db.items.find_one({"_id": 1})
    assert stored is not None
    assert stored["_v"] == 2 and stored["first"] == "A" and "name" not in stored
    assert isinstance(stored["keep"], Int64)
    assert stored["rev"] == (1 if revision is None else revision + 1)


@pytest.mark.parametrize(
    "concurrent",
    [
        {"$set": {"rev": 0}},  # a missing revision set to 0 is a change
        {"$inc": {"rev": 1}},
        {"$set": {"_v": 2}},
        {"$unset": {"_v": ""}},
    ],
)
def test_does_not_apply_after_a_concurrent_write(
    db: Database[dict[str, Any]], concurrent: dict[str, Any]
) -> None:
    doc = {"_id": "k", "_v": 1, "name": "A B"}
    if "$inc" in concurrent:
        doc["rev"] = 4
    db.items.insert_one(doc)
    db.items.update_one({"_id": "k"}, concurrent)
    snapshot = db.items.find_one({"_id": "k"})
    assert rewrite(db, doc, "rev") == 0
    assert db.items.find_one({"_id": "k"}) == snapshot


def test_version_zero_means_field_absent_or_null(db: Database[dict[str, Any]]) -> None:
    db.items.insert_many([{"_id": 1, "name": "A B"}, {"_id": 2, "name": "A B", "_v": None}])
    for doc in db.items.find():
        assert rewrite(db, doc, None) == 1
    assert db.items.count_documents({"_v": 2}) == 2


def test_embedded_dollar_strings_are_written_literally(db: Database[dict[str, Any]]) -> None:
    doc = {"_id": {"tenant": 1}, "_v": 1, "name": "A B"}
    db.items.insert_one(doc)
    after = {**doc, "expr": "$name", "nested": {"$x": 1}}
    del after["name"]
    update = stamped_diff(doc, after, field="_v", target_version=2)
    db.items.update_one(id_filter(doc), guarded_pipeline(doc, update, field="_v", version=1))
    stored = db.items.find_one({"_id": {"tenant": 1}})
    assert stored is not None
    assert stored["expr"] == "$name" and stored["nested"] == {"$x": 1}
