"""`migronaut background verify` reports drift without changing anything."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pymongo.database import Database

from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.cli import configure, migronaut


def test_verify_reports_drift(tmp_path: Path, mongo_uri: str, db: Database[dict[str, Any]]) -> None:
    configure(tmp_path, mongo_uri, db.name)
    migrations = tmp_path / "migrations"
    seed_users(db, 100)
    write_background(migrations)
    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up()
        kit.background.run(SPLIT_NAME)
    seed_users(db, 5, start=1_000)
    result = migronaut(tmp_path, "background", "verify", "--on-drift", "report", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["drifted"] == [
        {"migration": SPLIT_NAME, "collection": "users", "action": "reported"}
    ]
    human = migronaut(tmp_path, "background", "verify", "--on-drift", "report")
    assert f"drifted  {SPLIT_NAME} on users: reported" in human.stdout
    assert db.users.count_documents({"_v": 1}) == 5
