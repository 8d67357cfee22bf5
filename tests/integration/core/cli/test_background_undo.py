"""`migronaut background undo NAME`: refused while the migration runs, then an undo run
and shown by status."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pymongo.database import Database

from migronaut_core.errors import UndoUnavailableError
from tests.support.background import SPLIT_NAME, seed_users, write_background
from tests.support.cli import configure, migronaut

JOURNALED = '"revision_field": "rev", "undo": "journal",'


def test_background_undo_restores_from_the_journal_and_status_shows_it(
    tmp_path: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    configure(tmp_path, mongo_uri, db.name)
    write_background(tmp_path / "migrations", batch_size=100, extra=JOURNALED)
    seed_users(db, 500)
    assert migronaut(tmp_path, "up").returncode == 0

    refused = migronaut(tmp_path, "background", "undo", SPLIT_NAME)
    assert refused.returncode == UndoUnavailableError.exit_code, refused.stderr
    assert refused.stderr.startswith("UndoUnavailableError: ") and "is pending" in refused.stderr
    assert migronaut(tmp_path, "background", "run", SPLIT_NAME).returncode == 0

    undo = migronaut(tmp_path, "background", "undo", SPLIT_NAME, "--reason", "bad release")
    assert undo.returncode == 0, undo.stderr
    assert f"{SPLIT_NAME}: undoing (completed -> pending)" in undo.stdout
    ran = migronaut(tmp_path, "background", "run", SPLIT_NAME)
    assert ran.returncode == 0, ran.stderr

    status = migronaut(tmp_path, "background", "status", SPLIT_NAME, "--json")
    shown = json.loads(status.stdout)
    assert (shown["status"], shown["direction"], shown["undo"]) == (
        "completed",
        "revert",
        "journal",
    )
    assert shown["totals"]["migrated"] == 500
    assert db.users.count_documents({"_v": 1, "name": {"$exists": True}}) == 500
