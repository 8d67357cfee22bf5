"""``migronaut background failed`` and ``retry --failed-only``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pymongo.database import Database

from tests.support.background import FLAKY_NAME, fix_flaky, seed_users, write_flaky
from tests.support.cli import configure, migronaut

FAILING = [n for n in range(200) if n % 10 == 3]


def test_failed_lists_ids_and_kinds_and_retry_failed_only_rewrites_them(
    tmp_path: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    configure(tmp_path, mongo_uri, db.name)
    path = write_flaky(tmp_path / "migrations")
    seed_users(db, 200)
    assert migronaut(tmp_path, "up").returncode == 0
    run = migronaut(tmp_path, "background", "run", FLAKY_NAME, "--json")
    assert json.loads(run.stdout)["status"] == "completed", run.stderr

    listed = migronaut(tmp_path, "background", "failed", FLAKY_NAME, "--json", "--limit", "3")
    assert listed.returncode == 0, listed.stderr
    page = json.loads(listed.stdout)
    assert (page["total"], [row["id"] for row in page["documents"]]) == (20, FAILING[:3])
    assert {row["error"] for row in page["documents"]} == {"ValueError"}
    human = migronaut(tmp_path, "background", "failed", FLAKY_NAME)
    assert "20 failed document(s)" in human.stdout
    assert "  3  transform: ValueError  generation 1" in human.stdout
    for output in (listed.stdout, human.stdout):
        assert "First" not in output and "cannot split" not in output

    both = migronaut(tmp_path, "background", "retry", FLAKY_NAME, "--failed-only", "--from-start")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
    before = {doc["_id"]: doc for doc in db.users.find({"_v": 2})}
    fix_flaky(path)
    retry = migronaut(
        tmp_path, "background", "retry", FLAKY_NAME, "--failed-only", "--repin", "--reason", "fix"
    )
    assert retry.returncode == 0, retry.stderr
    assert "retries 20 failed document(s) only" in retry.stdout
    again = migronaut(tmp_path, "background", "retry", FLAKY_NAME, "--failed-only", "--json")
    assert again.returncode == 15, again.stdout  # pending now: refused, BACKGROUND_CONFLICT
    assert "BACKGROUND_CONFLICT" in again.stdout + again.stderr

    run = migronaut(tmp_path, "background", "run", FLAKY_NAME, "--json")
    assert json.loads(run.stdout)["status"] == "completed", run.stderr
    left = json.loads(migronaut(tmp_path, "background", "failed", FLAKY_NAME, "--json").stdout)
    assert [(row["id"], row["error"]) for row in left["documents"]] == [(13, "KeyError")]
    assert all(db.users.find_one({"_id": key}) == doc for key, doc in before.items())
    assert db.users.count_documents({"_v": 1}) == 1
