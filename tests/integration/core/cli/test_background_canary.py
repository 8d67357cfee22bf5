"""`migronaut background approve|reject NAME`: a canary awaiting approval, from the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pymongo.database import Database

from tests.support.background import SPLIT_NAME, seed_users, write_background
from tests.support.cli import configure, migronaut

APPROVAL = '"canary": {"fraction": 0.5, "approval": True},'


def test_a_canary_awaits_approval_then_the_cli_rejects_and_approves_it(
    tmp_path: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    configure(tmp_path, mongo_uri, db.name)
    write_background(tmp_path / "migrations", batch_size=100, extra=APPROVAL)
    seed_users(db, 300)
    assert migronaut(tmp_path, "up").returncode == 0
    _run_until_awaiting(tmp_path)

    reasonless = migronaut(tmp_path, "background", "reject", SPLIT_NAME)
    assert reasonless.returncode == 2 and "--reason" in reasonless.stderr
    rejected = migronaut(tmp_path, "background", "reject", SPLIT_NAME, "--reason", "errors up")
    assert rejected.returncode == 0, rejected.stderr
    assert f"{SPLIT_NAME}: rejected (running -> paused)" in rejected.stdout
    assert migronaut(tmp_path, "background", "resume", SPLIT_NAME).returncode == 0
    _run_until_awaiting(tmp_path)

    approved = migronaut(tmp_path, "background", "approve", SPLIT_NAME, "--json")
    assert approved.returncode == 0, approved.stderr
    shown = json.loads(approved.stdout)
    assert (shown["action"], shown["applied"], shown["previous"]) == (
        "approve",
        "changed",
        "running",
    )
    ran = migronaut(tmp_path, "background", "run", SPLIT_NAME)
    assert ran.returncode == 0, ran.stderr
    assert db.users.count_documents({"_v": 2}) == 300


def _run_until_awaiting(cwd: Path) -> None:
    """Drive it one coordinator round at a time until its canary awaits approval."""
    for _ in range(10):
        once = migronaut(cwd, "background", "run", SPLIT_NAME, "--once")
        assert once.returncode == 0, once.stderr
        status = json.loads(migronaut(cwd, "background", "status", SPLIT_NAME, "--json").stdout)
        if status["canary"]["phase"] == "awaiting_approval":
            assert status["status"] == "running"
            return
    raise AssertionError("the canary never came to await approval")
