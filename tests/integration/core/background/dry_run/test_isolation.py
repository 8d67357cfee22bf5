"""The dry-run sandbox refuses a sharded collection's ``distinct`` in its transaction (L-9).

The test server is a replica set: which collections are sharded is injected, through
the kit's shard catalog (recorded ``config`` documents) or the isolation's
``shard_key_of``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.database import Database

from migronaut_core import DryRunRefusedError, Migronaut
from migronaut_core.background.dry_run.isolation import Isolation, isolated_database
from migronaut_core.background.planning.shard import ShardCatalog, ShardKey
from tests.support.background import SPLIT_NAME, seed_users, write_background

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
