"""Controls from another process, requires, registration and invalid specs."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core import (
    BackgroundConflictError,
    BackgroundPendingError,
    ConfigInvalidError,
    IrreversibleMigrationError,
    Migronaut,
)
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.runner import write_migration

SLOW_SPLIT = """
import time

background = {"collection": "users", "from": 1, "to": 2, "batch_size": 50, "max_parallel": 2}

def migrate(doc, ctx):
    time.sleep(0.002)
    first, _, last = doc.pop("name").partition(" ")
    return {**doc, "first": first, "last": last}

def revert(doc, ctx):
    doc["name"] = doc.pop("first") + " " + doc.pop("last")
    return doc
"""


@pytest.fixture
def kit(mongo_uri: str, db: Database[dict[str, Any]], migrations: Path) -> Iterator[Migronaut]:
    with make_kit(mongo_uri, db, migrations, lock_ttl_seconds=5) as kit:
        yield kit


def lane_process(
    mongo_uri: str, db_name: str, migrations: Path, concurrency: int = 2
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.lane_process",
            mongo_uri,
            db_name,
            str(migrations),
            SPLIT_NAME,
            str(concurrency),
            "5",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )


def wait_for(predicate: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_pause_from_another_process_stops_lanes_within_a_batch_then_resume_finishes(
    kit: Migronaut, mongo_uri: str, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 4_000)
    write_background(migrations, body=SLOW_SPLIT)
    kit.runs.up()
    lanes = lane_process(mongo_uri, db.name, migrations)
    wait_for(lambda: db.users.count_documents({"_v": 2}) >= 200)
    result = kit.background.control(
        SPLIT_NAME, "pause", requested_by="ana", reason="peak hours", wait=True
    )
    assert result.status == "paused"
    assert result.stopped is True
    at_pause = db.users.count_documents({"_v": 2})
    out, _ = lanes.communicate(timeout=60)
    assert lanes.returncode == 3, out
    assert json.loads(out)["status"] == "paused"
    # Each of the two lanes may finish the batch it was writing: at most one batch each.
    assert db.users.count_documents({"_v": 2}) - at_pause <= 2 * 50
    assert db.users.count_documents({"_v": 2}) < 4_000
    time.sleep(0.5)
    assert db.users.count_documents({"_v": 2}) - at_pause <= 2 * 50
    # The lanes read a batch ahead, but a stopped lane leaves no intent it did not write.
    partitions = kit._runtime.store.partitions.collection
    assert partitions.count_documents({"migration": SPLIT_NAME, "inflight": {"$exists": True}}) == 0

    assert (
        kit.background.control(SPLIT_NAME, "resume", requested_by="bo", reason="quiet now").status
        == "running"
    )
    view = kit_json.run(kit, SPLIT_NAME, concurrency=2)
    assert view["status"] == "completed"
    assert view["totals"]["migrated"] == 4_000
    history = kit_json.history(kit, SPLIT_NAME)
    pause = next(entry for entry in history if entry["action"] == "pause")
    assert (pause["by"], pause["reason"], pause["from"], pause["to"]) == (
        "ana",
        "peak hours",
        "running",
        "paused",
    )
    resume = next(entry for entry in history if entry["action"] == "resume")
    assert (resume["by"], resume["reason"]) == ("bo", "quiet now")


def test_cancel_then_retry_finishes(
    kit: Migronaut, mongo_uri: str, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 3_000)
    write_background(migrations, body=SLOW_SPLIT)
    kit.runs.up()
    lanes = lane_process(mongo_uri, db.name, migrations)
    wait_for(lambda: db.users.count_documents({"_v": 2}) >= 100)
    assert (
        kit.background.control(SPLIT_NAME, "cancel", reason="wrong time", wait=True).status
        == "cancelled"
    )
    lanes.communicate(timeout=60)
    assert kit_json.status(kit, SPLIT_NAME)["partitions"].get("cancelled", 0) >= 1
    with pytest.raises(BackgroundConflictError):
        kit.background.control(SPLIT_NAME, "pause")
    assert kit.background.control(SPLIT_NAME, "cancel").applied == "unchanged"
    assert kit.background.control(SPLIT_NAME, "retry", reason="go again").status == "pending"
    view = kit_json.run(kit, SPLIT_NAME, concurrency=2)
    assert view["status"] == "completed"
    assert view["totals"]["migrated"] == 3_000
    assert db.users.count_documents({"_v": 2}) == 3_000


def test_retry_of_a_completed_migration_reopens_it_over_what_reappeared(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 500)
    write_background(migrations)
    kit.runs.up()
    assert kit_json.run(kit, SPLIT_NAME)["status"] == "completed"
    seed_users(db, 40, start=10_000)  # an old release still writing the old shape
    assert kit.background.control(SPLIT_NAME, "retry", reason="drift").status == "pending"
    view = kit_json.run(kit, SPLIT_NAME)
    assert view["status"] == "completed"
    assert view["totals"]["migrated"] == 540
    assert db.users.count_documents({"_v": 1}) == 0
    assert any(entry["action"] == "reopen" for entry in kit_json.history(kit, SPLIT_NAME))


def test_retry_from_start_after_a_failure(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 200)
    path = write_background(
        migrations,
        body="""
        background = {"collection": "users", "from": 1, "to": 2, "batch_size": 20,
                      "max_slice_failures": 1}

        def migrate(doc, ctx):
            raise_all = True
            return [doc] if raise_all else doc
        """,
    )
    kit.runs.up()
    with pytest.raises(Exception, match="failed"):
        kit.background.run(SPLIT_NAME)
    assert kit_json.status(kit, SPLIT_NAME)["status"] == "failed"
    path.write_text(path.read_text().replace("raise_all = True", "raise_all = False"))
    with pytest.raises(ConfigInvalidError):
        kit.background.control(
            SPLIT_NAME, "retry_from_start", reason="fixed", requested_by="x" * 200
        )
    kit.background.control(SPLIT_NAME, "retry_from_start", repin=True, reason="fixed")
    view = kit_json.run(kit, SPLIT_NAME)
    assert view["status"] == "completed"
    assert db.users.count_documents({"_v": 2}) == 200


def test_requires_blocks_until_done_and_guards_regular_migrations(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 300)
    db.orders.insert_many([{"_id": i, "_v": 1} for i in range(100)])
    a = "20240101000000_split_names"
    b = "20240102000000_orders_v2"
    c = "20240103000000_drop_legacy"
    write_background(migrations, a)
    write_background(
        migrations,
        b,
        body=f"""
        requires = ["{a}"]
        background = {{"collection": "orders", "from": 1, "to": 2}}

        def migrate(doc, ctx):
            return {{**doc, "total": 0}}
        """,
    )
    write_migration(
        migrations,
        c,
        f"""
        requires = ["{b}"]

        def up(ctx):
            ctx.db.legacy.insert_one({{"dropped": True}})
        """,
    )
    with pytest.raises(BackgroundPendingError) as raised:
        kit.runs.up()
    assert raised.value.context["waits_for"] == [{"migration": b, "status": "blocked"}]
    assert kit_json.status(kit, b)["status"] == "blocked"
    assert kit_json.status(kit, b)["waits_for"] == [a]
    assert db.legacy.count_documents({}) == 0

    stopped = kit.runs.up(on_background_pending="stop")
    assert stopped.stopped_at == c

    assert kit_json.run(kit, b)["status"] == "blocked"
    assert kit_json.run(kit, a)["status"] == "completed"
    assert kit_json.status(kit, b)["status"] == "pending"
    assert any(entry["action"] == "unblock" for entry in kit_json.history(kit, b))
    assert kit_json.run(kit, b)["status"] == "completed"
    assert [m.name for m in kit.runs.up().migrations] == [c]
    assert db.legacy.count_documents({}) == 1


def test_up_and_down_announce_registrations_and_waits_as_the_seeds_do(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 50)
    a = SPLIT_NAME
    b = "20240102000000_users_v3"
    c = "20240103000000_drop_legacy"
    write_background(migrations, a)
    write_background(
        migrations,
        b,
        body=f"""
        requires = ["{a}"]
        background = {{"collection": "users", "from": 2, "to": 3}}

        def migrate(doc, ctx):
            return doc
        """,
    )
    write_migration(migrations, c, f'requires = ["{b}"]\n\ndef up(ctx):\n    pass\n')
    heard: list[tuple[str, dict[str, Any]]] = []
    for event in ("background:registered", "background:waiting"):
        kit.background.on(event, lambda name, payload: heard.append((name, payload)))

    assert kit.runs.up(on_background_pending="stop").stopped_at == c
    assert heard == [
        (
            "background:registered",
            {
                "migration": a,
                "status": "pending",
                "direction": "forward",
                "mode": "declarative",
                "waits_for": [],
            },
        ),
        (
            "background:registered",
            {
                "migration": b,
                "status": "blocked",
                "direction": "forward",
                "mode": "declarative",
                "waits_for": [a],
            },
        ),
        (
            "background:waiting",
            {"migration": c, "waits_for": [{"migration": b, "status": "blocked"}]},
        ),
    ]
    heard.clear()
    kit.runs.down()  # b has no revert and rewrote nothing: withdrawn
    kit.runs.down()  # a has one: the way back is registered
    assert heard == [
        ("background:registered", {"migration": b, "status": "withdrawn", "waits_for": []}),
        (
            "background:registered",
            {
                "migration": a,
                "status": "pending",
                "direction": "revert",
                "mode": "declarative",
                "waits_for": [],
            },
        ),
    ]


def test_inline_mode_drives_background_migrations_inside_up(
    mongo_uri: str, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 1_000)
    write_background(migrations)
    with make_kit(mongo_uri, db, migrations, background_inline=True) as kit:
        kit.runs.up()
        assert kit_json.status(kit, SPLIT_NAME)["status"] == "completed"
    assert db.users.count_documents({"_v": 2}) == 1_000


def test_down_reverts_a_reversible_one_and_refuses_an_irreversible_one(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 300)
    write_background(migrations)
    kit.runs.up()
    kit.background.run(SPLIT_NAME)
    kit.runs.down()
    assert kit_json.status(kit, SPLIT_NAME)["direction"] == "revert"
    assert kit_json.run(kit, SPLIT_NAME)["status"] == "completed"
    assert db.users.count_documents({"_v": 1, "name": {"$exists": True}}) == 300

    one_way = "20240105000000_one_way"
    write_background(
        migrations,
        one_way,
        body="""
        background = {"collection": "users", "from": 1, "to": 3}

        def migrate(doc, ctx):
            return doc
        """,
    )
    kit.runs.up()
    kit.runs.down()  # nothing rewritten yet: withdrawn
    assert kit_json.status(kit, one_way) is None
    kit.runs.up()
    kit.background.run(one_way)
    with pytest.raises(IrreversibleMigrationError):
        kit.runs.down()
    assert kit_json.status(kit, one_way)["status"] == "completed"


@pytest.mark.parametrize(
    ("spec", "key"),
    [
        ('{"collection": "users", "from": 1, "to": 2, "batch_sise": 5}', "batch_sise"),
        ('{"collection": "users", "from": 2, "to": 2}', "to"),
        ('{"collection": "users", "from": 1, "to": 2, "max_parallel": 0}', "max_parallel"),
        ('{"collection": "users", "from": 1, "to": 2, "max_parallel": 65}', "max_parallel"),
        ('{"collection": "users", "from": 1, "to": 2, "batch_size": "10"}', "batch_size"),
        ('{"collection": "users", "from": True, "to": 2}', "from"),
        ('{"collection": 5, "from": 1, "to": 2}', "collection"),
        ('{"from": 1, "to": 2}', "collection"),
        ('{"collection": "users", "from": 1, "to": 2, "field": "a.b"}', "field"),
        ('{"collection": "users", "from": 1, "to": 2, "filter": {"_v": 3}}', "filter"),
    ],
)
def test_invalid_specs_are_refused_before_anything_is_registered(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path, spec: str, key: str
) -> None:
    write_background(
        migrations, body=f"background = {spec}\n\ndef migrate(doc, ctx):\n    return doc\n"
    )
    with pytest.raises(ConfigInvalidError) as raised:
        kit.runs.up()
    assert raised.value.context["key"] == key
    assert key in raised.value.message
    assert db.migronaut_background.count_documents({}) == 0
    assert db.migronaut_changelog.count_documents({"status": "applied"}) == 0


def test_a_missing_transform_is_refused(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    write_background(migrations, body='background = {"collection": "users", "from": 1, "to": 2}\n')
    with pytest.raises(ConfigInvalidError) as raised:
        kit.runs.up()
    assert raised.value.context["key"] == "migrate"
    assert db.migronaut_background.count_documents({}) == 0
