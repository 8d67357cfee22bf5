"""The deploy gate's milestones on a migration whose validator soaks (kit.background.wait)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pymongo.database import Database

from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.validator import step

#: A soak far longer than the test: the migration stays in its finalize phase.
LONG_SOAK = '"validator": "version", "validator_soak": {"seconds": 3600},'


def test_a_soaking_validator_opens_migrated_but_not_completed_or_finalized(
    mongo_uri: str, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 30)
    write_background(migrations, extra=LONG_SOAK)
    with make_kit(mongo_uri, db, migrations, lock_ttl_seconds=4) as kit:
        kit.runs.up()
        waited = kit.background.wait(SPLIT_NAME, until="migrated", timeout=0.2)
        assert (waited.outcome, waited.status) == ("timed-out", "pending")

        assert step(kit, SPLIT_NAME).reason == "validator-soak"  # migrated; warn, soaking
        migrated = kit.background.wait(SPLIT_NAME, until="migrated", timeout=5)
        assert (migrated.outcome, migrated.status) == ("reached", "running")
        for later in ("completed", "finalized"):
            waited = kit.background.wait(SPLIT_NAME, until=later, timeout=0.3, poll_interval=0.1)
            assert (waited.outcome, waited.status) == ("timed-out", "running"), later

        kit.background.control(SPLIT_NAME, "cancel", reason="the soak found a bug")
        ended = kit.background.wait(SPLIT_NAME, until="finalized")
        assert (ended.outcome, ended.status) == ("ended", "cancelled")


def test_an_undone_migration_ends_the_wait_its_undo_s_completion_is_not_the_gate(
    mongo_uri: str, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 60)
    write_background(migrations, extra='"revision_field": "rev", "undo": "journal",')
    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up()
        kit.background.run(SPLIT_NAME)
        assert kit.background.wait(SPLIT_NAME, until="finalized").outcome == "reached"

        kit.background.control(SPLIT_NAME, "undo", reason="the release was rolled back")
        kit.background.run(SPLIT_NAME)
        assert db.users.count_documents({"_v": 1}) == 60  # undone
        for until in ("migrated", "completed", "finalized"):
            undone = kit.background.wait(SPLIT_NAME, until=until, timeout=1)
            assert (undone.outcome, undone.status) == ("ended", "reverted"), until
