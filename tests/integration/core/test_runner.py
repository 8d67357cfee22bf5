"""A background ``up`` reports ``applied`` (L-17); the requires guard's context names the
``migration`` that waits and what it ``waits_for`` (L-21b)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core import BackgroundPendingError, Migronaut
from tests.support.background import SPLIT_NAME, seed_users, write_background
from tests.support.runner import write_migration

AFTER_SPLIT = "20240105000000_drop_full_names"


def test_a_background_up_is_applied_in_the_run_result(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 10)
    write_background(migrations)

    result = kit.runs.up()

    (item,) = result.migrations
    assert (item.name, item.kind, item.status) == (SPLIT_NAME, "background", "applied")
    assert result.to_dict()["migrations"][0]["status"] == "applied"
    record = db.migronaut_changelog.find_one({"_id": SPLIT_NAME})
    assert record is not None and record["status"] == "applied"
    assert kit.background.status(SPLIT_NAME) is not None  # registered, not yet rewritten
    down = kit.runs.down()
    assert [(item.name, item.status) for item in down.migrations] == [(SPLIT_NAME, "reverted")]


def test_the_requires_guard_names_the_waiting_migration_and_what_it_waits_for(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 10)
    write_background(migrations)
    write_migration(
        migrations, AFTER_SPLIT, f"requires = ['{SPLIT_NAME}']\n\ndef up(ctx):\n    pass\n"
    )

    with pytest.raises(BackgroundPendingError) as raised:
        kit.runs.up()

    assert raised.value.context == {
        "migration": AFTER_SPLIT,
        "waits_for": [{"migration": SPLIT_NAME, "status": "pending"}],
    }
