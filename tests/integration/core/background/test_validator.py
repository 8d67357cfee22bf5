"""Finalize with a collection validator: warn, soak, error; old-shape writes; down restores it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database
from pymongo.errors import WriteError

from migronaut_core import Migronaut
from migronaut_core.background.validator import Validation, soak
from migronaut_core.cli.output import print_views
from migronaut_core.errors import LockLostError
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.validator import step, validation

VERSION = '"validator": "version", "validator_soak": {"passes": 2},'
#: A document in the old shape: what an old release of the application writes.
OLD_SHAPE = {"_id": 10_000, "name": "Old Writer", "_v": 1, "n": 10_000}


@pytest.fixture
def kit(mongo_uri: str, db: Database[dict[str, Any]], migrations: Path) -> Iterator[Migronaut]:
    with make_kit(mongo_uri, db, migrations, lock_ttl_seconds=4) as kit:
        yield kit


def _state(db: Database[dict[str, Any]]) -> dict[str, Any]:
    state = db.migronaut_background.find_one({"_id": SPLIT_NAME})
    assert state is not None
    return state


def test_the_validator_warns_through_the_soak_then_refuses_the_old_shape(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 300)
    write_background(migrations, batch_size=100, extra=VERSION)
    kit.runs.up()

    answer = step(kit, SPLIT_NAME)
    assert (answer.next, answer.reason, answer.status) == ("wait", "validator-soak", "running")
    assert validation(db, "users") == {
        "validator": {"_v": 2},
        "validationLevel": "strict",
        "validationAction": "warn",
    }
    view = kit.background.status(SPLIT_NAME)
    assert view is not None and view.phase == "finalize" and view.validator is not None
    assert (view.validator.phase, view.validator.clean_passes) == ("warn", 0)
    assert view.validator.since is not None and view.validator.until is not None

    assert step(kit, SPLIT_NAME).reason == "validator-soak"  # one clean check of two
    assert _state(db)["validator"]["clean_passes"] == 1
    answer = step(kit, SPLIT_NAME)
    assert (answer.next, answer.status) == ("done", "completed")
    assert validation(db, "users")["validationAction"] == "error"
    with pytest.raises(WriteError) as refused:
        db.users.insert_one(dict(OLD_SHAPE))
    assert refused.value.code == 121  # DocumentValidationFailure
    db.users.insert_one({**OLD_SHAPE, "_v": 2})  # the new shape is welcome
    shown = kit_json.status(kit, SPLIT_NAME)
    assert shown["status"] == "completed"
    assert shown["validator"]["phase"] == "error" and "enforced_at" in shown["validator"]
    assert "previous" not in shown["validator"]


def test_an_old_shape_write_during_the_soak_is_counted_healed_and_the_soak_starts_over(
    kit: Migronaut,
    db: Database[dict[str, Any]],
    migrations: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed_users(db, 200)
    write_background(migrations, batch_size=100, extra=VERSION)
    kit.runs.up()
    assert step(kit, SPLIT_NAME).reason == "validator-soak"
    assert step(kit, SPLIT_NAME).reason == "validator-soak"
    first_since = _state(db)["validator"]["since"]

    db.users.insert_one(dict(OLD_SHAPE))  # accepted with a warning: the soak is on
    db.users.insert_one({**OLD_SHAPE, "_id": 10_001})
    answer = kit.background.coordinate(SPLIT_NAME)
    assert answer.next == "process"  # a healing pass, not the enforcing step
    view = kit.background.status(SPLIT_NAME)
    assert view is not None and view.validator is not None
    assert (view.validator.phase, view.validator.old_shape, view.validator.old_shape_seen) == (
        "warn",
        2,
        2,
    )
    assert validation(db, "users")["validationAction"] == "warn"
    capsys.readouterr()
    print_views([view.to_dict()])
    row = capsys.readouterr().out.splitlines()[1]
    assert row.endswith("validator: warn, 0 clean check(s), 2 old-shape document(s) seen")

    answer = step(kit, SPLIT_NAME)  # the pass heals them; the soak starts over
    assert answer.reason == "validator-soak"
    state = _state(db)
    assert state["validator"]["clean_passes"] == 0 and state["validator"]["since"] > first_since
    assert db.users.count_documents({"_v": 1}) == 0
    assert step(kit, SPLIT_NAME).reason == "validator-soak"
    assert step(kit, SPLIT_NAME).status == "completed"
    assert validation(db, "users")["validationAction"] == "error"
    assert _state(db)["validator"]["old_shape_seen"] == 2


def test_down_restores_the_previous_validator_exactly_before_the_revert_runs(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    previous = {
        "validator": {"n": {"$type": "int"}},
        "validationLevel": "moderate",
        "validationAction": "warn",
    }
    db.create_collection("users", **previous)
    seed_users(db, 150)
    write_background(migrations, batch_size=100, extra='"validator": "version",')
    kit.runs.up()
    assert kit_json.run(kit, SPLIT_NAME)["status"] == "completed"
    assert validation(db, "users")["validator"] == {"_v": 2}

    kit.runs.down()
    assert validation(db, "users") == previous
    assert "validator" not in _state(db)
    assert kit_json.run(kit, SPLIT_NAME)["status"] == "completed"  # the revert
    assert db.users.count_documents({"_v": 1, "name": {"$exists": True}}) == 150


def test_down_removes_the_validator_of_a_collection_that_had_none(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 50)
    write_background(migrations, extra='"validator": "version",')
    kit.runs.up()
    assert kit_json.run(kit, SPLIT_NAME)["status"] == "completed"
    kit.runs.down()
    assert validation(db, "users").get("validator") in (None, {})
    db.users.insert_one(dict(OLD_SHAPE))  # no validator: the old shape is accepted


def test_a_json_schema_validator_is_set_as_given(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 50)
    schema = {"bsonType": "object", "required": ["first", "last"]}
    write_background(migrations, extra=f'"validator": {{"json_schema": {schema!r}}},')
    kit.runs.up()
    assert kit_json.run(kit, SPLIT_NAME)["status"] == "completed"
    assert validation(db, "users")["validator"] == {"$jsonSchema": schema}
    with pytest.raises(WriteError):
        db.users.insert_one({"_id": "x", "name": "A B", "_v": 2})


def test_the_version_validator_leaves_documents_outside_the_filter_alone(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 60)
    db.users.update_many({"n": {"$lt": 20}}, {"$set": {"tier": "gold"}})
    extra = '"filter": {"tier": "gold"}, "validator": "version",'
    write_background(migrations, extra=extra)
    kit.runs.up()
    assert kit_json.run(kit, SPLIT_NAME)["status"] == "completed"
    assert db.users.count_documents({"_v": 1}) == 40
    db.users.insert_one(dict(OLD_SHAPE))  # outside the filter
    with pytest.raises(WriteError):
        db.users.insert_one({**OLD_SHAPE, "_id": 10_001, "tier": "gold"})


def test_the_soak_lasts_its_seconds_after_its_clean_checks(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 30)
    write_background(migrations, extra='"validator": "version", "validator_soak": {"seconds": 2},')
    kit.runs.up()
    assert step(kit, SPLIT_NAME).reason == "validator-soak"
    answer = step(kit, SPLIT_NAME)  # clean, but the soak's time is not up
    assert (answer.reason, answer.status) == ("validator-soak", "running")
    assert 0 < answer.retry_after_ms <= 2_000
    assert validation(db, "users")["validationAction"] == "warn"
    until = _state(db)["validator"]["until"]
    time.sleep(2.1)
    assert step(kit, SPLIT_NAME).status == "completed"
    assert _state(db)["validator"]["enforced_at"] >= until


def test_a_soak_paused_and_resumed_goes_on_where_it_was(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 30)
    write_background(migrations, extra=VERSION)
    kit.runs.up()
    assert step(kit, SPLIT_NAME).reason == "validator-soak"
    assert step(kit, SPLIT_NAME).reason == "validator-soak"
    kit.background.control(SPLIT_NAME, "pause")
    assert (step(kit, SPLIT_NAME).next, _state(db)["validator"]["clean_passes"]) == ("done", 1)
    kit.background.control(SPLIT_NAME, "resume")
    assert _state(db)["status"] == "pending"
    answer = step(kit, SPLIT_NAME)
    assert (answer.next, answer.status) == ("done", "completed")  # the second clean check
    assert validation(db, "users")["validationAction"] == "error"


def test_down_during_the_soak_waits_for_the_step_in_progress_and_no_step_sets_it_again(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 30)
    write_background(migrations, extra=VERSION)
    kit.runs.up()
    assert step(kit, SPLIT_NAME).reason == "validator-soak"
    held = kit._runtime.lock_for(SPLIT_NAME)  # a coordinator step in progress
    held.acquire()
    released: list[datetime] = []

    def release() -> None:
        released.append(datetime.now(UTC).replace(microsecond=0))
        held.release()

    releaser = threading.Timer(1.0, release)
    releaser.start()
    try:
        kit.runs.down()
    finally:
        releaser.join()
    assert validation(db, "users").get("validator") in (None, {})
    state = _state(db)
    assert (state["direction"], "validator" in state) == ("revert", False)
    assert state["registered_at"].replace(tzinfo=UTC) >= released[0]  # after the step let go
    assert kit_json.run(kit, SPLIT_NAME)["status"] == "completed"  # the revert
    assert validation(db, "users").get("validator") in (None, {})
    assert db.users.count_documents({"_v": 1, "name": {"$exists": True}}) == 30


def test_cancel_during_the_soak_restores_the_previous_validation_and_a_retry_soaks_again(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    previous = {"validator": {"n": {"$type": "int"}}, "validationAction": "warn"}
    db.create_collection("users", **previous)
    seed_users(db, 30)
    write_background(migrations, extra=VERSION)
    kit.runs.up()
    assert step(kit, SPLIT_NAME).reason == "validator-soak"
    assert validation(db, "users")["validator"] == {"_v": 2}

    kit.background.control(SPLIT_NAME, "cancel")
    assert validation(db, "users") == {**previous, "validationLevel": "strict"}
    assert (_state(db)["status"], "validator" in _state(db)) == ("cancelled", False)
    db.users.insert_one(dict(OLD_SHAPE))  # cancelled: nothing refuses or warns on it

    kit.background.control(SPLIT_NAME, "retry")
    assert step(kit, SPLIT_NAME).reason == "validator-soak"  # healed the write, soaking again
    assert validation(db, "users")["validationAction"] == "warn"
    assert Validation.decode(_state(db)["validator"]["previous"]).validator == previous["validator"]
    assert step(kit, SPLIT_NAME).reason == "validator-soak"
    assert step(kit, SPLIT_NAME).status == "completed"
    assert validation(db, "users")["validationAction"] == "error"


def test_a_soak_step_whose_lock_was_taken_over_sets_nothing(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 30)
    write_background(migrations, extra='"validator": "version", "validator_soak": {"passes": 1},')
    kit.runs.up()
    assert step(kit, SPLIT_NAME).reason == "validator-soak"
    rt = kit._runtime
    lapsed = rt.lock_for(SPLIT_NAME)  # a coordinator that stalled past its TTL mid-step
    lapsed.acquire()
    taker = rt.lock_for(SPLIT_NAME)
    taker.force_release()
    taker.acquire()
    try:
        with pytest.raises(LockLostError):
            soak(rt, rt.load(SPLIT_NAME).spec, _state(db), lapsed.assert_held)
    finally:
        taker.release()
    assert validation(db, "users")["validationAction"] == "warn"  # not enforced by it
    assert _state(db)["validator"]["phase"] == "warn"
    assert step(kit, SPLIT_NAME).status == "completed"  # the lock's holder enforces it
    assert validation(db, "users")["validationAction"] == "error"
