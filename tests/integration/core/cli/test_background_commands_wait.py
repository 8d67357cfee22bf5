"""`migronaut background wait`, the deploy gate, against a real mongod: its exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from pymongo.database import Database

from migronaut_core.cli import NOT_COMPLETED_EXIT, WAIT_TIMEOUT_EXIT
from migronaut_core.errors import ConfigInvalidError, NotAppliedError
from tests.support.background import SPLIT_NAME, seed_users, write_background
from tests.support.cli import configure, migronaut

USERS = 1_000


def _registered(tmp_path: Path, mongo_uri: str, db: Database[dict[str, Any]]) -> None:
    configure(tmp_path, mongo_uri, db.name)
    write_background(tmp_path / "migrations")
    seed_users(db, USERS)
    up = migronaut(tmp_path, "up")
    assert up.returncode == 0, up.stderr


def test_the_gate_opens_when_a_run_elsewhere_completes_the_migration(
    tmp_path: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    _registered(tmp_path, mongo_uri, db)
    waiting = subprocess.Popen(
        [sys.executable, "-m", "migronaut_core.cli", "background", "wait", SPLIT_NAME],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert waiting.stderr is not None
        first = waiting.stderr.readline()  # the status it found first, before any run
        run = migronaut(tmp_path, "background", "run", SPLIT_NAME)
        assert run.returncode == 0, run.stderr
        out, err = waiting.communicate(timeout=60)
    finally:
        waiting.kill()
    assert waiting.returncode == 0, err
    assert first.strip() == f"{SPLIT_NAME} is pending"
    assert f"{SPLIT_NAME} completed" in out
    assert db.users.count_documents({"_v": 2}) == USERS


def test_a_pending_migration_times_out_and_a_cancelled_one_ends_the_wait(
    tmp_path: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    _registered(tmp_path, mongo_uri, db)
    timed_out = migronaut(
        tmp_path,
        "background",
        "wait",
        SPLIT_NAME,
        "--timeout",
        "0.5",
        "--interval",
        "0.1",
        "--json",
    )
    assert timed_out.returncode == WAIT_TIMEOUT_EXIT, timed_out.stderr
    report = json.loads(timed_out.stdout)
    assert report["outcome"] == "timed-out" and report["status"] == "pending"
    assert report["waited_s"] >= 0.5

    cancel = migronaut(tmp_path, "background", "cancel", SPLIT_NAME, "--reason", "not today")
    assert cancel.returncode == 0, cancel.stderr
    ended = migronaut(tmp_path, "background", "wait", SPLIT_NAME, "--json")
    assert ended.returncode == NOT_COMPLETED_EXIT, ended.stderr
    assert json.loads(ended.stdout) | {"waited_s": 0} == {
        "name": SPLIT_NAME,
        "until": "completed",
        "outcome": "ended",
        "status": "cancelled",
        "waited_s": 0,
    }
    assert db.users.count_documents({"_v": 2}) == 0  # waiting drives nothing


def test_an_unknown_name_or_a_bad_timeout_is_refused_with_its_code(
    tmp_path: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    _registered(tmp_path, mongo_uri, db)
    unknown = migronaut(tmp_path, "background", "wait", "20990101000000_nothing", "--json")
    assert unknown.returncode == NotAppliedError.exit_code
    assert json.loads(unknown.stdout)["error"]["code"] == NotAppliedError.code
    negative = migronaut(tmp_path, "background", "wait", SPLIT_NAME, "--timeout", "-1", "--json")
    assert negative.returncode == ConfigInvalidError.exit_code
    assert "timeout" in json.loads(negative.stdout)["error"]["message"]
