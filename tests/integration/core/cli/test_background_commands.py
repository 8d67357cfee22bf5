"""`migronaut background …` end to end: JSON output, controls, exit codes, Ctrl-C."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pymongo.database import Database

from migronaut_core.cli import NOT_COMPLETED_EXIT
from migronaut_core.errors import (
    MigrationInvalidNameError,
    NotAppliedError,
    RunAbortedError,
)
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.cli import configure, migronaut

USERS = 2_000


def as_json(result: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(result.stdout)


def applied(tmp_path: Path, mongo_uri: str, db: Database[dict[str, Any]], **spec: Any) -> None:
    """A registered (pending) background migration over USERS seeded users."""
    configure(tmp_path, mongo_uri, db.name)
    write_background(tmp_path / "migrations", **spec)
    seed_users(db, USERS)
    up = migronaut(tmp_path, "up")
    assert up.returncode == 0, up.stderr


def test_run_to_completion_and_inspect(
    tmp_path: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    applied(tmp_path, mongo_uri, db)

    status = migronaut(tmp_path, "background", "status", SPLIT_NAME, "--json")
    assert status.returncode == 0, status.stderr
    assert as_json(status)["status"] == "pending"
    runnable = migronaut(tmp_path, "background", "runnable", "--json")
    assert {"migration": SPLIT_NAME, "status": "pending"} in as_json(runnable)

    run = migronaut(tmp_path, "background", "run", SPLIT_NAME, "--concurrency", "2", "--json")
    assert run.returncode == 0, run.stderr
    view = as_json(run)
    assert view["status"] == "completed"
    assert view["totals"]["migrated"] == USERS
    assert f"{SPLIT_NAME}: " in run.stderr and "documents" in run.stderr  # plain progress
    assert db.users.count_documents({"first": {"$exists": True}, "_v": 2}) == USERS

    partitions = migronaut(tmp_path, "background", "partitions", SPLIT_NAME, "--json")
    assert partitions.returncode == 0, partitions.stderr
    rows = as_json(partitions)
    assert rows and all(row["status"] == "done" for row in rows), rows
    assert sum(row["counters"].get("migrated", 0) for row in rows) == USERS
    assert "token" not in partitions.stdout

    history = migronaut(tmp_path, "background", "history", SPLIT_NAME, "--json")
    assert history.returncode == 0, history.stderr
    assert isinstance(as_json(history), list)

    every = migronaut(tmp_path, "background", "status", "--json")
    assert [item["name"] for item in as_json(every)] == [SPLIT_NAME]
    human = migronaut(tmp_path, "background", "status")
    assert human.returncode == 0, human.stderr
    assert SPLIT_NAME in human.stdout and "completed" in human.stdout and "100.0%" in human.stdout
    assert as_json(migronaut(tmp_path, "background", "runnable", "--json")) == []
    assert "nothing to run" in migronaut(tmp_path, "background", "runnable").stdout


def test_controls_record_who_and_why(
    tmp_path: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    applied(tmp_path, mongo_uri, db)

    def control(*args: str) -> dict[str, Any]:
        result = migronaut(tmp_path, "background", *args, SPLIT_NAME, "--json")
        assert result.returncode == 0, result.stderr
        answer: dict[str, Any] = as_json(result)
        return answer

    paused = control("pause", "--reason", "maintenance", "--requested-by", "ana")
    assert paused == {
        "name": SPLIT_NAME,
        "action": "pause",
        "previous": "pending",
        "applied": "changed",
        "status": "paused",
    }
    again = migronaut(tmp_path, "background", "pause", SPLIT_NAME)
    assert again.returncode == 0, again.stderr
    assert "unchanged (already paused)" in again.stdout

    stopped = migronaut(tmp_path, "background", "run", SPLIT_NAME, "--json")
    assert stopped.returncode == NOT_COMPLETED_EXIT, stopped.stderr
    assert as_json(stopped)["status"] == "paused"
    assert "not completed" in stopped.stderr

    resumed = migronaut(tmp_path, "background", "resume", SPLIT_NAME, "--requested-by", "bo")
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed (paused -> pending)" in resumed.stdout
    assert control("cancel", "--wait")["status"] == "cancelled"
    assert control("retry", "--requested-by", "ana")["status"] == "pending"
    assert control("cancel")["status"] == "cancelled"
    from_start = control("retry", "--from-start")
    assert (from_start["action"], from_start["status"]) == ("retry_from_start", "pending")
    unlocked = control("unlock")
    assert unlocked["action"] == "unlock" and unlocked["leases"] == 0

    run = migronaut(tmp_path, "background", "run", SPLIT_NAME, "--json")
    assert run.returncode == 0, run.stderr
    assert as_json(run)["totals"]["migrated"] == USERS

    history = as_json(migronaut(tmp_path, "background", "history", SPLIT_NAME, "--json"))
    pause = next(entry for entry in history if entry.get("action") == "pause")
    assert pause["by"] == "ana" and pause["reason"] == "maintenance"
    assert [entry["action"] for entry in history if entry.get("by") in ("ana", "bo")] == [
        "pause",
        "resume",
        "retry",
    ]
    human = migronaut(tmp_path, "background", "history", SPLIT_NAME)
    assert "by ana (maintenance)" in human.stdout


def test_bad_and_unknown_names(
    tmp_path: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    configure(tmp_path, mongo_uri, db.name)

    bad = migronaut(tmp_path, "background", "status", "unknown_20990101000000_x", "--json")
    assert bad.returncode == MigrationInvalidNameError.exit_code, bad.stderr
    assert as_json(bad)["error"]["code"] == "MIGRATION_INVALID_NAME"

    unknown = "20990101000000_unknown"
    for args in (
        ("status", unknown, "--json"),
        ("partitions", unknown, "--json"),
        ("run", unknown, "--json"),
        ("pause", unknown, "--json"),
    ):
        result = migronaut(tmp_path, "background", *args)
        assert result.returncode == NotAppliedError.exit_code, (args, result.stderr)
        assert as_json(result)["error"]["code"] == "NOT_APPLIED"
    human = migronaut(tmp_path, "background", "status", unknown)
    assert human.returncode == NotAppliedError.exit_code
    assert "NotAppliedError" in human.stderr and "not registered" in human.stderr

    empty = migronaut(tmp_path, "background", "status")
    assert empty.returncode == 0, empty.stderr
    assert "no background migrations" in empty.stdout


def test_ctrl_c_stops_lanes_and_the_next_run_resumes(
    tmp_path: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    # Batches of 50 a quarter second apart: the run lasts seconds however fast the
    # machine, and progress is watched in-process, so a loaded machine's slow CLI
    # start cannot let it finish before the interrupt.
    applied(tmp_path, mongo_uri, db, batch_size=50, extra='"throttle": {"pause_ms": 250},')

    process = subprocess.Popen(
        [sys.executable, "-m", "migronaut_core.cli", "background", "run", SPLIT_NAME],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with make_kit(mongo_uri, db, tmp_path / "migrations") as kit:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and process.poll() is None:
                view = kit_json.status(kit, SPLIT_NAME)
                if view is not None and view["progress"]["done"] > 0:
                    break
                time.sleep(0.05)
        assert process.poll() is None, "the run ended before it could be interrupted"
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()

    assert process.returncode == RunAbortedError.exit_code, stderr
    assert "RunAbortedError" in stderr and "resumes from its last checkpoint" in stderr
    view = as_json(migronaut(tmp_path, "background", "status", SPLIT_NAME, "--json"))
    assert view["status"] == "running" and view["live_leases"] == 0
    assert 0 < view["progress"]["done"] < USERS

    run = migronaut(tmp_path, "background", "run", SPLIT_NAME, "--concurrency", "2", "--json")
    assert run.returncode == 0, run.stderr
    assert as_json(run)["totals"]["migrated"] == USERS


WITHDRAWN = "20240103000000_withdrawn_long_ago"


def test_repin_json_shows_the_pinned_checksum(
    tmp_path: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    configure(tmp_path, mongo_uri, db.name)
    write_background(tmp_path / "migrations", max_parallel=2)
    seed_users(db, 20)
    assert migronaut(tmp_path, "up").returncode == 0
    write_background(tmp_path / "migrations", max_parallel=3)

    repinned = migronaut(tmp_path, "background", "repin", SPLIT_NAME, "--json")

    assert repinned.returncode == 0, repinned.stderr
    answer = json.loads(repinned.stdout)
    state = db.migronaut_background.find_one({"_id": SPLIT_NAME})
    assert state is not None
    assert answer["checksum"] == state["checksum"]
    assert (answer["action"], answer["applied"], answer["replan"]) == ("repin", "changed", True)


def test_unlock_clears_a_stuck_lock_of_a_name_with_no_state(
    tmp_path: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    configure(tmp_path, mongo_uri, db.name)
    migrations = tmp_path / "migrations"
    migrations.mkdir()
    with make_kit(mongo_uri, db, migrations) as kit:
        assert kit._runtime.lock_for(WITHDRAWN).acquire()

    unlocked = migronaut(tmp_path, "background", "unlock", WITHDRAWN, "--json")

    assert unlocked.returncode == 0, unlocked.stderr
    assert json.loads(unlocked.stdout) == {
        "name": WITHDRAWN,
        "action": "unlock",
        "previous": None,
        "applied": "changed",
        "status": "unregistered",
        "lock": True,
        "leases": 0,
    }
    assert db.migronaut_lock.count_documents({"owner": {"$ne": None}}) == 0
    human = migronaut(tmp_path, "background", "unlock", WITHDRAWN)
    assert human.returncode == 0, human.stderr
    assert "coordinator lock not held" in human.stdout
