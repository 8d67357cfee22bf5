"""Coordinator answers: checksum waits, repin, newer schemas, rounds, busy, unlock, stop."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.database import Database

from migronaut_core import Migronaut, RunAbortedError
from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.coordinator import Answer, Driver
from migronaut_core.lock import MongoLock
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, seed_users, wait_until, write_background
from tests.support.servers import fail_point


@pytest.fixture
def kit(mongo_uri: str, db: Database[dict[str, Any]], migrations: Path) -> Iterator[Migronaut]:
    with make_kit(mongo_uri, db, migrations, lock_ttl_seconds=4) as kit:
        yield kit


def test_an_edited_file_makes_the_coordinator_wait_until_repinned(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 400)
    path = write_background(migrations)
    kit.runs.up()
    path.write_text(path.read_text().replace('"batch_size": 500', '"batch_size": 100'))
    answer = kit.background.coordinate(SPLIT_NAME)
    assert (answer.next, answer.reason) == ("wait", "checksum")
    assert kit.background.run_slice(SPLIT_NAME).outcome == "stale"  # no plan yet

    result = kit.background.control(SPLIT_NAME, "repin", requested_by="ops", reason="deploy done")
    assert result.applied == "changed"
    record = db.migronaut_changelog.find_one({"_id": SPLIT_NAME})
    state = db.migronaut_background.find_one({"_id": SPLIT_NAME})
    assert record is not None and state is not None
    assert record["checksum"] == state["checksum"]
    assert state["spec"]["batch_size"] == 100
    assert kit_json.run(kit, SPLIT_NAME)["status"] == "completed"
    assert kit.runs.status()[0].checksum_ok is True


def test_repin_of_a_changed_match_replans(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 3_000)
    db.users.update_many({"n": {"$gte": 2_000}}, {"$set": {"tier": "gold"}})
    path = write_background(migrations, batch_size=100, max_parallel=2)
    kit.runs.up()
    assert kit.background.coordinate(SPLIT_NAME).next == "process"
    first_plan = db.migronaut_background.find_one({"_id": SPLIT_NAME})["plan"]
    path.write_text(
        path.read_text().replace('"from": 1,', '"from": 1, "filter": {"tier": "gold"},')
    )
    assert kit.background.control(SPLIT_NAME, "repin").replan is True
    view = kit_json.run(kit, SPLIT_NAME, concurrency=2)
    assert view["status"] == "completed"
    assert (
        db.migronaut_background.find_one({"_id": SPLIT_NAME})["plan"]["token"]
        != first_plan["token"]
    )
    assert db.users.count_documents({"_v": 2}) == 1_000
    assert db.users.count_documents({"_v": 1, "tier": {"$exists": False}}) == 2_000


def test_a_state_of_a_newer_release_is_left_alone(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 10)
    write_background(migrations)
    kit.runs.up()
    db.migronaut_background.update_one({"_id": SPLIT_NAME}, {"$set": {"schema": 99}})
    answer = kit.background.coordinate(SPLIT_NAME)
    assert (answer.next, answer.reason) == ("wait", "newer-schema")
    assert db.users.count_documents({"_v": 2}) == 0


def test_a_lane_leaves_a_plan_of_a_newer_release_alone(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 10)
    write_background(migrations)
    kit.runs.up()
    assert kit.background.coordinate(SPLIT_NAME).next == "process"
    db.migronaut_background.update_one({"_id": SPLIT_NAME}, {"$set": {"schema": 99}})
    assert kit.background.run_slice(SPLIT_NAME).outcome == "stale"
    assert db.users.count_documents({"_v": 2}) == 0
    assert db.migronaut_background_partitions.count_documents({"lease": {"$exists": True}}) == 0


def test_rounds_supersede_older_drivers(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 100)
    write_background(migrations)
    kit.runs.up()
    first = kit.background.coordinate(SPLIT_NAME, driver=Driver("airflow", "run-1", rounds=True))
    assert first.round == 1
    second = kit.background.coordinate(SPLIT_NAME, driver=Driver("airflow", "run-2", rounds=True))
    assert second.round == 2
    stale = kit.background.coordinate(
        SPLIT_NAME, driver=Driver("airflow", "run-1", round=1, rounds=True)
    )
    assert stale.next == "superseded"
    current = kit.background.coordinate(
        SPLIT_NAME, driver=Driver("airflow", "run-2", round=2, rounds=True)
    )
    assert current.next == "process" and current.round == 2
    state = db.migronaut_background.find_one({"_id": SPLIT_NAME})
    assert state is not None
    assert state["coordinator"]["ref"] == "run-2"


def test_a_held_coordinator_lock_answers_busy(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 10)
    write_background(migrations)
    kit.runs.up()
    other = MongoLock(db.migronaut_lock, f"background:{SPLIT_NAME}", 30)
    other.acquire()
    try:
        answer = kit.background.coordinate(SPLIT_NAME)
        assert answer.next == "busy" and answer.retry_after_ms > 0
    finally:
        other.release()
    assert kit.background.coordinate(SPLIT_NAME).next == "process"


def test_unlock_fences_a_live_lane(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 2_000)
    write_background(
        migrations,
        body="""
        import time
        background = {"collection": "users", "from": 1, "to": 2, "batch_size": 20,
                      "max_parallel": 1}

        def migrate(doc, ctx):
            time.sleep(0.002)
            return {**doc, "done": True}
        """,
    )
    kit.runs.up()
    kit.background.coordinate(SPLIT_NAME)
    results: list[str] = []
    lane = threading.Thread(
        target=lambda: results.append(kit.background.run_slice(SPLIT_NAME, slice_ms=30_000).outcome)
    )
    lane.start()
    while db.users.count_documents({"_v": 2}) < 100:
        pass
    outcome = kit_json.unlock(kit, SPLIT_NAME, requested_by="ops", reason="stuck")
    lane.join(timeout=30)
    assert outcome["leases"] == 1
    assert results == ["lost"]
    history = kit_json.history(kit, SPLIT_NAME)
    assert history[-1]["action"] == "unlock" and history[-1]["requested_by"] == "ops"
    assert kit_json.run(kit, SPLIT_NAME)["status"] == "completed"
    assert kit_json.status(kit, SPLIT_NAME)["totals"]["migrated"] == 2_000


def test_a_cancel_token_stops_the_driver_and_the_next_run_resumes(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 3_000)
    write_background(migrations, batch_size=50, max_parallel=2)
    kit.runs.up()
    token = CancelToken()
    kit.background.on("background:batch", lambda event, payload: token.cancel("test"))
    with pytest.raises(RunAbortedError):
        kit.background.run(SPLIT_NAME, concurrency=2, cancel=token)
    assert 0 < db.users.count_documents({"_v": 2}) < 3_000
    assert kit_json.status(kit, SPLIT_NAME)["live_leases"] == 0
    view = kit_json.run(kit, SPLIT_NAME, concurrency=2, cancel=CancelToken())
    assert view["status"] == "completed"
    assert view["totals"]["migrated"] == 3_000


def test_a_missing_version_index_is_warned_once(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path, caplog: pytest.LogCaptureFixture
) -> None:
    seed_users(db, 1_000)
    write_background(migrations, batch_size=100)
    kit.runs.up()
    with caplog.at_level(logging.WARNING):
        kit.background.run(SPLIT_NAME, concurrency=2)
    warnings = [record for record in caplog.records if "index" in record.getMessage()]
    assert len(warnings) == 1
    assert "First" not in caplog.text


def test_status_view_shape(kit: Migronaut, db: Database[dict[str, Any]], migrations: Path) -> None:
    seed_users(db, 2_500)
    write_background(migrations, batch_size=100, max_parallel=2)
    kit.runs.up()
    kit.background.run(SPLIT_NAME, concurrency=2, slice_ms=100, until_done=False)
    view = kit_json.status(kit, SPLIT_NAME)
    for key in (
        "status",
        "phase",
        "pass",
        "generation",
        "progress",
        "eta_seconds",
        "totals",
        "partitions",
        "live_leases",
        "failed_documents",
        "last_error",
        "waits_for",
        "coordinator",
        "created_at",
        "started_at",
    ):
        assert key in view
    assert view["progress"]["estimate"] == 2_500
    assert "token" not in repr(view)
    partitions = kit_json.partitions(kit, SPLIT_NAME)
    assert partitions and all("token" not in repr(p) for p in partitions)
    assert sum(p["counters"].get("migrated", 0) for p in partitions) == view["progress"]["done"]


def test_a_large_pass_is_planned_from_an_estimate(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    """Past ``partitions.estimate_above`` matching documents (100,000 unless the file
    says otherwise) planning samples the collection instead of counting every
    match; status says the estimate is approximate."""
    seed_users(db, 40_000)
    write_background(
        migrations, batch_size=500, max_parallel=4, extra='"partitions": {"estimate_above": 5000},'
    )
    kit.runs.up()
    assert kit.background.coordinate(SPLIT_NAME).next == "process"
    view = kit_json.status(kit, SPLIT_NAME)
    # Every document matches, so the sampled share is 1 and the estimate the size.
    assert view["progress"] == {
        "estimate": 40_000,
        "at_least": False,
        "approximate": True,
        "done": 0,
        "percent": 0.0,
        "source": "plan",
    }
    assert len(kit_json.partitions(kit, SPLIT_NAME)) > 4


def test_a_coordinator_step_cut_off_by_the_network_is_retried(
    mongo_uri: str,
    mongo_client: MongoClient[dict[str, Any]],
    db: Database[dict[str, Any]],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two steps in a row lose their connection (a failover, a restart): the run goes on."""
    migrations = tmp_path / "migrations"
    seed_users(db, 300)
    write_background(migrations)
    app = f"drive-retry-{db.name}"
    client: MongoClient[dict[str, Any]] = MongoClient(mongo_uri, appname=app, tz_aware=True)
    with make_kit(mongo_uri, db, migrations, client=client) as kit:
        kit.runs.up()
        # Each step's lock write fails twice (pymongo retries it once): two steps fail.
        mongo_client.admin.command(
            "configureFailPoint",
            "failCommand",
            mode={"times": 4},
            data={"failCommands": ["findAndModify"], "closeConnection": True, "appName": app},
        )
        try:
            with caplog.at_level(logging.WARNING, logger="migronaut_core.background"):
                view = kit_json.run(kit, SPLIT_NAME)
        finally:
            mongo_client.admin.command("configureFailPoint", "failCommand", mode="off")
    client.close()
    assert view["status"] == "completed"
    assert view["totals"]["migrated"] == 300
    retried = [r for r in caplog.records if "coordinator step failed" in r.getMessage()]
    assert len(retried) == 2


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
