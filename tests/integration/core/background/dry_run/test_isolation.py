"""A dry run's ``ctx.db`` and ``ctx.client``: bound to its aborted transaction, or refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.database import Database

from migronaut_core import DryRunRefusedError, Migronaut, StepDryRunReport
from migronaut_core.background.dry_run.isolation import (
    Isolation,
    isolated_client,
    isolated_database,
)
from migronaut_core.background.planning.shard import ShardCatalog, ShardKey
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background

#: A transform that writes beside the rewrite without ``ctx.session``, through ``ctx.db``
#: and through ``ctx.client``.
SIDE_WRITES = """
background = {"collection": "users", "from": 1, "to": 2, "batch_size": 5}


def migrate(doc, ctx):
    ctx.db.audit.insert_one({"user": doc["_id"]})
    ctx.client[ctx.db.name]["audit"].update_one(
        {"_id": "last"}, {"$set": {"user": doc["_id"]}}, upsert=True
    )
    doc["checked"] = True
    return doc
"""

#: A transform that writes to migronaut's state collection, with the session.
STATE_WRITE = """
background = {"collection": "users", "from": 1, "to": 2}


def migrate(doc, ctx):
    ctx.db.migronaut_background.insert_one({"_id": doc["_id"]}, session=ctx.session)
    return doc
"""

#: A step that writes without ``ctx.session``, then to migronaut's own collections.
STEP_WRITES = """
background = {"mode": "step", "from": 1, "to": 2}


def step(ctx):
    ctx.db.orders.update_many({}, {"$set": {"seen": True}})
    after = ctx.checkpoint or 0
    ctx.db.orders.insert_one({"_id": f"new-{after}"})
    if after == 2:
        ctx.db.migronaut_background.update_many({}, {"$set": {"status": "completed"}})
    return {"checkpoint": after + 1, "done": False, "processed": 1}
"""


def test_a_validating_dry_run_rolls_back_writes_made_without_the_session(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    seed_users(db, 12)
    migrations = tmp_path / "migrations"
    write_background(migrations, body=SIDE_WRITES)
    with make_kit(mongo_uri, db, migrations) as kit:
        report = kit.background.dry_run(SPLIT_NAME, first=12, validate=True).to_dict()
    assert report["totals"]["errors"] == 0
    assert report["totals"]["would_change"] == 12
    assert "audit" not in db.list_collection_names()
    assert db.users.count_documents({"checked": True}) == 0


def test_a_plain_preview_refuses_writes_and_writes_nothing(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    seed_users(db, 4)
    migrations = tmp_path / "migrations"
    write_background(migrations, body=SIDE_WRITES)
    with make_kit(mongo_uri, db, migrations) as kit:
        report = kit.background.dry_run(SPLIT_NAME, first=4).to_dict()
    assert report["totals"]["errors"] == 4
    errors = {document["error"] for document in report["documents"]}
    assert errors == {
        f"dry run: insert_one on {db.name}.audit is refused: "
        "a plain preview only reads (no transaction)"
    }
    assert "audit" not in db.list_collection_names()


def test_a_write_to_the_state_collection_is_refused_even_with_the_session(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    seed_users(db, 3)
    migrations = tmp_path / "migrations"
    write_background(migrations, body=STATE_WRITE)
    with make_kit(mongo_uri, db, migrations) as kit:
        report = kit.background.dry_run(SPLIT_NAME, first=3, validate=True).to_dict()
    assert {document["reason"] for document in report["documents"]} == {"transform"}
    assert all(
        "migronaut's own collections are never written" in document["error"]
        for document in report["documents"]
    )
    assert db.migronaut_background.count_documents({}) == 0


def test_a_step_dry_run_rolls_back_unsessioned_writes_and_refuses_the_state(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    db.orders.insert_many([{"_id": i} for i in range(5)])
    migrations = tmp_path / "migrations"
    write_background(migrations, body=STEP_WRITES)
    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up()
        state = db.migronaut_background.find_one({"_id": SPLIT_NAME})
        report = kit.background.dry_run(SPLIT_NAME, steps=5)
    assert isinstance(report, StepDryRunReport)
    steps = report.to_dict()["steps"]
    assert [step.get("counters") for step in steps[:2]] == [{"processed": 1}] * 2
    assert "migronaut's own collections are never written" in steps[2]["error"]
    assert db.orders.count_documents({"seen": True}) == 0
    assert db.orders.count_documents({}) == 5
    assert db.migronaut_background.find_one({"_id": SPLIT_NAME}) == state


def test_the_handles_refuse_what_cannot_be_bound_and_bind_the_rest(
    mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    db.orders.insert_one({"_id": 1})
    client = db.client
    reading = Isolation(None, db.name, frozenset({"migronaut_background"}))
    plain = isolated_database(db, reading)
    assert plain.orders.find_one({"_id": 1}) == {"_id": 1}
    assert plain["orders"].count_documents({}) == 1
    assert plain.command("ping")["ok"] == 1
    for write in (
        lambda: plain.orders.delete_many({}),
        lambda: plain.orders.create_index("x"),
        lambda: plain.orders.aggregate([{"$out": "copy"}]),
        lambda: plain.command({"drop": "orders"}),
        lambda: plain.drop_collection("orders"),
        lambda: plain.orders.database.orders.insert_one({}),
        lambda: plain.client[db.name].orders.insert_one({}),
        lambda: isolated_client(client, reading).start_session(),
        lambda: isolated_client(client, reading).drop_database(db.name),
    ):
        with pytest.raises(DryRunRefusedError):
            write()
    assert db.orders.count_documents({}) == 1
    assert "copy" not in db.list_collection_names()
    with client.start_session() as session:
        session.start_transaction()
        bound = isolated_database(db, Isolation(session, db.name, frozenset()))
        bound.orders.insert_one({"_id": 2})
        assert bound.orders.count_documents({}) == 2  # sees its own write
        with client.start_session() as other, pytest.raises(DryRunRefusedError):
            bound.orders.insert_one({"_id": 3}, session=other)
        session.abort_transaction()
    assert db.orders.count_documents({}) == 1


#: A transform that reads the distinct values of another collection.
READS_DISTINCT = """
background = {"collection": "users", "from": 1, "to": 2, "batch_size": 5}


def migrate(doc, ctx):
    doc["codes"] = sorted(ctx.db.countries.distinct("code"))
    return doc
"""


@pytest.fixture
def config_db(
    mongo_client: MongoClient[dict[str, Any]], db: Database[dict[str, Any]]
) -> Iterator[Database[dict[str, Any]]]:
    """A recorded ``config`` database: ``countries`` is sharded on ``code``."""
    config = mongo_client[f"{db.name}_config"]
    config.collections.insert_one({"_id": f"{db.name}.countries", "key": {"code": 1}})
    yield config
    mongo_client.drop_database(config.name)


@pytest.fixture
def seeded(db: Database[dict[str, Any]], migrations: Path) -> None:
    seed_users(db, 6)
    db.countries.insert_many([{"code": "pt"}, {"code": "de"}, {"code": "pt"}])
    write_background(migrations, body=READS_DISTINCT)


@pytest.mark.usefixtures("seeded")
def test_a_validating_dry_run_refuses_distinct_on_a_sharded_collection(
    kit: Migronaut, db: Database[dict[str, Any]], config_db: Database[dict[str, Any]]
) -> None:
    kit._runtime.catalog = ShardCatalog(kit.client, config_db=config_db, sharded=True)

    report = kit.background.dry_run(SPLIT_NAME, first=6, validate=True).to_dict()

    assert report["totals"]["errors"] == 6
    assert {document["error"] for document in report["documents"]} == {
        f"dry run: distinct on {db.name}.countries is refused: a sharded collection's "
        "distinct cannot run in a transaction (a mongos refuses it); read the values with "
        "find or aggregate"
    }


@pytest.mark.usefixtures("seeded")
def test_distinct_runs_in_the_sandbox_on_an_unsharded_server(
    kit: Migronaut, db: Database[dict[str, Any]]
) -> None:
    report = kit.background.dry_run(SPLIT_NAME, first=6, validate=True).to_dict()

    assert report["totals"]["errors"] == 0
    assert report["totals"]["would_change"] == 6
    assert db.users.count_documents({"codes": {"$exists": True}}) == 0


def test_the_sandbox_asks_its_shard_key_lookup_before_distinct(
    mongo_client: MongoClient[dict[str, Any]], db: Database[dict[str, Any]]
) -> None:
    db.countries.insert_many([{"code": "pt"}, {"code": "de"}])
    asked: list[tuple[str, str]] = []

    def shard_key_of(database: str, collection: str) -> ShardKey | None:
        asked.append((database, collection))
        return ShardKey((("code", 1),)) if collection == "countries" else None

    # Outside a transaction (a plain preview) a mongos runs distinct: not asked.
    reading = isolated_database(db, Isolation(None, db.name, frozenset(), shard_key_of))
    assert sorted(reading.countries.distinct("code")) == ["de", "pt"]
    assert asked == []
    with mongo_client.start_session() as session, session.start_transaction():
        bound = isolated_database(db, Isolation(session, db.name, frozenset(), shard_key_of))
        with pytest.raises(DryRunRefusedError) as raised:
            bound.countries.distinct("code")
        assert raised.value.context == {
            "operation": "distinct",
            "target": f"{db.name}.countries",
        }
        with pytest.raises(DryRunRefusedError):
            bound.command("distinct", "countries", key="code")
        assert bound.users.distinct("code") == []  # not sharded: runs in the transaction
        session.abort_transaction()
    assert asked == [(db.name, "countries"), (db.name, "countries"), (db.name, "users")]
