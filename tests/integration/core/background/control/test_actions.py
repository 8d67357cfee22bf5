"""The one control entry point, and status views that read without writing."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest
from pymongo.database import Database

from migronaut_core import (
    CONTROL_ACTIONS,
    BackgroundConflictError,
    BackgroundStatusView,
    ConfigInvalidError,
    ControlAction,
    ControlResult,
    Migronaut,
    NotAppliedError,
)
from tests.support import kit_json
from tests.support.background import (
    INITIALS_NAME,
    SPLIT_NAME,
    make_kit,
    seed_users,
    write_background,
)


def test_control_background_applies_every_action_and_answers_a_control_result(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 300)
    journaled = '"revision_field": "rev", "undo": "journal",'
    write_background(migrations, batch_size=50, max_parallel=2, extra=journaled)
    kit.runs.up()
    done: list[ControlAction] = []

    def control(action: ControlAction, **options: Any) -> ControlResult:
        result = kit.background.control(
            SPLIT_NAME, action, requested_by="ana", reason=f"test {action}", **options
        )
        assert isinstance(result, ControlResult)
        done.append(action)
        return result

    assert control("pause", wait=True) == ControlResult("changed", "paused", stopped=True)
    assert control("resume") == ControlResult("changed", "pending", may_run=True)
    assert control("cancel") == ControlResult("changed", "cancelled")
    assert control("retry") == ControlResult("changed", "pending", may_run=True)
    kit.background.control(SPLIT_NAME, "cancel")
    assert control("retry_from_start") == ControlResult("changed", "pending", may_run=True)

    write_background(migrations, batch_size=50, max_parallel=3, extra=journaled)
    assert control("repin") == ControlResult(
        "changed", "pending", replan=True, checksum=ANY, may_run=True
    )
    assert all(row.checksum_ok for row in kit.runs.status() if row.name == SPLIT_NAME)

    unlocked = control("unlock")
    assert unlocked == ControlResult("unchanged", "pending", lock=False, leases=0)
    assert unlocked.to_dict() == {
        "applied": "unchanged",
        "status": "pending",
        "lock": False,
        "leases": 0,
    }
    assert kit._runtime.lock_for(SPLIT_NAME).acquire()
    held = kit.background.control(SPLIT_NAME, "unlock")
    assert held == ControlResult("changed", "pending", lock=True, leases=0)

    kit.background.control(SPLIT_NAME, "cancel")
    assert control("undo") == ControlResult("changed", "pending", may_run=True)

    canary = {"approve", "reject"}  # a canary's (test_canary_control.py)
    assert set(done) == set(CONTROL_ACTIONS) - canary
    recorded = {
        entry["action"]: entry.get("by") or entry.get("requested_by")
        for entry in kit_json.history(kit, SPLIT_NAME)
        if (entry.get("reason") or "").startswith("test ")
    }
    assert set(recorded) == set(CONTROL_ACTIONS) - {"retry_from_start", *canary}  # a retry
    assert set(recorded.values()) == {"ana"}


def test_a_retry_may_repin_first(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 100)
    write_background(migrations, batch_size=50, max_parallel=2)
    kit.runs.up()
    kit.background.control(SPLIT_NAME, "cancel")
    write_background(migrations, batch_size=50, max_parallel=3)
    repinned = kit.background.control(SPLIT_NAME, "repin")
    assert (repinned.status, repinned.may_run) == ("cancelled", False)  # nothing to drive yet
    write_background(migrations, batch_size=50, max_parallel=4)  # edited again: a new pin
    result = kit.background.control(SPLIT_NAME, "retry", repin=True)
    assert result == ControlResult("changed", "pending", replan=True, may_run=True)
    actions = [entry["action"] for entry in kit_json.history(kit, SPLIT_NAME)]
    assert actions[-2:] == ["repin", "retry"]
    assert kit_json.status(kit, SPLIT_NAME)["status"] == "pending"
    assert all(row.checksum_ok for row in kit.runs.status() if row.name == SPLIT_NAME)


def test_a_refused_retry_leaves_the_pin_as_it_was(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 100)
    write_background(migrations, batch_size=50, max_parallel=2)
    kit.runs.up()
    kit.background.control(SPLIT_NAME, "pause")
    pinned = kit._runtime.store.states.get(SPLIT_NAME)
    assert pinned is not None
    history = kit_json.history(kit, SPLIT_NAME)
    write_background(migrations, batch_size=50, max_parallel=3)
    for action in ("retry", "retry_from_start"):
        with pytest.raises(BackgroundConflictError) as error:
            kit.background.control(SPLIT_NAME, action, repin=True)
        assert error.value.context["status"] == "paused"
    after = kit._runtime.store.states.get(SPLIT_NAME)
    assert after is not None
    assert (after["checksum"], after["spec"]) == (pinned["checksum"], pinned["spec"])
    assert kit_json.history(kit, SPLIT_NAME) == history
    assert not any(row.checksum_ok for row in kit.runs.status() if row.name == SPLIT_NAME)


def test_control_background_refuses_bad_requests_before_touching_anything(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 10)
    write_background(migrations)
    kit.runs.up()
    before = kit_json.history(kit, SPLIT_NAME)
    refused: list[tuple[str, dict[str, Any]]] = [
        ("explode", {}),
        ("resume", {"wait": True}),
        ("pause", {"repin": True}),
        ("unlock", {"repin": True}),
    ]
    for action, options in refused:
        with pytest.raises(ConfigInvalidError) as error:
            kit.background.control(SPLIT_NAME, action, **options)  # type: ignore[arg-type]
        assert error.value.context["key"] in ("action", "wait", "repin")
    with pytest.raises(NotAppliedError):
        kit.background.control("20240109000000_nothing", "pause")
    assert kit_json.history(kit, SPLIT_NAME) == before
    assert kit_json.status(kit, SPLIT_NAME)["status"] == "pending"


def _indexes(db: Database[dict[str, Any]], collection: str) -> list[str]:
    return sorted(index["name"] for index in db[collection].list_indexes())


def _documents(db: Database[dict[str, Any]], collection: str) -> list[dict[str, Any]]:
    return list(db[collection].find().sort("_id", 1))


def test_status_views_of_an_empty_database_create_nothing(
    kit: Migronaut, db: Database[dict[str, Any]]
) -> None:
    assert kit_json.status(kit) == []
    assert kit.background.statuses() == []
    assert kit.background.names() == []
    assert kit.background.status(SPLIT_NAME) is None
    assert kit_json.status(kit, SPLIT_NAME) is None
    assert db.list_collection_names() == []


def test_status_views_read_without_creating_indexes_or_writing(
    mongo_uri: str, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 500)
    write_background(migrations, batch_size=50, max_parallel=2)
    write_background(
        migrations,
        INITIALS_NAME,
        body=(
            'requires = ["20240101000000_split_names"]\n'
            'background = {"collection": "users", "from": 2, "to": 3}\n'
            "def migrate(doc, ctx):\n"
            '    return {**doc, "initials": doc["first"][:1]}\n'
        ),
    )
    with make_kit(mongo_uri, db, migrations) as writer:
        writer.runs.up()
        writer.background.coordinate(SPLIT_NAME)
        writer.background.run_slice(SPLIT_NAME, slice_ms=100)
        # Completed behind the engine's back: a read must not unblock the one that waits.
        names = writer.config.background_collections
    db[names.state].update_one({"_id": SPLIT_NAME}, {"$set": {"status": "completed"}})
    for collection in (names.state, names.partitions):
        db[collection].drop_indexes()
    kept = {c: (_indexes(db, c), _documents(db, c)) for c in (names.state, names.partitions)}
    collections = sorted(db.list_collection_names())

    with make_kit(mongo_uri, db, migrations) as reader:
        views = reader.background.statuses()
        assert [view.name for view in views] == [SPLIT_NAME, INITIALS_NAME]
        assert all(isinstance(view, BackgroundStatusView) for view in views)
        assert views[0].partitions and views[0].progress.done > 0
        assert views[1].status == "blocked"
        assert reader.background.statuses(statuses=["blocked"]) == [views[1]]
        assert reader.background.statuses(names=[SPLIT_NAME]) == [views[0]]
        assert reader.background.names() == [SPLIT_NAME, INITIALS_NAME]
        assert reader.background.status(SPLIT_NAME) == views[0]
        assert kit_json.status(reader, SPLIT_NAME) == views[0].to_dict()
        assert len(kit_json.status(reader)) == 2
        assert kit_json.partitions(reader, SPLIT_NAME)
        assert kit_json.history(reader, SPLIT_NAME)

    assert {c: (_indexes(db, c), _documents(db, c)) for c in kept} == kept
    assert sorted(db.list_collection_names()) == collections


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
