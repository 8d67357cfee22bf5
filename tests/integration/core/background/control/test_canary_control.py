"""A canary's approve and reject: through the kit, recorded in the history, refused where they
do not fit (before anything is written)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core import (
    BackgroundConflictError,
    ConfigInvalidError,
    ControlResult,
    Migronaut,
)
from tests.support.background import SPLIT_NAME, seed_users, write_background
from tests.support.validator import step

APPROVAL = '"canary": {"filter": {"n": {"$lt": 40}}, "approval": True},'


def _state(db: Database[dict[str, Any]]) -> dict[str, Any]:
    state = db.migronaut_background.find_one({"_id": SPLIT_NAME})
    assert state is not None
    return state


def test_an_approved_canary_is_promoted_and_a_rejected_one_paused_with_the_reason(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 200)
    write_background(migrations, batch_size=50, extra=APPROVAL)
    kit.runs.up()
    with pytest.raises(BackgroundConflictError) as early:
        kit.background.control(SPLIT_NAME, "approve")  # its subset is not even migrated
    assert early.value.context["canary"] == "migrating"

    answer = step(kit, SPLIT_NAME)
    assert (answer.next, answer.reason, answer.status) == ("wait", "canary-approval", "running")
    assert step(kit, SPLIT_NAME).reason == "canary-approval"  # it waits, checked no more
    view = kit.background.status(SPLIT_NAME)
    assert view is not None and view.canary is not None
    assert (view.canary.phase, view.canary.subset, view.canary.approval) == (
        "awaiting_approval",
        "filter",
        True,
    )
    assert db.users.count_documents({"_v": 2}) == 40

    before = _state(db)
    with pytest.raises(ConfigInvalidError) as reasonless:
        kit.background.control(SPLIT_NAME, "reject")
    assert reasonless.value.context["key"] == "reason"
    assert _state(db)["history"] == before["history"]  # nothing was written

    rejected = kit.background.control(
        SPLIT_NAME, "reject", requested_by="ana", reason="p99 latency doubled"
    )
    assert rejected == ControlResult("changed", "paused")
    state = _state(db)
    assert state["canary"]["phase"] == "soaking"
    assert state["canary"]["rejected"]["requested_by"] == "ana"
    last = state["history"][-1]
    assert (last["action"], last["to"], last["by"], last["reason"]) == (
        "reject",
        "paused",
        "ana",
        "p99 latency doubled",
    )
    assert step(kit, SPLIT_NAME).status == "paused"  # nothing moves while it is paused

    kit.background.control(SPLIT_NAME, "resume")
    assert step(kit, SPLIT_NAME).reason == "canary-approval"  # soaked again, awaiting again
    assert _state(db)["canary"]["rejected"] is None

    approved = kit.background.control(SPLIT_NAME, "approve", requested_by="bo", reason="ok")
    assert approved == ControlResult("changed", "running", may_run=True)
    assert kit.background.control(SPLIT_NAME, "approve").applied == "unchanged"
    assert _state(db)["canary"]["approved"]["requested_by"] == "bo"
    answer = step(kit, SPLIT_NAME)
    assert (answer.next, answer.status) == ("done", "completed")
    assert db.users.count_documents({"_v": 2}) == 200
    actions = [entry["action"] for entry in _state(db)["history"]]
    assert actions[-2:] == ["approve", "complete"]
    with pytest.raises(BackgroundConflictError):
        kit.background.control(SPLIT_NAME, "reject", reason="too late")


def test_approve_and_reject_refuse_a_migration_without_a_canary(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 10)
    write_background(migrations)
    kit.runs.up()
    for action in ("approve", "reject"):
        with pytest.raises(BackgroundConflictError) as refused:
            kit.background.control(SPLIT_NAME, action, reason="why")
        assert "it has no canary" in refused.value.message
        assert refused.value.context["canary"] is None


#: A check during which an operator pauses the migration (written as a control's move is).
PAUSED_DURING_CHECKS = """
background = {"collection": "users", "from": 1, "to": 2, "canary": {"fraction": 0.5}}


def migrate(doc, ctx):
    doc["first"], _, doc["last"] = doc.pop("name").partition(" ")
    return doc


def check(ctx):
    ctx.db.migronaut_background.update_one({"_id": ctx.migration}, {"$set": {"status": "paused"}})
    return True
"""


def test_a_pause_during_the_checks_wins_over_the_promotion(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 100)
    write_background(migrations, body=PAUSED_DURING_CHECKS)
    kit.runs.up()
    answer = step(kit, SPLIT_NAME)
    assert (answer.next, answer.status, answer.reason) == ("done", "paused", None)
    state = _state(db)
    assert state["canary"]["phase"] == "soaking" and state["phase"] == "canary"
    assert db.users.count_documents({"_v": 1}) > 0  # the rest was not started
