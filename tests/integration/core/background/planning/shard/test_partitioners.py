"""Shard-aware background migrations, end to end on the local replica set.

The replica set is not sharded: with ``background_shard_aware`` on ``auto`` or
``off`` everything plans and runs by ``_id``, as before. The shard-aware path
is then driven for real — plans, ``min``/``max`` index reads, targeted write
filters, per-shard lane caps, replans — by pointing the kit's shard catalog at
a scratch database holding recorded ``config.collections`` / ``config.chunks``
documents (the shapes a 7.0 ``mongos`` stores) for the test's collection: every
read and write still goes to the real server; only *where the metadata comes
from* differs from a cluster.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from bson import Int64, MaxKey, MinKey, ObjectId, Timestamp
from bson.binary import Binary, UuidRepresentation
from pymongo import MongoClient, monitoring
from pymongo.database import Database

from migronaut_core import Migronaut
from migronaut_core.background.indexes import probe_hint
from migronaut_core.background.job import job_for
from migronaut_core.background.planning.partition import find
from migronaut_core.background.planning.shard import UNKNOWN, ShardCatalog, Sharding
from migronaut_core.errors import ConfigInvalidError
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background

Doc = dict[str, Any]
VERSIONED = {"users": {"versioning": {"field": "_v"}}}


@pytest.fixture(autouse=True)
def _replica_set_only(mongo_client: MongoClient[Doc]) -> None:
    """These tests profile reads and fake the cluster metadata: a replica set's job."""
    mongo_client.admin.command("ping")
    if mongo_client.topology_description.topology_type_name == "Sharded":
        pytest.skip("runs on a replica set; test_sharded_cluster.py covers a real mongos")


@pytest.fixture
def config_db(mongo_client: MongoClient[Doc], db: Database[Doc]) -> Iterator[Database[Doc]]:
    """Where the recorded cluster metadata lives (a stand-in for ``config``)."""
    database = mongo_client[f"{db.name}_cfg"]
    yield database
    mongo_client.drop_database(database.name)


def _uuid() -> Binary:
    return Binary.from_uuid(uuid.uuid4(), UuidRepresentation.STANDARD)


def record_cluster(
    config_db: Database[Doc],
    namespace: str,
    key: Doc,
    bounds: list[Any],
    shards: list[str],
    *,
    epoch: int = 1,
) -> Binary:
    """Record a sharded collection: its collection document and chunks cut at ``bounds``."""
    collection_uuid = _uuid()
    field = next(iter(key))
    config_db.collections.replace_one(
        {"_id": namespace},
        {
            "_id": namespace,
            "lastmodEpoch": ObjectId(),
            "lastmod": datetime.now(UTC),
            "timestamp": Timestamp(1_709_294_400 + epoch, 1),
            "uuid": collection_uuid,
            "key": key,
            "unique": False,
            "noBalance": False,
        },
        upsert=True,
    )
    points = [MinKey(), *bounds, MaxKey()]
    config_db.chunks.delete_many({"uuid": {"$ne": collection_uuid}})
    config_db.chunks.insert_many(
        [
            {
                "_id": ObjectId(),
                "uuid": collection_uuid,
                "min": {field: low},
                "max": {field: high},
                "shard": shards[index],
                "lastmod": Timestamp(1, index),
                "onCurrentShardSince": Timestamp(1_709_294_400, 1),
                "history": [{"validAfter": Timestamp(1_709_294_400, 1), "shard": shards[index]}],
            }
            for index, (low, high) in enumerate(itertools.pairwise(points))
        ]
    )
    return collection_uuid


def as_cluster(kit: Migronaut, config_db: Database[Doc]) -> None:
    """Make the kit see a sharded cluster whose metadata is the recorded one."""
    kit._runtime.catalog = ShardCatalog(kit.client, config_db=config_db, sharded=True)


def live_by_group(db: Database[Doc]) -> Counter[str | None]:
    live = db.migronaut_background_partitions.find({"lease": {"$exists": True}}, {"group": 1})
    return Counter(doc.get("group") for doc in live)


def assert_all_split(db: Database[Doc], count: int) -> None:
    assert db.users.count_documents({"_v": 2}) == count
    assert db.users.count_documents({"name": {"$exists": True}}) == 0
    for doc in db.users.aggregate([{"$sample": {"size": 50}}]):
        assert doc["first"] == f"First{doc['n']}"


# ─── not sharded: exactly as before ───────────────────────────────────────────


@pytest.mark.parametrize("mode", ["auto", "off"])
def test_an_unsharded_collection_plans_and_runs_by_id(
    mongo_uri: str, db: Database[Doc], migrations: Path, mode: str
) -> None:
    seed_users(db, 5_000)
    db.users.create_index([("_v", 1), ("_id", 1)])
    write_background(migrations, max_parallel=4)
    with make_kit(mongo_uri, db, migrations, background_shard_aware=mode) as kit:
        kit.runs.up()
        view = kit_json.run(kit, SPLIT_NAME, concurrency=4)
    assert view["status"] == "completed" and view["totals"]["migrated"] == 5_000
    plan = db.migronaut_background.find_one({"_id": SPLIT_NAME})["plan"]
    assert plan["partitioner"] == "id-range" and plan["method"] == "sample"
    assert "epoch" not in plan and "sharding" not in plan  # nothing new in the state
    assert view["sharding"] == {"mode": "off"}
    partitions = db.migronaut_background_partitions.find({"migration": SPLIT_NAME})
    assert all("group" not in partition for partition in partitions)
    assert_all_split(db, 5_000)


def test_off_keeps_id_ranges_on_a_sharded_collection(
    mongo_uri: str, db: Database[Doc], config_db: Database[Doc], migrations: Path
) -> None:
    seed_users(db, 3_000)
    db.users.create_index([("_v", 1), ("_id", 1)])
    db.users.create_index([("_v", 1), ("n", 1), ("_id", 1)])
    record_cluster(config_db, f"{db.name}.users", {"n": 1}, [1_000, 2_000], ["a", "b", "c"])
    write_background(migrations, max_parallel=2)
    with make_kit(mongo_uri, db, migrations, background_shard_aware="off") as kit:
        as_cluster(kit, config_db)
        kit.runs.up()
        view = kit_json.run(kit, SPLIT_NAME, concurrency=2)
    assert view["status"] == "completed" and view["sharding"] == {"mode": "off"}
    assert db.migronaut_background.find_one({"_id": SPLIT_NAME})["plan"]["partitioner"] == (
        "id-range"
    )


# ─── collection definitions and converge ──────────────────────────────────────


def test_converge_creates_the_version_index_and_batches_use_it(
    mongo_uri: str,
    db: Database[Doc],
    migrations: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    seed_users(db, 3_000)
    write_background(migrations, batch_size=250, max_parallel=2)
    with make_kit(mongo_uri, db, migrations, collections=VERSIONED, lock_ttl_seconds=5) as kit:
        kit.runs.up()
        with caplog.at_level(logging.WARNING):
            kit.background.coordinate(SPLIT_NAME)
        assert any("has no {_v: 1, _id: 1} index" in r.getMessage() for r in caplog.records)

        report = kit.runs.converge()
        assert [item.to_dict() for item in report.collections] == [
            {
                "collection": "users",
                "action": "created",
                "index": {"_v": 1, "_id": 1},
                "name": "_v_1__id_1",
                "sharding": "off",
            }
        ]
        assert kit.runs.converge().collections[0].action == "exists"  # idempotent, never drops
        caplog.clear()
        db.command("profile", 2)
        with caplog.at_level(logging.WARNING):
            view = kit_json.run(kit, SPLIT_NAME, concurrency=2)
        db.command("profile", 0)
    assert view["status"] == "completed"
    assert not [r for r in caplog.records if "index" in r.getMessage()], "still warned"
    reads = list(
        db.system.profile.find({"ns": f"{db.name}.users", "op": "query", "command.find": "users"})
    )
    assert reads, "no batch read was profiled"
    assert all(read["planSummary"] == "IXSCAN { _v: 1, _id: 1 }" for read in reads)


def test_the_batch_query_of_a_lane_reads_the_version_index(
    mongo_uri: str, db: Database[Doc], migrations: Path
) -> None:
    seed_users(db, 2_000)
    write_background(migrations, batch_size=100, max_parallel=2)
    with make_kit(mongo_uri, db, migrations, collections=VERSIONED, lock_ttl_seconds=5) as kit:
        kit.runs.up()
        kit.runs.converge()
        kit.background.coordinate(SPLIT_NAME)
        state = db.migronaut_background.find_one({"_id": SPLIT_NAME})
        job = job_for(kit._runtime, SPLIT_NAME, state)
        partition = db.migronaut_background_partitions.find_one({"migration": SPLIT_NAME})
        query = job.partitioner.batch_query(
            partition["scope"], {}, limit=100, match=job.match, hint=job.hint
        )
    explained = db.users.find(query.filter, sort=query.sort, limit=100, hint=query.hint).explain()
    winning = explained["queryPlanner"]["winningPlan"]
    assert "IXSCAN" in repr(winning) and "'keyPattern': {'_v': 1, '_id': 1}" in repr(winning)
    assert "SORT" not in repr(winning)  # read in index order


def test_a_spec_takes_its_versioning_from_the_definition(
    mongo_uri: str, db: Database[Doc], migrations: Path, tmp_path: Path
) -> None:
    definitions = tmp_path / "collections"
    definitions.mkdir()
    (definitions / "users.toml").write_text(
        'versioning = { field = "ver", revision_field = "rev" }\n'
    )
    (definitions / "orders.py").write_text('versioning = {"field": "_v"}\n')
    (definitions / "README.md").write_text("not a definition\n")
    db.users.insert_many(
        [{"_id": n, "name": f"First{n} Last{n}", "ver": 1, "n": n} for n in range(50)]
    )
    write_background(migrations)  # its spec names no field: the definition's applies
    with make_kit(mongo_uri, db, migrations, collections_dir=str(definitions)) as kit:
        kit.runs.up()
        spec = db.migronaut_background.find_one({"_id": SPLIT_NAME})["spec"]
        assert (spec["field"], spec["revision_field"]) == ("ver", "rev")
        view = kit_json.run(kit, SPLIT_NAME)
        report = kit.runs.converge()
    assert view["status"] == "completed"
    assert db.users.count_documents({"ver": 2, "rev": 1}) == 50
    assert [(item.collection, item.action, item.index) for item in report.collections] == [
        ("orders", "created", {"_v": 1, "_id": 1}),
        ("users", "created", {"ver": 1, "_id": 1}),
    ]


def test_a_spec_that_contradicts_the_definition_is_refused_before_anything_is_written(
    mongo_uri: str, db: Database[Doc], migrations: Path
) -> None:
    write_background(migrations, extra='"field": "_v",')
    collections = {"users": {"versioning": {"field": "ver"}}}
    with (
        make_kit(mongo_uri, db, migrations, collections=collections) as kit,
        pytest.raises(ConfigInvalidError) as raised,
    ):
        kit.runs.up()
    assert raised.value.context["key"] == "field"
    assert "declared versioning" in raised.value.message
    assert db.migronaut_background.count_documents({}) == 0
    assert db.migronaut_changelog.count_documents({"status": "applied"}) == 0


# ─── shard-aware on recorded cluster metadata ─────────────────────────────────


@pytest.mark.parametrize(
    ("bounds", "shards", "method"),
    [
        # Four chunks, three shards: fewer chunks than the pass is worth, cut at samples.
        ([5_000, 10_000, 15_000], ["s0", "s0", "s1", "s2"], "sampled"),
        # Forty chunks in three runs: chunk boundaries are enough.
        (
            [500 * n for n in range(1, 40)],
            ["s0"] * 14 + ["s1"] * 13 + ["s2"] * 13,
            "chunks",
        ),
    ],
)
def test_a_sharded_collection_is_split_per_shard_and_capped_per_shard(
    mongo_uri: str,
    db: Database[Doc],
    config_db: Database[Doc],
    migrations: Path,
    bounds: list[int],
    shards: list[str],
    method: str,
) -> None:
    seed_users(db, 20_000)
    record_cluster(config_db, f"{db.name}.users", {"n": 1}, bounds, shards)
    write_background(migrations, batch_size=250, max_parallel=6, extra='"shard_concurrency": 1,')
    peak: Counter[str | None] = Counter()
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            for group, count in live_by_group(db).items():
                peak[group] = max(peak[group], count)
            time.sleep(0.01)

    with make_kit(mongo_uri, db, migrations, collections=VERSIONED, lock_ttl_seconds=5) as kit:
        as_cluster(kit, config_db)
        report = kit.runs.converge()
        assert report.collections[0].index == {"_v": 1, "n": 1, "_id": 1}
        assert report.collections[0].sharding == "shard"
        kit.runs.up()
        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            db.command("profile", 2)
            view = kit_json.run(kit, SPLIT_NAME, concurrency=6)
        finally:
            db.command("profile", 0)
            stop.set()
            sampler.join()
    assert view["status"] == "completed"
    assert view["totals"]["migrated"] == 20_000
    assert view["sharding"] == {"mode": method, "key": {"n": 1}, "groups": 3}
    assert_all_split(db, 20_000)
    assert set(peak) <= {"s0", "s1", "s2"} and max(peak.values()) == 1
    partitions = list(db.migronaut_background_partitions.find({"migration": SPLIT_NAME}))
    assert {p["group"] for p in partitions} == {"s0", "s1", "s2"}
    # Batches read the sharded version index, bounded by min/max; writes carry the key.
    reads = list(db.system.profile.find({"op": "query", "command.find": "users"}))
    assert reads and all(r["planSummary"] == "IXSCAN { _v: 1, n: 1, _id: 1 }" for r in reads)
    assert all("min" in r["command"] and "max" in r["command"] for r in reads)
    writes = list(db.system.profile.find({"op": "update", "ns": f"{db.name}.users"}))
    assert writes and all("n" in write["command"]["q"] for write in writes)


def test_a_hashed_shard_key_is_read_by_hash_ranges(
    mongo_uri: str, db: Database[Doc], config_db: Database[Doc], migrations: Path
) -> None:
    seed_users(db, 12_000)
    quarter = 2**62
    record_cluster(
        config_db,
        f"{db.name}.users",
        {"n": "hashed"},
        [Int64(-quarter), Int64(0), Int64(quarter)],
        ["s0", "s1", "s1", "s2"],
    )
    write_background(migrations, batch_size=500, max_parallel=4, extra='"shard_concurrency": 2,')
    with make_kit(mongo_uri, db, migrations, collections=VERSIONED, lock_ttl_seconds=5) as kit:
        as_cluster(kit, config_db)
        assert kit.runs.converge().collections[0].index == {"_v": 1, "n": "hashed", "_id": 1}
        kit.runs.up()
        view = kit_json.run(kit, SPLIT_NAME, concurrency=4)
    assert view["status"] == "completed"
    assert view["totals"]["migrated"] == 12_000  # every document once, none twice
    assert view["sharding"]["mode"] == "sampled" and view["sharding"]["groups"] == 3
    assert_all_split(db, 12_000)


def test_every_document_falls_in_exactly_one_planned_scope(
    mongo_uri: str, db: Database[Doc], config_db: Database[Doc], migrations: Path
) -> None:
    seed_users(db, 4_000)
    db.users.insert_many(
        [{"_id": f"s{n}", "name": "A B", "_v": 1, "n": f"k{n}"} for n in range(300)]
    )
    db.users.insert_many([{"_id": f"m{n}", "name": "A B", "_v": 1} for n in range(100)])
    record_cluster(config_db, f"{db.name}.users", {"n": 1}, [1_000, "k5"], ["a", "b", "c"])
    write_background(migrations, max_parallel=4)
    with make_kit(mongo_uri, db, migrations, collections=VERSIONED, lock_ttl_seconds=5) as kit:
        as_cluster(kit, config_db)
        kit.runs.converge()
        kit.runs.up()
        kit.background.coordinate(SPLIT_NAME)
        state = db.migronaut_background.find_one({"_id": SPLIT_NAME})
        job = job_for(kit._runtime, SPLIT_NAME, state)
    scopes = [
        p["scope"] for p in db.migronaut_background_partitions.find({"migration": SPLIT_NAME})
    ]
    counts = [db.users.count_documents(job.partitioner.scope_filter(scope)) for scope in scopes]
    assert sum(counts) == 4_400
    # …and the lanes' reads (min/max on the index) reach the same documents.
    read = 0
    for scope in scopes:
        query = job.partitioner.batch_query(scope, {}, limit=10_000, match=job.match, hint=job.hint)
        read += len(find(db.users, query))
    assert read == 4_400


def test_a_reshard_makes_lanes_stale_and_the_coordinator_replan(
    mongo_uri: str, db: Database[Doc], config_db: Database[Doc], migrations: Path
) -> None:
    seed_users(db, 6_000)
    namespace = f"{db.name}.users"
    record_cluster(config_db, namespace, {"n": 1}, [3_000], ["s0", "s1"], epoch=1)
    write_background(migrations, batch_size=200, max_parallel=2)
    with make_kit(mongo_uri, db, migrations, collections=VERSIONED, lock_ttl_seconds=5) as kit:
        as_cluster(kit, config_db)
        kit.runs.converge()
        kit.runs.up()
        assert kit.background.coordinate(SPLIT_NAME).next == "process"
        first = db.migronaut_background.find_one({"_id": SPLIT_NAME})["plan"]
        assert kit.background.run_slice(SPLIT_NAME, slice_ms=100).outcome in (
            "yielded",
            "exhausted",
        )

        record_cluster(config_db, namespace, {"n": 1}, [1_000, 4_000], ["s1", "s0", "s2"], epoch=2)
        assert kit.background.run_slice(SPLIT_NAME).outcome == "stale"
        kit.background.coordinate(SPLIT_NAME)
        state = db.migronaut_background.find_one({"_id": SPLIT_NAME})
        assert state["plan"]["token"] != first["token"]
        assert state["plan"]["epoch"] != first["epoch"]
        assert state["pass"] == 1  # a replan re-splits the same pass
        view = kit_json.run(kit, SPLIT_NAME, concurrency=2)
    assert view["status"] == "completed"
    assert view["totals"]["migrated"] == 6_000
    assert view["sharding"]["groups"] == 3
    assert_all_split(db, 6_000)


def test_a_transform_that_moves_a_document_between_chunks_is_a_document_error(
    mongo_uri: str, db: Database[Doc], config_db: Database[Doc], migrations: Path
) -> None:
    seed_users(db, 1_000)
    record_cluster(config_db, f"{db.name}.users", {"n": 1}, [500], ["s0", "s1"])
    write_background(
        migrations,
        body="""
        background = {"collection": "users", "from": 1, "to": 2, "max_document_errors": 100}

        def migrate(doc, ctx):
            if doc["n"] % 100 == 0:
                doc["n"] = -doc["n"] - 1
            doc["seen"] = True
            return doc
        """,
    )
    with make_kit(mongo_uri, db, migrations, collections=VERSIONED, lock_ttl_seconds=5) as kit:
        as_cluster(kit, config_db)
        kit.runs.converge()
        kit.runs.up()
        view = kit_json.run(kit, SPLIT_NAME, concurrency=2)
    assert view["status"] == "completed"
    assert view["failed_documents"] == 10
    assert {sample["reason"] for sample in view["failed_document_samples"]} == {"shard-key"}
    assert db.users.count_documents({"n": {"$lt": 0}}) == 0  # never written
    assert db.users.count_documents({"_v": 2, "seen": True}) == 990


class _NoPrivilege(ShardCatalog):
    """A catalog on a cluster whose ``config`` this user may not read."""

    def sharding_of(self, namespace: str) -> Any:
        return UNKNOWN


def test_an_unreadable_shard_key_splits_by_id_untargeted_and_says_so_once(
    mongo_uri: str, db: Database[Doc], migrations: Path, caplog: pytest.LogCaptureFixture
) -> None:
    seed_users(db, 2_000)
    db.users.create_index([("_v", 1), ("_id", 1)])
    write_background(migrations, max_parallel=2)
    with make_kit(mongo_uri, db, migrations, collections=VERSIONED, lock_ttl_seconds=5) as kit:
        kit._runtime.catalog = _NoPrivilege(kit.client, sharded=True)
        assert kit.runs.converge().collections[0].sharding == "unknown"
        kit.runs.up()
        with caplog.at_level(logging.WARNING):
            view = kit_json.run(kit, SPLIT_NAME, concurrency=2)
    assert view["status"] == "completed"
    assert view["sharding"] == {"mode": "untargeted"}
    warned = [r for r in caplog.records if "shard key cannot be read" in r.getMessage()]
    assert len(warned) == 1


def test_a_missing_sharded_version_index_leaves_writes_targeted(
    mongo_uri: str,
    db: Database[Doc],
    config_db: Database[Doc],
    migrations: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    seed_users(db, 2_000)
    db.users.create_index([("_v", 1), ("_id", 1)])
    record_cluster(config_db, f"{db.name}.users", {"n": 1}, [1_000], ["s0", "s1"])
    write_background(migrations, max_parallel=2)
    with make_kit(mongo_uri, db, migrations) as kit:
        as_cluster(kit, config_db)
        kit.runs.up()
        with caplog.at_level(logging.WARNING):
            db.command("profile", 2)
            view = kit_json.run(kit, SPLIT_NAME, concurrency=2)
            db.command("profile", 0)
    assert view["status"] == "completed"
    assert view["sharding"] == {"mode": "untargeted", "key": {"n": 1}}
    assert any("is sharded but has no" in r.getMessage() for r in caplog.records)
    writes = list(db.system.profile.find({"op": "update", "ns": f"{db.name}.users"}))
    assert writes and all("n" in write["command"]["q"] for write in writes)


def test_the_drift_probe_uses_the_sharded_version_index(
    mongo_uri: str, db: Database[Doc], config_db: Database[Doc], migrations: Path
) -> None:
    record_cluster(config_db, f"{db.name}.users", {"n": 1}, [10], ["s0", "s1"])
    write_background(migrations)
    with make_kit(mongo_uri, db, migrations, collections=VERSIONED, lock_ttl_seconds=5) as kit:
        as_cluster(kit, config_db)
        kit.runs.converge()
        state_spec = kit._runtime.load(SPLIT_NAME).spec
        assert probe_hint(kit._runtime, state_spec) == [("_v", 1), ("n", 1), ("_id", 1)]


def test_recorded_facts_read_through_the_catalog(
    mongo_client: MongoClient[Doc], db: Database[Doc], config_db: Database[Doc]
) -> None:
    collection_uuid = record_cluster(config_db, "app.users", {"n": 1}, [5], ["s0", "s1"])
    catalog = ShardCatalog(mongo_client, config_db=config_db, sharded=True)
    facts = catalog.sharding_of("app.users")
    assert isinstance(facts, Sharding) and facts.uuid == collection_uuid
    assert [chunk.shard for chunk in catalog.chunks_of(facts)] == ["s0", "s1"]
    assert catalog.sharding_of("app.other") is None
    # On this replica set, a catalog that asks the topology says "not sharded".
    assert ShardCatalog(mongo_client).is_sharded() is False


# ─── a dead lane's note on a shard-aware partition ────────────────────────────


class LateWritesBeforeTheFirstRead(monitoring.CommandListener):
    """Lands a stalled lane's writes of ``late`` just before the next lane's first read."""

    def __init__(self, users: Any, late: list[int]) -> None:
        self.users = users
        self.late = late
        self.landed = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        first_read = event.command_name == "find" and event.command.get("find") == "users"
        if first_read and not self.landed:
            for n in self.late:
                self.landed += self.users.update_one(
                    {"_id": n, "_v": 1},
                    {
                        "$set": {"first": f"First{n}", "last": f"Last{n}", "_v": 2},
                        "$unset": {"name": ""},
                    },
                ).modified_count

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def test_a_dead_lanes_note_is_settled_after_the_shard_aware_read(
    mongo_uri: str, db: Database[Doc], config_db: Database[Doc], migrations: Path
) -> None:
    """Shard-aware partitions are read one batch at a time (no read-ahead); their first
    batch after a dead lane's settles its note once it has read. Half the noted batch
    lands (as a lane that only stalled would send it) just before that read: the read
    no longer returns those documents, and the settle, counted after it, does."""
    seed_users(db, 600)
    record_cluster(config_db, f"{db.name}.users", {"n": 1}, [], ["s0"])
    write_background(migrations, batch_size=100, max_parallel=1)
    listener = LateWritesBeforeTheFirstRead(db.users, list(range(50)))
    client: MongoClient[Doc] = MongoClient(mongo_uri, tz_aware=True, event_listeners=[listener])
    try:
        with make_kit(mongo_uri, db, migrations, client=client, collections=VERSIONED) as kit:
            as_cluster(kit, config_db)
            kit.runs.converge()
            kit.runs.up()
            assert kit.background.coordinate(SPLIT_NAME).next == "process"
            # What a lane that died after noting its first batch leaves behind.
            noted = db.migronaut_background_partitions.update_many(
                {"migration": SPLIT_NAME}, {"$set": {"inflight": {"ids": list(range(100))}}}
            )
            assert noted.modified_count == 1
            view = kit_json.run(kit, SPLIT_NAME)
    finally:
        client.close()
    assert listener.landed == 50
    assert view["status"] == "completed"
    assert view["totals"]["migrated"] == 600, view["totals"]
    assert view["totals"]["scanned"] == 600, view["totals"]
    assert_all_split(db, 600)
