"""Background migrations end to end on a real MongoDB: the engine's promises."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from bson import Int64, ObjectId
from bson.binary import Binary, UuidRepresentation
from pymongo import MongoClient
from pymongo.database import Database

from migronaut_core import BackgroundFailedError, Migronaut, RunAbortedError
from migronaut_core.background.cancel import CancelToken
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.servers import fail_point


@pytest.fixture
def kit(mongo_uri: str, db: Database[dict[str, Any]], migrations: Path) -> Iterator[Migronaut]:
    with make_kit(mongo_uri, db, migrations, lock_ttl_seconds=5) as kit:
        yield kit


def assert_all_split(db: Database[dict[str, Any]], count: int) -> None:
    assert db.users.count_documents({"_v": 2}) == count
    assert db.users.count_documents({"name": {"$exists": True}}) == 0
    for doc in db.users.aggregate([{"$sample": {"size": 50}}]):
        assert doc["first"] == f"First{doc['n']}"
        assert doc["last"] == f"Last{doc['n']}"


def test_twenty_thousand_documents_with_four_lanes(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 20_000)
    db.users.create_index([("_v", 1), ("_id", 1)])
    write_background(migrations, max_parallel=4)
    result = kit.runs.up()
    assert [(m.name, m.status) for m in result.migrations] == [(SPLIT_NAME, "applied")]
    assert kit_json.status(kit, SPLIT_NAME)["status"] == "pending"

    leases: list[int] = []
    stop = threading.Event()

    def sample_leases() -> None:
        while not stop.is_set():
            leases.append(
                db.migronaut_background_partitions.count_documents({"lease": {"$exists": True}})
            )
            time.sleep(0.02)

    sampler = threading.Thread(target=sample_leases)
    sampler.start()
    try:
        view = kit_json.run(kit, SPLIT_NAME, concurrency=4)
    finally:
        stop.set()
        sampler.join()
    assert view["status"] == "completed"
    assert view["totals"]["migrated"] == 20_000
    assert max(leases) <= 4
    assert max(leases) >= 2, "the lanes never overlapped"
    assert_all_split(db, 20_000)
    rows = {row.name: row for row in kit.runs.status()}
    assert rows[SPLIT_NAME].kind == "background"


def test_application_writes_during_the_run_are_never_lost(
    mongo_uri: str, db: Database[dict[str, Any]], migrations: Path
) -> None:
    count = 5_000
    db.users.insert_many(
        [{"_id": i, "name": f"First{i} Last{i}", "_v": 1, "rev": 0, "n": i} for i in range(count)]
    )
    db.users.create_index([("_v", 1), ("_id", 1)])
    write_background(migrations, batch_size=200, extra='"revision_field": "rev",')
    latest: dict[int, str] = {}
    stop = threading.Event()
    crashed: list[BaseException] = []

    def application() -> None:
        try:
            write_like_an_application()
        except BaseException as exc:
            crashed.append(exc)

    def write_like_an_application() -> None:
        rng = random.Random(7)
        writes = 0
        while not stop.is_set() or writes < 300:
            doc_id = rng.randrange(count)
            first = f"App{writes}"
            doc = db.users.find_one({"_id": doc_id})
            assert doc is not None
            if doc["_v"] == 1:
                update = {"$set": {"name": f"{first} Surname{doc_id}"}, "$inc": {"rev": 1}}
            else:
                update = {"$set": {"first": first, "last": f"Surname{doc_id}"}, "$inc": {"rev": 1}}
            # The application's own optimistic check: its write applies to what it read.
            result = db.users.update_one({"_id": doc_id, "rev": doc["rev"]}, update)
            if result.modified_count == 1:
                latest[doc_id] = first
                writes += 1

    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up()
        writer = threading.Thread(target=application)
        writer.start()
        try:
            view = kit_json.run(kit, SPLIT_NAME, concurrency=3)
        finally:
            stop.set()
            writer.join()
        # Whatever the application wrote after the last pass is old-shape again only if it
        # wrote `name`; a final run settles those.
        view = kit_json.run(kit, SPLIT_NAME, concurrency=1)
    assert crashed == []
    assert view["status"] == "completed"
    assert db.users.count_documents({"_v": 2}) == count
    assert len(latest) > 100
    for doc_id, first in latest.items():
        doc = db.users.find_one({"_id": doc_id})
        assert doc is not None
        assert doc["first"] == first, doc_id
        assert doc["last"] == f"Surname{doc_id}"
        assert "name" not in doc


def test_old_shape_documents_written_during_the_run_are_taken_by_a_later_pass(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 3_000)
    write_background(migrations, batch_size=100, max_parallel=2)
    kit.runs.up()
    inserted = threading.Event()

    def late_writer(event: str, payload: dict[str, Any]) -> None:
        if not inserted.is_set():
            inserted.set()
            seed_users(db, 500, start=-1_000)  # below every cursor: missed this pass

    kit.background.on("background:batch", late_writer)
    view = kit_json.run(kit, SPLIT_NAME, concurrency=2)
    assert inserted.is_set()
    assert view["status"] == "completed"
    assert view["pass"] >= 2
    assert view["totals"]["migrated"] == 3_500
    assert_all_split(db, 3_500)


def test_a_later_pass_is_timed_from_its_own_plan(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    """The average rate and the ETA of a second pass count from when it was planned, not
    from the first plan (pinned a day back here): the rate is not diluted by pass one."""
    seed_users(db, 1_000)
    write_background(migrations, batch_size=50, max_parallel=1)
    kit.runs.up()
    token = CancelToken()
    second_pass = threading.Event()

    def late_writer(event: str, payload: dict[str, Any]) -> None:
        if second_pass.is_set():
            token.cancel("second pass under way")
        elif db.users.count_documents({"n": {"$lt": 0}}) == 0:
            seed_users(db, 500, start=-1_000)  # below every cursor: left for pass two

    kit.background.on("background:batch", late_writer)
    kit.background.on("background:partitioned", lambda e, p: p["pass"] == 2 and second_pass.set())
    with pytest.raises(RunAbortedError):
        kit.background.run(SPLIT_NAME, cancel=token)
    day_ago = datetime.now(UTC) - timedelta(days=1)
    db.migronaut_background.update_one({"_id": SPLIT_NAME}, {"$set": {"started_at": day_ago}})

    view = kit.background.status(SPLIT_NAME)
    assert view is not None
    assert (view.status, view.pass_number) == ("running", 2)
    assert 0 < view.progress.done < view.progress.estimate == 500
    assert view.average_docs_per_second is not None and view.average_docs_per_second > 1
    assert view.eta_seconds is not None and 0 < view.eta_seconds < 3_600
    assert view.pass_started_at is not None and view.started_at is not None
    assert view.pass_started_at > view.started_at


def test_each_batch_event_carries_the_batch_size_it_read_with(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 1_050)
    write_background(migrations, batch_size=100, max_parallel=1)
    kit.runs.up()
    batches: list[dict[str, Any]] = []
    kit.background.on("background:batch", lambda event, payload: batches.append(payload))
    assert kit_json.run(kit, SPLIT_NAME, concurrency=1)["status"] == "completed"
    assert {batch["batch_size"] for batch in batches} == {100}
    assert all(batch["counters"]["scanned"] <= 100 for batch in batches)
    assert sum(batch["counters"]["scanned"] for batch in batches) == 1_050


def test_transform_errors_within_the_budget_are_reported_without_values(
    mongo_uri: str, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 1_000)
    write_background(
        migrations,
        body="""
        background = {"collection": "users", "from": 1, "to": 2, "batch_size": 100,
                      "max_document_errors": 5}

        def migrate(doc, ctx):
            if doc["n"] % 250 == 7:
                raise ValueError("secret " + doc["name"])
            doc["first"], _, doc["last"] = doc.pop("name").partition(" ")
            return doc
        """,
    )
    logs: list[str] = []
    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up()
        kit.background.on("*", lambda event, payload: logs.append(repr(payload)))
        view = kit_json.run(kit, SPLIT_NAME, concurrency=2)
    assert view["status"] == "completed"
    assert view["failed_documents"] == 4
    assert view["totals"]["migrated"] == 996
    samples = view["failed_document_samples"]
    assert sorted(sample["id"] for sample in samples) == [7, 257, 507, 757]
    assert {sample["reason"] for sample in samples} == {"transform"}
    assert {sample["error"] for sample in samples} == {"ValueError"}
    assert not any("secret" in line or "First7" in line for line in logs)
    assert db.users.count_documents({"_v": 1}) == 4


def test_transform_errors_over_the_budget_fail_the_migration(
    mongo_uri: str, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 500)
    write_background(
        migrations,
        body="""
        background = {"collection": "users", "from": 1, "to": 2, "batch_size": 50,
                      "max_document_errors": 2}

        def migrate(doc, ctx):
            if doc["n"] % 10 == 0:
                raise KeyError(doc["name"])
            return {**doc, "ok": True}
        """,
    )
    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up()
        with pytest.raises(BackgroundFailedError) as raised:
            kit.background.run(SPLIT_NAME, concurrency=2)
        assert "max_document_errors (2)" in raised.value.message
        assert "last: transform: KeyError" in raised.value.message
        assert "First" not in raised.value.message
        assert kit_json.status(kit, SPLIT_NAME)["status"] == "failed"


def test_the_error_budget_names_the_last_write_error_by_its_code_not_its_value(
    mongo_uri: str, db: Database[dict[str, Any]], migrations: Path
) -> None:
    db.users.create_index("email", unique=True, sparse=True)
    db.users.insert_many([{"_id": i, "_v": 1, "n": i} for i in range(20)])
    write_background(
        migrations,
        body="""
        background = {"collection": "users", "from": 1, "to": 2}

        def migrate(doc, ctx):
            doc["email"] = "same@example.com" if doc["n"] in (3, 4) else f"u{doc['n']}@example.com"
            return doc
        """,
    )
    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up()
        with pytest.raises(BackgroundFailedError) as raised:
            kit.background.run(SPLIT_NAME)
        state = db.migronaut_background.find_one({"_id": SPLIT_NAME})
    last = "last: write: duplicate key on index email_1 (code 11000)"
    assert last in raised.value.message
    assert state is not None and last in state["last_error"]
    assert "same@example.com" not in raised.value.message + state["last_error"]


def test_mixed_id_types_are_all_migrated(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    ids: list[Any] = [ObjectId() for _ in range(800)]
    ids += list(range(300)) + [Int64(10**12 + i) for i in range(50)] + [0.5 + i for i in range(50)]
    ids += [f"user-{i:04d}" for i in range(300)]
    ids += [Binary.from_uuid(uuid.uuid4(), UuidRepresentation.STANDARD) for _ in range(100)]
    ids += [datetime(2020, 1, 1, tzinfo=UTC).replace(second=i) for i in range(3)]
    ids += [{"tenant": 1, "seq": i} for i in range(3)]
    random.Random(3).shuffle(ids)
    db.users.insert_many(
        [
            {"_id": value, "name": f"First{n} Last{n}", "_v": 1, "n": n}
            for n, value in enumerate(ids)
        ]
    )
    write_background(migrations, batch_size=64, max_parallel=4)
    kit.runs.up()
    view = kit_json.run(kit, SPLIT_NAME, concurrency=4)
    assert view["status"] == "completed"
    assert view["totals"]["migrated"] == len(ids)
    assert_all_split(db, len(ids))


def test_migrate_batch_with_the_wrong_length_fails_the_slice(
    mongo_uri: str, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 100)
    write_background(
        migrations,
        body="""
        background = {"collection": "users", "from": 1, "to": 2, "batch_size": 10,
                      "max_slice_failures": 2}

        def migrate_batch(docs, ctx):
            return docs[:-1]
        """,
    )
    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up()
        with pytest.raises(BackgroundFailedError) as raised:
            kit.background.run(SPLIT_NAME)
        assert "partition(s) failed" in raised.value.message
        assert "returned 9 result(s) for 10" in raised.value.message
    assert db.users.count_documents({"_v": 2}) == 0


def test_a_duplicate_key_is_a_document_error(
    mongo_uri: str, db: Database[dict[str, Any]], migrations: Path
) -> None:
    db.users.create_index("email", unique=True, sparse=True)
    db.users.insert_many([{"_id": i, "_v": 1, "n": i, "secret": f"s{i}"} for i in range(20)])
    write_background(
        migrations,
        body="""
        background = {"collection": "users", "from": 1, "to": 2, "max_document_errors": 5}

        def migrate(doc, ctx):
            doc["email"] = "same@example.com" if doc["n"] in (3, 4) else f"u{doc['n']}@example.com"
            return doc
        """,
    )
    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up()
        view = kit_json.run(kit, SPLIT_NAME)
    assert view["status"] == "completed"
    assert view["failed_documents"] == 1
    sample = view["failed_document_samples"][0]
    assert sample["reason"] == "write"
    assert sample["error"] == "duplicate key on index email_1 (code 11000)"
    assert "same@example.com" not in repr(view)


def test_the_failed_document_count_includes_the_pass_not_yet_rolled_up(
    mongo_uri: str, db: Database[dict[str, Any]], migrations: Path
) -> None:
    """Before the coordinator rolls a pass up, its failed documents count already (the CLI and
    the UI read this one total); after it, they are not counted twice."""
    seed_users(db, 300)
    db.users.insert_one({"_id": 10_000, "name": 7, "_v": 1, "n": 10_000})  # migrate() fails
    write_background(migrations, batch_size=100, max_parallel=1, extra='"max_document_errors": 5,')
    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up()
        assert kit.background.coordinate(SPLIT_NAME).next == "process"
        for _ in range(20):
            if kit.background.run_slice(SPLIT_NAME).outcome == "exhausted":
                break
        during = kit_json.status(kit, SPLIT_NAME)
        assert during["status"] == "running"
        assert during["failed_documents"] == 1
        for _ in range(10):
            if kit.background.coordinate(SPLIT_NAME).next == "done":
                break
        after = kit_json.status(kit, SPLIT_NAME)
    assert after["status"] == "completed"
    assert after["failed_documents"] == 1


SIDE_READ = """
background = {"collection": "users", "from": 1, "to": 2, "batch_size": 50, "max_parallel": 2}

def migrate(doc, ctx):
    plan = ctx.db.plans.find_one({"_id": doc["n"] % 3})
    return {**doc, "plan": plan["name"], "hits": doc.get("hits", 0) + 1}
"""


def test_a_dropped_connection_in_a_side_read_is_retried_not_a_document_error(
    mongo_client: MongoClient[dict[str, Any]],
    db: Database[dict[str, Any]],
    migrations: Path,
    kit: Migronaut,
) -> None:
    count = 400
    seed_users(db, count)
    db.plans.insert_many([{"_id": i, "name": f"plan{i}"} for i in range(3)])
    write_background(migrations, body=SIDE_READ)
    kit.runs.up()
    # Twice in a row, so the driver's own single retry of the read fails too.
    dropped = {
        "failCommands": ["find"],
        "closeConnection": True,
        "appName": "migronaut",
        "namespace": f"{db.name}.plans",
    }
    with fail_point(mongo_client, dropped, {"times": 2}):
        view = kit_json.run(kit, SPLIT_NAME, concurrency=2)
    assert view["status"] == "completed"
    assert view["totals"].get("failed", 0) == 0
    assert view["totals"]["migrated"] == count
    assert db.users.count_documents({"_v": 2, "hits": 1}) == count
    assert db.users.count_documents({"plan": {"$exists": False}}) == 0
