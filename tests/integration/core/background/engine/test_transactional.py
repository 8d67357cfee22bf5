"""Transactional batches and step mode against a real replica set (and a standalone)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.database import Database
from pymongo.errors import OperationFailure, PyMongoError

from migronaut_core import BackgroundFailedError
from migronaut_core.background.engine.transactional import discard
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.servers import fail_point

AUDITED = """
background = {{"collection": "users", "from": 1, "to": 2, "batch_size": {batch_size},
               "max_parallel": 2, "revision_field": "rev",
               "transaction": {{"timeout_ms": 10000, "max_retries": 8}}}}

def migrate(doc, ctx):
    ctx.db.audit.insert_one({{"user": doc["_id"]}}, session=ctx.session)
    first, _, last = doc.pop("name").partition(" ")
    return {{**doc, "first": first, "last": last}}
"""


def test_side_writes_commit_exactly_once_per_migrated_document(
    mongo_uri: str,
    mongo_client: MongoClient[dict[str, Any]],
    db: Database[dict[str, Any]],
    tmp_path: Path,
) -> None:
    count = 3_000
    db.users.insert_many(
        [{"_id": i, "name": f"First{i} Last{i}", "_v": 1, "rev": 0, "n": i} for i in range(count)]
    )
    db.create_collection("audit")
    migrations = tmp_path / "migrations"
    write_background(migrations, body=AUDITED.format(batch_size=100))
    stop = threading.Event()

    def application() -> None:
        n = 0
        while not stop.is_set():
            doc_id = (n * 7919) % count
            db.users.update_one(
                {"_id": doc_id, "_v": 1}, {"$set": {"touched": n}, "$inc": {"rev": 1}}
            )
            n += 1

    writer = threading.Thread(target=application)
    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up()
        transient = {
            "failCommands": ["commitTransaction"],
            "errorCode": 251,
            "errorLabels": ["TransientTransactionError"],
            "appName": "migronaut",
        }
        writer.start()
        try:
            with fail_point(mongo_client, transient, {"times": 1}):
                view = kit_json.run(kit, SPLIT_NAME, concurrency=2)
        finally:
            stop.set()
            writer.join()
    assert view["status"] == "completed"
    assert db.users.count_documents({"_v": 2}) == count
    assert view["totals"]["migrated"] == count
    audits = list(db.audit.aggregate([{"$group": {"_id": "$user", "n": {"$sum": 1}}}]))
    assert len(audits) == count
    assert {row["n"] for row in audits} == {1}
    assert view["totals"].get("txn_retries", 0) >= 1


def test_a_transient_error_in_a_side_write_retries_the_whole_transaction(
    mongo_uri: str,
    mongo_client: MongoClient[dict[str, Any]],
    db: Database[dict[str, Any]],
    tmp_path: Path,
) -> None:
    count = 600
    db.users.insert_many(
        [{"_id": i, "name": f"First{i} Last{i}", "_v": 1, "rev": 0, "n": i} for i in range(count)]
    )
    db.create_collection("audit")
    migrations = tmp_path / "migrations"
    write_background(migrations, body=AUDITED.format(batch_size=50))
    side_write_conflict = {
        "failCommands": ["insert"],
        "errorCode": 112,
        "errorLabels": ["TransientTransactionError"],
        "appName": "migronaut",
        "namespace": f"{db.name}.audit",
    }
    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up()
        with fail_point(mongo_client, side_write_conflict, {"times": 3}):
            view = kit_json.run(kit, SPLIT_NAME, concurrency=1)
    assert view["status"] == "completed"
    assert db.users.count_documents({"_v": 2}) == count
    assert view["totals"]["migrated"] == count
    assert view["totals"].get("failed", 0) == 0
    assert view["totals"]["txn_retries"] >= 3
    audits = list(db.audit.aggregate([{"$group": {"_id": "$user", "n": {"$sum": 1}}}]))
    assert len(audits) == count
    assert {row["n"] for row in audits} == {1}


def test_time_errors_halve_the_batch_and_clean_batches_grow_it_back(
    mongo_uri: str,
    mongo_client: MongoClient[dict[str, Any]],
    db: Database[dict[str, Any]],
    tmp_path: Path,
) -> None:
    seed_users(db, 2_000)
    migrations = tmp_path / "migrations"
    write_background(
        migrations,
        body="""
        background = {"collection": "users", "from": 1, "to": 2, "batch_size": 64,
                      "max_parallel": 1, "transaction": True}

        def migrate(doc, ctx):
            return {**doc, "ok": True}
        """,
    )
    sizes: list[int] = []
    requested: set[int] = set()

    def heard(event: str, payload: dict[str, Any]) -> None:
        sizes.append(payload["counters"]["scanned"])
        requested.add(payload["batch_size"])

    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up()
        kit.background.on("background:batch", heard)
        too_slow = {
            "failCommands": ["find"],
            "errorCode": 50,
            "appName": "migronaut",
            "namespace": f"{db.name}.users",
        }
        with fail_point(mongo_client, too_slow, {"times": 2}):
            view = kit_json.run(kit, SPLIT_NAME)
    assert view["status"] == "completed"
    assert db.users.count_documents({"ok": True}) == 2_000
    assert sizes[0] == 16  # 64 halved twice at once
    assert 24 in sizes  # grown back x1.5 after five clean batches
    assert max(sizes) == 64
    assert requested == {64}  # the lane's batch size; a transaction halves within it


def test_a_step_migration_resumes_from_its_checkpoint_after_kill_9(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    db.orders.insert_many([{"_id": i, "amount": i} for i in range(500)])
    migrations = tmp_path / "migrations"
    write_background(
        migrations,
        body="""
        background = {"collection": "orders", "from": 1, "to": 2, "mode": "step"}

        def step(ctx):
            after = ctx.checkpoint if ctx.checkpoint is not None else -1
            docs = list(ctx.db.orders.find({"_id": {"$gt": after}}).sort("_id", 1).limit(50))
            for doc in docs:
                cents = {"$set": {"cents": doc["amount"] * 100}}
                ctx.db.orders.update_one({"_id": doc["_id"]}, cents)
            ctx.db.calls.insert_one({"after": after})
            last = docs[-1]["_id"] if docs else after
            return {"checkpoint": last, "done": len(docs) < 50, "processed": len(docs),
                    "total": 500}
        """,
    )
    with make_kit(mongo_uri, db, migrations, lock_ttl_seconds=2) as kit:
        kit.runs.up()
    command = [
        sys.executable,
        "-m",
        "tests.support.lane_process",
        mongo_uri,
        db.name,
        str(migrations),
        SPLIT_NAME,
        "1",
        "2",
    ]
    dying = subprocess.run(
        command,
        env={**os.environ, "MIGRONAUT_TEST_DIE_AT_CHECKPOINT": "4"},
        stdout=subprocess.DEVNULL,
        check=False,
        timeout=120,
    )
    assert dying.returncode == -signal.SIGKILL
    checkpoints = [call["after"] for call in db.calls.find().sort("_id", 1)]
    assert checkpoints == [-1, 49, 99, 149]  # the 4th step ran, its checkpoint never landed
    finished = subprocess.run(command, stdout=subprocess.DEVNULL, check=False, timeout=120)
    assert finished.returncode == 0
    checkpoints = [call["after"] for call in db.calls.find().sort("_id", 1)]
    assert checkpoints[4] == 149  # resumed from the last checkpoint, not from the start
    assert db.orders.count_documents({"cents": {"$exists": True}}) == 500
    with make_kit(mongo_uri, db, migrations) as kit:
        view = kit_json.status(kit, SPLIT_NAME)
    assert view["status"] == "completed"
    assert view["totals"]["processed"] >= 500


def test_a_step_that_returns_nonsense_fails_the_slice(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    migrations = tmp_path / "migrations"
    write_background(
        migrations,
        body="""
        background = {"collection": "orders", "from": 1, "to": 2, "mode": "step",
                      "max_slice_failures": 1}

        def step(ctx):
            return {"checkpoint": "x" * 70_000, "done": False}
        """,
    )
    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up()
        with pytest.raises(BackgroundFailedError, match="checkpoint larger than 64 KiB"):
            kit.background.run(SPLIT_NAME)


def test_transactions_on_a_standalone_server_fail_the_migration(
    standalone_uri: str, tmp_path: Path
) -> None:
    migrations = tmp_path / "migrations"
    write_background(migrations, body=AUDITED.format(batch_size=10))
    with MongoClient(standalone_uri) as client:
        client.t.users.insert_many(
            [{"_id": i, "name": "A B", "_v": 1, "rev": 0} for i in range(20)]
        )
    from migronaut_core import Migronaut

    with Migronaut(uri=standalone_uri, database="t", migrations_dir=str(migrations)) as kit:
        kit.runs.up()
        with pytest.raises(BackgroundFailedError) as raised:
            kit.background.run(SPLIT_NAME)
        assert "need a replica set or a sharded cluster" in raised.value.message
        assert kit_json.status(kit, SPLIT_NAME)["status"] == "failed"


STEPPING = """
background = {"collection": "orders", "from": 1, "to": 2, "mode": "step"}

def step(ctx):
    after = ctx.checkpoint if ctx.checkpoint is not None else -1
    docs = list(ctx.db.orders.find({"_id": {"$gt": after}}, session=ctx.session)
                .sort("_id", 1).limit(10))
    for doc in docs:
        ctx.db.orders.update_one({"_id": doc["_id"]}, {"$set": {"seen": True}},
                                 session=ctx.session)
    last = docs[-1]["_id"] if docs else after
    return {"checkpoint": last, "done": len(docs) < 10, "processed": len(docs), "total": 30}
"""


def test_a_step_dry_run_runs_steps_from_the_checkpoint_and_writes_nothing(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    db.orders.insert_many([{"_id": i} for i in range(30)])
    migrations = tmp_path / "migrations"
    write_background(migrations, body=STEPPING)
    with make_kit(mongo_uri, db, migrations) as kit:
        unregistered = kit.background.dry_run(SPLIT_NAME, steps=5).to_dict()
        processed = [step["counters"].get("processed") for step in unregistered["steps"]]
        assert processed == [10, 10, 10, None]  # the 4th finds nothing and says done
        assert unregistered["steps"][-1]["done"] is True
        assert unregistered["from_checkpoint"] is False
        assert db.orders.count_documents({"seen": True}) == 0
        kit.runs.up()
        kit.background.coordinate(SPLIT_NAME)
        kit.background.run_slice(SPLIT_NAME, slice_ms=100)  # one real step, then it yields
        assert db.orders.count_documents({"seen": True}) >= 10
        seen = db.orders.count_documents({"seen": True})
        state_before = db.migronaut_background.find_one({"_id": SPLIT_NAME})
        report = kit.background.dry_run(SPLIT_NAME, steps=1).to_dict()
        assert report["from_checkpoint"] is True
        assert len(report["steps"]) == 1
        assert db.orders.count_documents({"seen": True}) == seen
        assert db.migronaut_background.find_one({"_id": SPLIT_NAME}) == state_before
        with pytest.raises(Exception, match="steps must be at most"):
            kit.background.dry_run(SPLIT_NAME, steps=101)


FAILS_ONE_THEN_SLOWS = """
background = {{"collection": "users", "from": 1, "to": 2, "batch_size": 64,
               "max_parallel": 1, "transaction": True, "max_document_errors": 1}}
armed = [True]

def migrate(doc, ctx):
    if doc["_id"] == 40:
        if armed.pop() if armed else False:
            ctx.client.admin.command(
                "configureFailPoint", "failCommand", mode={{"times": 1}},
                data={{"failCommands": ["find"], "errorCode": 50, "appName": "migronaut",
                       "namespace": "{namespace}"}},
            )
        raise ValueError("cannot split this one")
    return {{**doc, "ok": True}}
"""


def test_a_document_failed_before_the_batch_halves_is_counted_once(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    # Document 40 fails in a batch of 64 and arms a time error: the retried batch
    # halves to 32 and no longer holds it, so only the next batch may record it.
    seed_users(db, 200)
    migrations = tmp_path / "migrations"
    write_background(migrations, body=FAILS_ONE_THEN_SLOWS.format(namespace=f"{db.name}.users"))
    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up()
        view = kit_json.run(kit, SPLIT_NAME)
    assert view["status"] == "completed"
    assert view["totals"]["failed"] == 1
    assert view["totals"]["txn_retries"] >= 1  # the halving
    state = db["migronaut_background"].find_one({"_id": SPLIT_NAME})
    assert state is not None
    assert state["bad_ids"] == [40]
    assert db.users.count_documents({"ok": True}) == 199


def test_a_transaction_whose_commit_was_cut_off_is_killed_so_the_next_attempt_can_write(
    mongo_uri: str, mongo_client: MongoClient[dict[str, Any]], db: Database[dict[str, Any]]
) -> None:
    # A commit whose connection drops before the server reads it leaves the
    # transaction open on the server, its writes blocking every later attempt on the
    # same document (WriteConflict) for 60 s: longer than a batch's retries last.
    app = f"discard-{db.name}"
    db.docs.insert_one({"_id": 1, "n": 0})
    with MongoClient(mongo_uri, appname=app) as client:
        docs = client[db.name].docs

        def increment() -> None:
            with client.start_session() as session:
                session.start_transaction()
                docs.update_one({"_id": 1}, {"$inc": {"n": 1}}, session=session)
                session.commit_transaction()

        data = {"failCommands": ["commitTransaction"], "closeConnection": True, "appName": app}
        with client.start_session() as cut_off:
            cut_off.start_transaction()
            docs.update_one({"_id": 1}, {"$inc": {"n": 1}}, session=cut_off)
            # Twice: the driver retries a commit once by itself.
            with fail_point(mongo_client, data, {"times": 2}), pytest.raises(PyMongoError):
                cut_off.commit_transaction()
            with pytest.raises(OperationFailure) as conflict:
                increment()
            assert conflict.value.code == 112  # the orphan holds the document
            discard(cut_off)
        increment()  # at once, not 60 s later
    assert db.docs.find_one({"_id": 1}) == {"_id": 1, "n": 1}
