"""Repin answers the checksum it pinned (K-12b); unlock works on any name (K-15b)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pymongo.database import Database

from migronaut_core import ControlResult, Migronaut
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, seed_users, write_background

WITHDRAWN = "20240103000000_withdrawn_long_ago"


def test_a_repin_answers_the_checksum_it_pinned(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 50)
    write_background(migrations, batch_size=50, max_parallel=2)
    kit.runs.up()
    registered = db.migronaut_background.find_one({"_id": SPLIT_NAME})
    assert registered is not None

    write_background(migrations, batch_size=50, max_parallel=3)
    result = kit.background.control(SPLIT_NAME, "repin")

    state = db.migronaut_background.find_one({"_id": SPLIT_NAME})
    assert state is not None
    assert result.checksum == state["checksum"] != registered["checksum"]
    (record,) = [row for row in kit.runs.status() if row.name == SPLIT_NAME]
    assert record.checksum_ok
    assert result.to_dict()["checksum"] == result.checksum
    # Only a repin pins one: other controls' JSON has no checksum.
    assert "checksum" not in kit.background.control(SPLIT_NAME, "pause").to_dict()


def test_an_unlock_clears_a_coordinator_lock_left_without_a_state(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    migrations.mkdir(parents=True, exist_ok=True)
    # A coordinator lock a withdrawn (or deleted) migration left behind.
    assert kit._runtime.lock_for(WITHDRAWN).acquire()
    assert kit.background.status(WITHDRAWN) is None

    result = kit.background.control(WITHDRAWN, "unlock", requested_by="ana")

    assert result == ControlResult("changed", "unregistered", lock=True, leases=0)
    lock = kit._runtime.lock_for(WITHDRAWN).inspect()
    assert lock is not None and not lock.held
    assert db.migronaut_background.count_documents({}) == 0  # no state made up for it
    again = kit.background.control(WITHDRAWN, "unlock")
    assert again == ControlResult("unchanged", "unregistered", lock=False, leases=0)


def test_an_unlock_of_a_registered_migration_is_still_recorded(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 10)
    write_background(migrations)
    kit.runs.up()
    assert kit._runtime.lock_for(SPLIT_NAME).acquire()

    result = kit.background.control(SPLIT_NAME, "unlock", requested_by="ana", reason="stuck")

    assert result == ControlResult("changed", "pending", lock=True, leases=0)
    (entry,) = [row for row in kit_json.history(kit, SPLIT_NAME) if row["action"] == "unlock"]
    assert entry["lock"] is True and entry["reason"] == "stuck"
