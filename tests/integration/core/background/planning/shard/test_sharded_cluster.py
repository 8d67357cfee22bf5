"""The 20k-document migration on a real sharded cluster, through ``mongos``.

Runs only when ``MIGRONAUT_TEST_MONGODB_URI`` points at a ``mongos`` (no package
here ships one): see docs/sharding.md for a three-shard cluster in Docker.
Everywhere else it is skipped, saying why; the shard-aware code itself is
covered by tests/unit/core/background/planning/shard/test_partitioners.py and
tests/integration/core/background/planning/shard/test_partitioners.py.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.database import Database

from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background

Doc = dict[str, Any]
VERSIONED = {"users": {"versioning": {"field": "_v"}}}


@pytest.fixture
def cluster(mongo_client: MongoClient[Doc]) -> MongoClient[Doc]:
    """The session's client, when it talks to a ``mongos``; else the test is skipped."""
    if not os.environ.get("MIGRONAUT_TEST_MONGODB_URI"):
        pytest.skip(
            "needs a sharded cluster: set MIGRONAUT_TEST_MONGODB_URI to a mongos "
            "(docs/sharding.md starts one in Docker)"
        )
    mongo_client.admin.command("ping")
    kind = mongo_client.topology_description.topology_type_name
    if kind != "Sharded":
        pytest.skip(f"MIGRONAUT_TEST_MONGODB_URI points at a {kind} deployment, not a mongos")
    return mongo_client


@pytest.fixture
def sharded_db(cluster: MongoClient[Doc], db: Database[Doc]) -> Iterator[Database[Doc]]:
    cluster.admin.command("enableSharding", db.name)
    yield db


def _shards(cluster: MongoClient[Doc]) -> list[str]:
    return [shard["_id"] for shard in cluster.admin.command("listShards")["shards"]]


def _spread_ranged_chunks(cluster: MongoClient[Doc], namespace: str, count: int) -> None:
    """Split a ranged collection in four and deal the chunks out to the shards."""
    shards = _shards(cluster)
    for point in (count // 4, count // 2, 3 * count // 4):
        cluster.admin.command("split", namespace, middle={"n": point})
    for index, point in enumerate((0, count // 4, count // 2, 3 * count // 4)):
        cluster.admin.command(
            "moveChunk", namespace, find={"n": point}, to=shards[index % len(shards)]
        )


@pytest.mark.parametrize("key", [{"n": "hashed"}, {"n": 1}])
def test_twenty_thousand_documents_on_a_sharded_cluster(
    cluster: MongoClient[Doc],
    sharded_db: Database[Doc],
    mongo_uri: str,
    migrations: Path,
    key: Doc,
) -> None:
    db = sharded_db
    namespace = f"{db.name}.users"
    cluster.admin.command("shardCollection", namespace, key=key)
    if key == {"n": 1}:
        _spread_ranged_chunks(cluster, namespace, 20_000)
    seed_users(db, 20_000)
    write_background(migrations, batch_size=500, max_parallel=6, extra='"shard_concurrency": 1,')

    peak: Counter[str | None] = Counter()
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            live = Counter(
                doc.get("group")
                for doc in db.migronaut_background_partitions.find(
                    {"lease": {"$exists": True}}, {"group": 1}
                )
            )
            for group, count in live.items():
                peak[group] = max(peak[group], count)
            time.sleep(0.05)

    with make_kit(mongo_uri, db, migrations, collections=VERSIONED, lock_ttl_seconds=5) as kit:
        report = kit.runs.converge()
        assert report.collections[0].sharding == "shard"
        assert report.collections[0].index == {"_v": 1, **key, "_id": 1}
        kit.runs.up()
        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            view = kit_json.run(kit, SPLIT_NAME, concurrency=6)
        finally:
            stop.set()
            sampler.join()
    assert view["status"] == "completed"
    assert view["totals"]["migrated"] == 20_000
    assert view["sharding"]["mode"] in ("chunks", "sampled")
    assert view["sharding"]["key"] == key
    assert view["sharding"]["groups"] >= 1
    assert db.users.count_documents({"_v": 2}) == 20_000
    assert db.users.count_documents({"name": {"$exists": True}}) == 0
    grouped = {group: count for group, count in peak.items() if group is not None}
    assert not grouped or max(grouped.values()) <= 1
