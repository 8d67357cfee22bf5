"""The engine under throttling: adaptive batch sizes, fixed pauses, the user's throttle."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pymongo import MongoClient
from pymongo.database import Database

from migronaut_core.background.throttle import warning_keys
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.servers import fail_point


def test_adaptive_batches_shrink_under_latency_and_resume_from_the_stored_state(
    mongo_uri: str,
    mongo_client: MongoClient[dict[str, Any]],
    db: Database[dict[str, Any]],
    tmp_path: Path,
) -> None:
    seed_users(db, 3_000)
    migrations = tmp_path / "migrations"
    write_background(
        migrations,
        body="""
        background = {"collection": "users", "from": 1, "to": 2, "batch_size": 200,
                      "max_parallel": 1,
                      "adaptive": {"min_batch_size": 10, "max_batch_size": 200, "increase": 20,
                                   "decrease": 0.5, "target_latency_ms": 150}}

        def migrate(doc, ctx):
            return {**doc, "ok": True}
        """,
    )
    changes: list[dict[str, Any]] = []
    sizes: list[int] = []
    slow = {
        "failCommands": ["update"],
        "blockConnection": True,
        "blockTimeMS": 300,
        "appName": "migronaut",
        "namespace": f"{db.name}.users",
    }
    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up()
        kit.background.on("background:throttle", lambda event, payload: changes.append(payload))
        kit.background.on(
            "background:batch", lambda event, payload: sizes.append(payload["counters"]["scanned"])
        )
        kit.background.coordinate(SPLIT_NAME)
        with fail_point(mongo_client, slow, "alwaysOn"):
            kit.background.run_slice(SPLIT_NAME, slice_ms=2_500)
        shrunk = min(sizes)
        partition = db.migronaut_background_partitions.find_one({"throttle": {"$exists": True}})
        assert partition is not None
        stored = partition["throttle"]["batch_size"]
        assert stored < 200
        # A new lane process: it resumes from the partition's state.
        kit._runtime.throttles.forget()
        sizes.clear()
        kit.background.run_slice(SPLIT_NAME, slice_ms=100)
        assert sizes[0] <= stored + 20
        view = kit_json.run(kit, SPLIT_NAME)
    assert shrunk < 200
    assert any(change["reason"] in ("latency", "overload") for change in changes)
    assert max(sizes) > shrunk  # grew back once the latency was gone
    assert view["status"] == "completed"
    assert db.users.count_documents({"ok": True}) == 3_000


def test_a_fixed_pause_and_the_users_throttle_slow_the_lane(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    seed_users(db, 400)
    migrations = tmp_path / "migrations"
    write_background(
        migrations,
        body="""
        background = {"collection": "users", "from": 1, "to": 2, "batch_size": 100,
                      "max_parallel": 1, "throttle": {"pause_ms": 100}}
        calls = []

        def throttle(ctx):
            calls.append(ctx.batch_size)
            return 50

        def migrate(doc, ctx):
            return {**doc, "ok": True}
        """,
    )
    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up()
        started = time.monotonic()
        view = kit_json.run(kit, SPLIT_NAME)
        elapsed = time.monotonic() - started
    assert view["status"] == "completed"
    assert elapsed >= 4 * 0.15  # four batches, each after 100 ms + the throttle's 50 ms


ADAPTIVE_WITH_A_BAD_THROTTLE = """
background = {"collection": "users", "from": 1, "to": 2, "batch_size": 50, "max_parallel": 1,
              "adaptive": {"min_batch_size": 10, "max_batch_size": 50},
              "throttle": {"pause_ms": 30}}

def throttle(ctx):
    return "soon"

def migrate(doc, ctx):
    return {**doc, "ok": True}
"""


def test_a_completed_migration_leaves_no_throttle_state_on_the_runtime(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    seed_users(db, 400)
    migrations = tmp_path / "migrations"
    write_background(migrations, body=ADAPTIVE_WITH_A_BAD_THROTTLE)
    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up()
        runtime = kit._runtime
        kit.background.coordinate(SPLIT_NAME)
        kit.background.run_slice(SPLIT_NAME, slice_ms=100)
        assert runtime.throttles.migrations() == {SPLIT_NAME}
        assert f"throttle-value:{SPLIT_NAME}" in runtime.warn_once
        view = kit_json.run(kit, SPLIT_NAME)
        assert view["status"] == "completed"
        assert runtime.throttles.migrations() == frozenset()
        assert not any(key in runtime.warn_once for key in warning_keys(SPLIT_NAME))


def test_a_cancelled_migration_leaves_no_throttle_state_on_the_runtime(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    seed_users(db, 400)
    migrations = tmp_path / "migrations"
    write_background(migrations, body=ADAPTIVE_WITH_A_BAD_THROTTLE)
    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up()
        runtime = kit._runtime
        kit.background.coordinate(SPLIT_NAME)
        kit.background.run_slice(SPLIT_NAME, slice_ms=100)
        assert runtime.throttles.migrations() == {SPLIT_NAME}
        kit.background.control(SPLIT_NAME, "cancel")
        assert kit.background.coordinate(SPLIT_NAME).status == "cancelled"
        assert runtime.throttles.migrations() == frozenset()
        assert not any(key in runtime.warn_once for key in warning_keys(SPLIT_NAME))
