"""`migronaut background repin --json` shows the pinned checksum (K-12b); `background
unlock` clears a stuck coordinator lock of a name with no state (K-15b)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pymongo.database import Database

from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.cli import configure, migronaut

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
