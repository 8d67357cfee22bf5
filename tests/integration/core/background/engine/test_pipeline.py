"""Update-pipeline migrations end to end on a real MongoDB: one ``update_many`` per batch.

What users rely on: the same lanes, passes, controls and totals as a Python
migration; application writes made meanwhile are never lost (the server applies
each document's update to its current state); old-shape documents written during
or after the run are taken by a later pass or by drift; the revision moves on
each rewrite; and documents the server refuses are isolated and counted within
``max_document_errors`` while the rest migrate.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core import BackgroundFailedError, Migronaut
from tests.support import kit_json
from tests.support.app_writer import AppWriter
from tests.support.background import (
    SPLIT_NAME,
    make_kit,
    seed_users,
    wait_until,
    write_background,
)
from tests.support.chaos import (
    assert_nothing_lost,
    drive_remaining,
    register,
    seed,
    write_migration,
)
from tests.support.watching import old_shape

CONVERT = """
background = {{
    "collection": "users",
    "from": 1,
    "to": 2,
    "batch_size": 50,
    "max_parallel": 2,
    "max_document_errors": {budget},
    "update": [{{"$set": {{"num": {{"$toInt": "$code"}}}}}}, {{"$unset": "code"}}],
}}
"""
#: Only the documents with bad codes carry it; it must never leave the engine.
SECRET = "not-a-number-5e1f"
#: Good codes are this plus the ``_id``: digits no timestamp or count in a status holds.
CODE_BASE = 1_987_650_000


@pytest.fixture
def kit(mongo_uri: str, db: Database[dict[str, Any]], migrations: Path) -> Iterator[Migronaut]:
    with make_kit(mongo_uri, db, migrations, lock_ttl_seconds=5) as kit:
        yield kit


def assert_all_split(db: Database[dict[str, Any]], count: int) -> None:
    assert db.users.count_documents({"_v": 2}) == count
    assert db.users.count_documents({"name": {"$exists": True}}) == 0
    for doc in db.users.find({"n": {"$exists": True}}, {"first": 1, "last": 1, "n": 1}):
        assert (doc["first"], doc["last"]) == (f"First{doc['n']}", f"Last{doc['n']}")


def test_lanes_rewrite_by_pipeline_with_exact_totals_and_a_later_pass_takes_late_old_shapes(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 6_000)
    db.users.create_index([("_v", 1), ("_id", 1)])
    write_background(migrations, update=True, batch_size=400, max_parallel=3)
    kit.runs.up()
    batches: list[dict[str, Any]] = []
    inserted = threading.Event()

    def on_batch(event: str, payload: dict[str, Any]) -> None:
        batches.append(payload)
        if not inserted.is_set():
            inserted.set()
            seed_users(db, 300, start=-1_000)  # below every cursor: left to the next pass

    kit.background.on("background:batch", on_batch)
    view = kit_json.run(kit, SPLIT_NAME, concurrency=3)
    assert view["status"] == "completed"
    assert view["mode"] == "update"
    assert view["pass"] >= 2
    totals = view["totals"]
    assert totals["migrated"] == totals["scanned"] == 6_300
    assert totals.get("failed", 0) == 0
    assert_all_split(db, 6_300)
    assert len(batches) >= 6_000 // 400


def test_application_writes_meanwhile_are_never_lost_and_each_document_is_rewritten_once(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    total = 8_000
    migrations = tmp_path / "migrations"
    seed(db, total)
    write_migration(migrations, batch_size=100, max_parallel=3, doc_seconds=0, mode="update")
    register(mongo_uri, db.name, migrations)
    app = AppWriter(mongo_uri, db.name, total)
    # Passes of a pipeline migration are quick: the application stops inserting old
    # shapes after a while, or it would outlast every pass.
    quiet = threading.Timer(1.5, app.stop)
    with make_kit(mongo_uri, db, migrations, lock_ttl_seconds=2) as kit:
        app.start()
        quiet.start()
        try:
            kit.background.run(SPLIT_NAME, concurrency=3)
        finally:
            quiet.join()
            app.stop()
    drive_remaining(mongo_uri, db.name, migrations)
    assert app.acknowledged > 50
    assert_nothing_lost(db, mongo_uri, migrations, app, total)
    # The revision moved on by one for the rewrite, beside every application write.
    for doc in db.users.find({"_id": {"$lt": total}}, {"rev": 1, "app_counter": 1}):
        assert doc["rev"] == doc.get("app_counter", 0) + 1, doc["_id"]


def test_pause_and_cancel_stop_within_a_batch_and_resume_and_retry_finish_exactly(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 4_000)
    db.users.create_index([("_v", 1), ("_id", 1)])
    write_background(migrations, update=True, batch_size=100, max_parallel=2)
    kit.runs.up()
    seen: list[int] = []
    paused_at: list[int] = []  # documents reported when the pause was stored

    def pause_after_three(event: str, payload: dict[str, Any]) -> None:
        seen.append(payload["counters"]["migrated"])
        if len(seen) == 3:
            kit.background.control(SPLIT_NAME, "pause", reason="peak hours")
            paused_at.append(sum(seen))

    stop = kit.background.on("background:batch", pause_after_three)
    assert kit_json.run(kit, SPLIT_NAME, concurrency=2)["status"] == "paused"
    stop()
    at_pause = db.users.count_documents({"_v": 2})
    # A lane sends no batch past the pause and finishes the two it has in flight: the
    # lane that paused, two more; the other, its two and the one it had just written,
    # checked before the pause and reported after it. (While the pause is being stored
    # the other lane works on: the bound counts from what was reported by then.)
    assert 300 <= paused_at[0] <= at_pause <= paused_at[0] + (2 + 3) * 100
    assert at_pause == sum(seen)
    assert (
        kit._runtime.store.partitions.collection.count_documents({"inflight": {"$exists": True}})
        == 0
    )

    kit.background.control(SPLIT_NAME, "resume")
    seen.clear()

    def cancel_after_two(event: str, payload: dict[str, Any]) -> None:
        seen.append(payload["counters"]["migrated"])
        if len(seen) == 2:
            kit.background.control(SPLIT_NAME, "cancel", reason="wrong time")

    stop = kit.background.on("background:batch", cancel_after_two)
    assert kit_json.run(kit, SPLIT_NAME, concurrency=2)["status"] == "cancelled"
    stop()
    assert db.users.count_documents({"_v": 2}) == at_pause + sum(seen) < 4_000
    kit.background.control(SPLIT_NAME, "retry", reason="go again")
    view = kit_json.run(kit, SPLIT_NAME, concurrency=2)
    assert view["status"] == "completed"
    assert_all_split(db, 4_000)
    assert view["totals"]["migrated"] == 4_000


def test_revert_runs_revert_update_back_to_the_old_shape(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 1_500)
    for doc_id in range(0, 1_500, 3):
        db.users.update_one({"_id": doc_id}, {"$set": {"rev": 7}})
    write_background(migrations, update=True, batch_size=200, extra='"revision_field": "rev",')
    kit.runs.up()
    assert kit_json.run(kit, SPLIT_NAME, concurrency=2)["status"] == "completed"
    assert db.users.count_documents({"rev": 8}) == 500
    assert db.users.count_documents({"rev": 1}) == 1_000
    kit.runs.down()
    view = kit_json.run(kit, SPLIT_NAME, concurrency=2)
    assert (view["status"], view["direction"]) == ("completed", "revert")
    assert view["totals"]["migrated"] == 1_500
    assert db.users.count_documents({"_v": 1, "name": {"$exists": True}}) == 1_500
    assert db.users.count_documents({"first": {"$exists": True}}) == 0
    doc = db.users.find_one({"_id": 3})
    assert doc is not None and doc["name"] == "First3 Last3" and doc["rev"] == 9


def seed_codes(db: Database[dict[str, Any]], count: int, bad: set[int]) -> None:
    db.users.insert_many(
        [
            {"_id": i, "_v": 1, "code": SECRET if i in bad else str(CODE_BASE + i)}
            for i in range(count)
        ]
    )


def test_documents_the_server_refuses_are_isolated_counted_and_skipped_by_later_passes(
    kit: Migronaut,
    db: Database[dict[str, Any]],
    migrations: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    bad = {7, 120, 121, 399}
    seed_codes(db, 400, bad)
    # A validator the server checks on the rewrite: refuses document 333's num.
    refused_num = CODE_BASE + 333
    db.command("collMod", "users", validator={"num": {"$ne": refused_num}})
    write_background(migrations, body=CONVERT.format(budget=5))
    kit.runs.up()
    view = kit_json.run(kit, SPLIT_NAME, concurrency=2)
    assert view["status"] == "completed"
    totals = view["totals"]
    assert totals["migrated"] == 400 - 5
    assert totals["failed"] == 5
    assert view["failed_documents"] == 5
    assert db.users.count_documents({"_v": 2}) == 395
    refused = {7, 120, 121, 333, 399}
    assert {doc["_id"] for doc in db.users.find({"_v": 1})} == refused
    samples = view["failed_document_samples"]
    assert {sample["id"] for sample in samples} == refused
    assert {sample["reason"] for sample in samples} == {"update"}
    codes = {sample["id"]: sample["error"] for sample in samples}
    assert "121" in codes[333] and "241" in codes[7]
    text = str(kit_json.status(kit, SPLIT_NAME)) + caplog.text
    assert SECRET not in text
    assert str(refused_num) not in text

    # A reopened pass steps over them: nothing new fails, nothing is rewritten twice.
    kit.background.control(SPLIT_NAME, "retry", reason="again")
    again = kit_json.run(kit, SPLIT_NAME)
    assert again["status"] == "completed"
    assert again["failed_documents"] == 5
    assert db.users.count_documents({"_v": 2}) == 395


def test_more_refused_documents_than_the_budget_fail_the_migration_by_code(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_codes(db, 200, {3, 50, 51})
    write_background(migrations, body=CONVERT.format(budget=1))
    kit.runs.up()
    with pytest.raises(BackgroundFailedError) as failed:
        kit.background.run(SPLIT_NAME, concurrency=1)
    assert "max_document_errors (1)" in failed.value.message
    assert "code 241" in failed.value.message
    view = kit_json.status(kit, SPLIT_NAME)
    assert view is not None and view["status"] == "failed"
    assert SECRET not in str(view) and SECRET not in str(failed.value.context)
    assert db.users.count_documents({"_v": 2}) >= 47  # the good ones of the first batch


def test_a_completed_pipeline_migration_is_reopened_by_drift_verify(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 500)
    write_background(migrations, update=True, batch_size=200)
    kit.runs.up()
    assert kit_json.run(kit, SPLIT_NAME)["status"] == "completed"
    seed_users(db, 20, start=5_000)  # an old release still writing the old shape
    found = kit_json.verify(kit)
    assert [d["action"] for d in found["drifted"]] == ["reopened"]
    view = kit_json.run(kit, SPLIT_NAME)
    assert view["status"] == "completed"
    assert view["totals"]["migrated"] == 520
    assert_all_split(db, 520)


@pytest.mark.parametrize(
    "stage",
    [
        {"$replaceWith": {"_id": "$_id", "full": "$name"}},
        {"$replaceRoot": {"newRoot": {"full": "$name"}}},
        {"$project": {"full": "$name"}},
    ],
)
def test_a_stage_that_replaces_the_document_still_gets_the_stamps_and_the_next_revision(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path, stage: dict[str, Any]
) -> None:
    seed_users(db, 300)
    db.users.update_many({"_id": {"$lt": 100}}, {"$set": {"rev": 41}})
    body = f"""
background = {{
    "collection": "users", "from": 1, "to": 2, "revision_field": "rev", "update": [{stage!r}],
}}
"""
    write_background(migrations, body=body)
    kit.runs.up()
    assert kit_json.run(kit, SPLIT_NAME)["totals"]["migrated"] == 300
    assert db.users.count_documents({"_v": 2, "full": {"$exists": True}}) == 300
    assert db.users.count_documents({"name": {"$exists": True}}) == 0
    assert db.users.count_documents({"_id": {"$lt": 100}, "rev": 42}) == 100
    assert db.users.count_documents({"_id": {"$gte": 100}, "rev": 1}) == 200


def test_the_drift_watcher_upgrades_old_shapes_with_the_pipeline(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 50)
    db.users.create_index([("_v", 1), ("_id", 1)])
    write_background(migrations, update=True, batch_size=100)
    kit.runs.up()
    assert kit_json.run(kit, SPLIT_NAME)["status"] == "completed"
    watcher = kit.drift.watch(refresh_seconds=1.0)
    try:
        wait_until(
            lambda: [row["state"] for row in watcher.status()] == ["streaming"],
            what="the stream",
        )
        db.users.insert_many([old_shape(1_000 + i) for i in range(20)])
        db.users.replace_one({"_id": 0}, old_shape(0))
        wait_until(lambda: db.users.count_documents({"_v": 1}) == 0, what="the upgrades")
        assert db.users.find_one({"_id": 1_005}) == {
            "_id": 1_005,
            "_v": 2,
            "first": "Oldname1005",
            "last": "Oldsurname1005",
        }
        row = wait_until(
            lambda: (r := kit_json.watch_status(kit, "users"))["counters"]["upgraded"] >= 21 and r,
            what="the saved counters",
        )
        assert row["edges"] == [SPLIT_NAME]
        assert row["counters"]["errors"] == 0
    finally:
        watcher.stop()
    assert kit_json.status(kit, SPLIT_NAME)["status"] == "completed"
