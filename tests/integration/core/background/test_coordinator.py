"""A coordinator step stops when its coordinator lock is lost mid-step (A-13b)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from pymongo import MongoClient
from pymongo.database import Database

from migronaut_core import Migronaut
from migronaut_core.background.coordinator import Answer
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, seed_users, wait_until, write_background
from tests.support.servers import fail_point

#: The shortest lock TTL the config takes: the heartbeat renews every third of it.
LOCK_TTL = 1.0
#: How long the planner's first read of the collection is held up on the server.
BLOCK_MS = 3_000


def _lock_held(kit: Migronaut) -> bool:
    info = kit._runtime.lock_for(SPLIT_NAME).inspect()
    return info is not None and info.held


def test_a_step_whose_lock_is_taken_away_while_planning_commits_no_plan(
    mongo_uri: str,
    mongo_client: MongoClient[dict[str, Any]],
    db: Database[dict[str, Any]],
    migrations: Path,
) -> None:
    seed_users(db, 50)
    write_background(migrations)
    slow_planner = {
        "failCommands": ["aggregate"],
        "blockConnection": True,
        "blockTimeMS": BLOCK_MS,
        "appName": "migronaut",
        "namespace": f"{db.name}.users",
    }
    with make_kit(mongo_uri, db, migrations, lock_ttl_seconds=LOCK_TTL) as kit:
        kit.runs.up()
        answers: list[Answer] = []
        with fail_point(mongo_client, slow_planner, {"times": 1}):
            step = threading.Thread(
                target=lambda: answers.append(kit.background.coordinate(SPLIT_NAME))
            )
            step.start()
            wait_until(lambda: _lock_held(kit), what="the step to hold its lock")
            # An operator's unlock (or a takeover) mid-step: the heartbeat's next renewal fails.
            assert kit._runtime.lock_for(SPLIT_NAME).force_release() is not None
            step.join(timeout=30)
        assert not step.is_alive()
        (answer,) = answers
        assert (answer.next, answer.reason) == ("wait", "stopping")
        view = kit_json.status(kit, SPLIT_NAME)
        assert view["status"] == "pending"
        assert db.migronaut_background_partitions.count_documents({}) == 0
        state = db.migronaut_background.find_one({"_id": SPLIT_NAME})
        assert state is not None and state.get("plan") is None
        # The next step, holding its lock throughout, plans as usual.
        assert kit.background.coordinate(SPLIT_NAME).next == "process"
