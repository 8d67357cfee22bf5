"""What the deployment can do: transactions on anything but a standalone server (H-14b)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.database import Database
from pymongo.topology_description import TOPOLOGY_TYPE
from pymongo.uri_parser import parse_uri

from migronaut_core import Migronaut
from migronaut_core.deployment import is_standalone, supports_transactions
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, write_background

TRANSACTIONAL = """
background = {"collection": "users", "from": 1, "to": 2, "batch_size": 10, "max_parallel": 2,
              "transaction": {"timeout_ms": 10000, "max_retries": 8}}

def migrate(doc, ctx):
    ctx.db.audit.insert_one({"user": doc["_id"]}, session=ctx.session)
    first, _, last = doc.pop("name").partition(" ")
    return {**doc, "first": first, "last": last}
"""


@pytest.fixture
def direct_client(
    mongo_uri: str, mongo_client: MongoClient[dict[str, Any]]
) -> Iterator[MongoClient[dict[str, Any]]]:
    """A ``directConnection=true`` client to the test server's primary (topology Single)."""
    host, port = mongo_client.primary or mongo_client.address or ("127.0.0.1", 27017)
    parsed = parse_uri(mongo_uri)
    client: MongoClient[dict[str, Any]] = MongoClient(
        host,
        port,
        directConnection=True,
        username=parsed["username"],
        password=parsed["password"],
        tz_aware=True,
    )
    try:
        yield client
    finally:
        client.close()


def test_a_direct_connection_to_a_replica_set_member_supports_transactions(
    direct_client: MongoClient[dict[str, Any]],
) -> None:
    direct_client.admin.command("ping")
    assert direct_client.topology_description.topology_type == TOPOLOGY_TYPE.Single
    assert not is_standalone(direct_client)
    assert supports_transactions(direct_client)


def test_a_transactional_migration_runs_over_a_direct_connection(
    direct_client: MongoClient[dict[str, Any]],
    db: Database[dict[str, Any]],
    tmp_path: Path,
) -> None:
    migrations = tmp_path / "migrations"
    write_background(migrations, body=TRANSACTIONAL)
    db.users.insert_many([{"_id": i, "name": f"A{i} B{i}", "_v": 1} for i in range(50)])
    db.create_collection("audit")
    with Migronaut(client=direct_client, database=db.name, migrations_dir=str(migrations)) as kit:
        kit.runs.up()
        kit.background.run(SPLIT_NAME)
        assert kit_json.status(kit, SPLIT_NAME)["status"] == "completed"
    assert db.users.count_documents({"_v": 2, "first": {"$exists": True}}) == 50
    assert db.audit.count_documents({}) == 50


def test_a_standalone_server_still_has_no_transactions(standalone_uri: str) -> None:
    with MongoClient(standalone_uri) as client:
        assert is_standalone(client)
        assert not supports_transactions(client)
