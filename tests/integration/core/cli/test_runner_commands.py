"""`migronaut up` says a background migration was registered; its JSON says applied (L-17)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pymongo.database import Database

from tests.support.background import SPLIT_NAME, seed_users, write_background
from tests.support.cli import configure, migronaut


def test_up_prints_registered_for_a_background_migration(
    tmp_path: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    configure(tmp_path, mongo_uri, db.name)
    seed_users(db, 10)
    write_background(tmp_path / "migrations")

    human = migronaut(tmp_path, "up")

    assert human.returncode == 0, human.stderr
    assert f"registered {SPLIT_NAME}" in " ".join(human.stdout.split())


def test_up_json_reports_a_background_migration_applied(
    tmp_path: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    configure(tmp_path, mongo_uri, db.name)
    seed_users(db, 10)
    write_background(tmp_path / "migrations")

    answer = migronaut(tmp_path, "up", "--json")

    assert answer.returncode == 0, answer.stderr
    (item,) = json.loads(answer.stdout)["migrations"]
    assert (item["name"], item["kind"], item["status"]) == (SPLIT_NAME, "background", "applied")
