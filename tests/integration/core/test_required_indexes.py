"""``ensure_indexes = false``: its own indexes and the version indexes checked, none created."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core import IndexMissingError, Migronaut
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.runner import write_migration

#: Every index migronaut's own collections need, as the error names them.
OWN_INDEXES = [
    {"collection": "migronaut_changelog", "key": [["status", 1], ["applied_at", 1]]},
    {
        "collection": "migronaut_background_partitions",
        "key": [["migration", 1], ["generation", 1], ["plan", 1], ["status", 1]],
    },
    {
        "collection": "migronaut_background_partitions",
        "key": [["migration", 1], ["lease.slot", 1]],
        "unique": True,
        "partial": {"lease.slot": {"$exists": True}},
    },
    {
        "collection": "migronaut_background_partitions",
        "key": [["migration", 1], ["lease.group", 1], ["lease.group_slot", 1]],
        "unique": True,
        "partial": {"lease.group_slot": {"$exists": True}},
    },
    {"collection": "migronaut_background", "key": [["status", 1]]},
    {"collection": "migronaut_background", "key": [["requires", 1], ["status", 1]]},
    # The undo journal's: counted by migration, old entries expired by a TTL index.
    {"collection": "migronaut_background_undo", "key": [["migration", 1]]},
    {
        "collection": "migronaut_background_undo",
        "key": [["expires_at", 1]],
        "expire_after_seconds": 0,
    },
]


def _index_sets(db: Database[dict[str, Any]]) -> dict[str, set[str]]:
    return {name: set(db[name].index_information()) for name in db.list_collection_names()}


def _create_as_an_admin_would(db: Database[dict[str, Any]], missing: list[dict[str, Any]]) -> None:
    for index in missing:
        options: dict[str, Any] = {"unique": True} if index.get("unique") else {}
        if "partial" in index:
            options["partialFilterExpression"] = index["partial"]
        if "expire_after_seconds" in index:
            options["expireAfterSeconds"] = index["expire_after_seconds"]
        db[index["collection"]].create_index(
            [(field, direction) for field, direction in index["key"]], **options
        )


def test_without_the_indexes_up_names_them_all_and_writes_nothing(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    seed_users(db, 50)
    migrations = tmp_path / "migrations"
    write_migration(
        migrations, "20230101000000_first", "def up(ctx):\n    ctx.db.a.insert_one({})\n"
    )
    write_background(migrations)
    before = _index_sets(db)
    kit = make_kit(mongo_uri, db, migrations, ensure_indexes=False)
    with kit, pytest.raises(IndexMissingError) as raised:
        kit.runs.up()
    assert raised.value.code == "INDEX_MISSING"
    assert raised.value.context["missing"] == OWN_INDEXES
    assert "migronaut_changelog {status: 1, applied_at: 1}" in raised.value.message
    assert _index_sets(db) == before  # no collection, no index, no lock, no changelog
    assert db.list_collection_names() == ["users"]


def test_with_the_indexes_created_beforehand_everything_runs_and_creates_none(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    seed_users(db, 50)
    migrations = tmp_path / "migrations"
    write_background(migrations, batch_size=10)
    _create_as_an_admin_would(db, OWN_INDEXES)
    before = _index_sets(db)
    with make_kit(mongo_uri, db, migrations, ensure_indexes=False) as kit:
        kit.runs.up()
        view = kit_json.run(kit, SPLIT_NAME)
        kit.runs.down()
    assert view["status"] == "completed"
    assert db.users.count_documents({"_v": 2}) == 50
    after = _index_sets(db)  # the lock collection is new, with only its _id index
    assert after == {name: before.get(name, {"_id_"}) for name in after}


def test_converge_checks_the_version_indexes_and_creates_none(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    db.users.insert_one({"_id": 1, "_v": 1})
    db.orders.insert_one({"_id": 1})
    collections = {
        "users": {"versioning": {"field": "_v"}},
        "orders": {"versioning": {"field": "schema"}},
        "audit": {},
    }
    options: dict[str, Any] = {"uri": mongo_uri, "database": db.name, "collections": collections}
    db.orders.create_index([("schema", 1), ("_id", 1)], name="made_by_the_dba")
    with Migronaut(migrations_dir=str(tmp_path), ensure_indexes=False, **options) as kit:
        with pytest.raises(IndexMissingError) as raised:
            kit.runs.converge()
        assert raised.value.context["missing"] == [
            {"collection": "users", "key": [["_v", 1], ["_id", 1]]}
        ]
        assert "users {_v: 1, _id: 1}" in raised.value.message
        assert set(db.users.index_information()) == {"_id_"}
        db.users.create_index([("_v", 1), ("_id", 1)])
        report = kit.runs.converge().to_dict()
    assert report["created"] == 0
    assert [(c["collection"], c["action"]) for c in report["collections"]] == [
        ("users", "exists"),
        ("orders", "exists"),
        ("audit", "skipped"),
    ]
