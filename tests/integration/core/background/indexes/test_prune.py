"""The converge log and ``converge --prune`` against a real replica set.

Every index converge creates or drops is recorded (what, when, by whom); prune
drops only the version indexes converge itself created that nothing declares
any more — never a user's index, never one the shard key may need (the
cluster's metadata recorded in a stand-in ``config`` database), never one a
background migration still reads through.
"""

from __future__ import annotations

import getpass
import json
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.database import Database

from migronaut_core import ConfigInvalidError, Migronaut
from migronaut_core.background.planning.shard import ShardCatalog
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.cli import migronaut
from tests.support.shard_shapes import collection_doc, new_uuid

Db = Database[dict[str, Any]]
OLD = {"users": {"versioning": {"field": "_v"}}}
NEW = {"users": {"versioning": {"field": "ver"}}}
LOG = "migronaut_background_converge_log"


@pytest.fixture
def config_db(mongo_client: MongoClient[dict[str, Any]], db: Db) -> Iterator[Db]:
    """A stand-in for the cluster's ``config`` database."""
    database = mongo_client[f"{db.name}_cfg"]
    yield database
    mongo_client.drop_database(database.name)


def kit_with(mongo_uri: str, db: Db, migrations: Path, collections: Any) -> Migronaut:
    return make_kit(mongo_uri, db, migrations, collections=collections)


def indexes(db: Db) -> set[str]:
    return set(db.users.index_information())


def test_converge_records_what_it_creates_and_prune_drops_only_its_own(
    mongo_uri: str, db: Db, migrations: Path
) -> None:
    seed_users(db, 10)
    with kit_with(mongo_uri, db, migrations, OLD) as kit:
        assert kit.runs.converge(requested_by="ci", reason="deploy 41").created
        assert not kit.runs.converge().created  # exists: nothing recorded
        [entry] = kit_json.converge_log(kit)
    assert entry["collection"] == "users"
    assert (entry["action"], entry["index"], entry["key"]) == (
        "created",
        "_v_1__id_1",
        {"_v": 1, "_id": 1},
    )
    assert entry["by"] == {
        "requested_by": "ci",
        "reason": "deploy 41",
        "host": entry["by"]["host"],
        "pid": os.getpid(),
    }
    assert entry["at"] is not None
    # Users' own indexes: one with the key the new declaration wants, one led by _v.
    db.users.create_index([("ver", 1), ("_id", 1)], name="users_ver")
    db.users.create_index([("_v", 1), ("n", 1)], name="users_v_n")

    with kit_with(mongo_uri, db, migrations, NEW) as kit:
        without = kit.runs.converge()  # no prune: nothing dropped
        assert "_v_1__id_1" in indexes(db) and without.pruned == ()
        report = kit.runs.converge(prune=True, requested_by="ci")
        assert [(item.action, item.name) for item in report.collections] == [
            ("exists", "users_ver")
        ]
        assert [item.to_dict() for item in report.pruned] == [
            {
                "collection": "users",
                "name": "_v_1__id_1",
                "index": {"_v": 1, "_id": 1},
                "action": "dropped",
            }
        ]
        assert indexes(db) == {"_id_", "users_ver", "users_v_n"}
        assert kit.runs.converge(prune=True).pruned == ()  # nothing left that converge made
        dropped, created = kit_json.converge_log(kit)
    assert (dropped["action"], dropped["index"], dropped["by"]["requested_by"]) == (
        "dropped",
        "_v_1__id_1",
        "ci",
    )
    assert created == entry


def test_prune_keeps_what_the_shard_key_needs(
    mongo_uri: str, db: Db, migrations: Path, config_db: Db
) -> None:
    # Sharded on its version field: the plain version index is a shard key index.
    namespace = f"{db.name}.users"
    config_db.collections.insert_one(collection_doc(namespace, new_uuid(), {"_v": 1}))
    seed_users(db, 10)
    with kit_with(mongo_uri, db, migrations, OLD) as kit:
        kit._runtime.catalog = ShardCatalog(kit.client, config_db=config_db, sharded=True)
        created = kit.runs.converge()
        assert [(item.action, item.index) for item in created.collections] == [
            ("created", {"_v": 1, "_id": 1})
        ]
    with kit_with(mongo_uri, db, migrations, NEW) as kit:
        kit._runtime.catalog = ShardCatalog(kit.client, config_db=config_db, sharded=True)
        report = kit.runs.converge(prune=True)
        [kept] = report.pruned
        assert (kept.action, kept.name) == ("kept", "_v_1__id_1")
        assert kept.note is not None and "shard key" in kept.note
        assert "_v_1__id_1" in indexes(db)
        # Unsharded (resharded away): the old index goes, and so does the shard
        # variant converge had made for the new field while it was sharded.
        config_db.collections.delete_many({})
        report = kit.runs.converge(prune=True)
        assert [item.index for item in report.created] == [{"ver": 1, "_id": 1}]
        assert sorted((item.action, item.name) for item in report.pruned) == [
            ("dropped", "_v_1__id_1"),
            ("dropped", "ver_1__v_1__id_1"),
        ]
    assert indexes(db) == {"_id_", "ver_1__id_1"}
    assert sorted(entry["action"] for entry in kit_json.converge_log(kit)) == [
        "created",
        "created",
        "created",
        "dropped",
        "dropped",
    ]


def test_prune_keeps_an_index_a_running_migration_reads_through(
    mongo_uri: str, db: Db, migrations: Path
) -> None:
    seed_users(db, 10)
    write_background(migrations)
    with kit_with(mongo_uri, db, migrations, OLD) as kit:
        kit.runs.converge()
        kit.runs.up()  # registered on users' _v, not completed
    with kit_with(mongo_uri, db, migrations, NEW) as kit:
        [kept] = kit.runs.converge(prune=True).pruned
    assert kept.action == "kept" and kept.note is not None and SPLIT_NAME in kept.note
    assert "_v_1__id_1" in indexes(db)


def test_prune_is_refused_where_migronaut_creates_no_index(
    mongo_uri: str, db: Db, migrations: Path
) -> None:
    seed_users(db, 10)
    with kit_with(mongo_uri, db, migrations, OLD) as kit:
        kit.runs.converge()
    checking = make_kit(mongo_uri, db, migrations, collections=NEW, ensure_indexes=False)
    with checking, pytest.raises(ConfigInvalidError) as refused:
        checking.runs.converge(prune=True)
    assert refused.value.context == {"key": "ensure_indexes"}
    assert indexes(db) == {"_id_", "_v_1__id_1"}
    assert db[LOG].count_documents({}) == 1


def test_cli_converge_prune_and_log(mongo_uri: str, db: Db, tmp_path: Path) -> None:
    def configure(field: str) -> None:
        (tmp_path / "migronaut.toml").write_text(
            f'uri = "{mongo_uri}"\ndatabase = "{db.name}"\nmigrations_dir = "migrations"\n'
            f'[collections.users]\nversioning = {{ field = "{field}" }}\n'
        )

    configure("_v")
    assert migronaut(tmp_path, "converge").returncode == 0
    configure("ver")
    result = migronaut(tmp_path, "converge", "--prune", "--reason", "field renamed")
    assert result.returncode == 0, result.stderr
    assert "created  users  ver_1__id_1  {ver: 1, _id: 1}" in result.stdout
    assert "dropped  users  _v_1__id_1  {_v: 1, _id: 1}" in result.stdout
    assert result.stdout.strip().endswith("1 index(es) created, 1 dropped")
    assert indexes(db) == {"_id_", "ver_1__id_1"}

    logged = migronaut(tmp_path, "converge", "--log", "--json")
    assert logged.returncode == 0, logged.stderr
    entries = json.loads(logged.stdout)
    assert [(e["action"], e["index"]) for e in entries] == [
        ("dropped", "_v_1__id_1"),
        ("created", "ver_1__id_1"),
        ("created", "_v_1__id_1"),
    ]
    assert entries[0]["by"]["reason"] == "field renamed"
    assert entries[0]["by"]["requested_by"] == getpass.getuser()
    human = migronaut(tmp_path, "converge", "--log")
    assert "dropped  users  _v_1__id_1  {_v: 1, _id: 1}  by " in human.stdout
    assert db[LOG].count_documents({}) == 3


def test_concurrent_converges_create_and_drop_once_each(
    mongo_uri: str, db: Db, migrations: Path
) -> None:
    seed_users(db, 10)

    def together(collections: Any, prune: bool) -> list[Any]:
        kits = [kit_with(mongo_uri, db, migrations, collections) for _ in range(4)]
        for kit in kits:
            kit.client.admin.command("ping")
        barrier = threading.Barrier(len(kits))

        def one(kit: Migronaut) -> Any:
            barrier.wait(10)
            return kit.runs.converge(prune=prune)

        try:
            with ThreadPoolExecutor(len(kits)) as pool:
                return list(pool.map(one, kits))
        finally:
            for kit in kits:
                kit.close()

    created = together(OLD, prune=False)
    assert sorted(report.collections[0].action for report in created) == [
        "created",
        "exists",
        "exists",
        "exists",
    ]
    pruned = together(NEW, prune=True)
    assert sum(len(report.dropped) for report in pruned) == 1
    assert indexes(db) == {"_id_", "ver_1__id_1"}
    assert sorted((e["action"], e["index"]) for e in db[LOG].find()) == [
        ("created", "_v_1__id_1"),
        ("created", "ver_1__id_1"),
        ("dropped", "_v_1__id_1"),
    ]
