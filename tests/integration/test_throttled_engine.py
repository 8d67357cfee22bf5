"""The engine under throttling: adaptive batch sizes, fixed pauses, the user's throttle."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pymongo import MongoClient
from pymongo.database import Database

from migronaut_core.background.engine.throttle import forget_adaptive
from tests.integration.background_support import SPLIT_NAME, make_kit, seed_users, write_background
from tests.integration.test_transactional_and_steps import fail_point


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
        kit.up()
        kit.on("background:throttle", lambda event, payload: changes.append(payload))
        kit.on(
            "background:batch", lambda event, payload: sizes.append(payload["counters"]["scanned"])
        )
        kit.coordinate_background(SPLIT_NAME)
        with fail_point(mongo_client, slow, "alwaysOn"):
            kit.run_background_slice(SPLIT_NAME, slice_ms=2_500)
        shrunk = min(sizes)
        partition = db.migronaut_background_partitions.find_one({"throttle": {"$exists": True}})
        assert partition is not None
        stored = partition["throttle"]["batch_size"]
        assert stored < 200
        forget_adaptive()  # a new lane process: it resumes from the partition's state
        sizes.clear()
        kit.run_background_slice(SPLIT_NAME, slice_ms=100)
        assert sizes[0] <= stored + 20
        view = kit.run_background(SPLIT_NAME)
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
        kit.up()
        started = time.monotonic()
        view = kit.run_background(SPLIT_NAME)
        elapsed = time.monotonic() - started
    assert view["status"] == "completed"
    assert elapsed >= 4 * 0.15  # four batches, each after 100 ms + the throttle's 50 ms
