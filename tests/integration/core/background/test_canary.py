"""A canary, then promotion: the subset migrates first, is checked while it soaks, then the
rest follows; a failing check pauses it with the reason."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core import Migronaut
from migronaut_core.background.spec import CanarySettings, canary_subset
from migronaut_core.cli.output import print_views
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.validator import step

FRACTION = 0.2
CANARY = f'"canary": {{"fraction": {FRACTION}, "soak": {{"passes": 2}}}},'
#: The migration as :data:`~tests.support.background.SPLIT_NAMES`, but ``n`` grows by one
#: each time the transform runs: not idempotent.
NOT_IDEMPOTENT = """
background = {"collection": "users", "from": 1, "to": 2, "batch_size": 100,
              "canary": {"fraction": 0.3}}


def migrate(doc, ctx):
    if "name" in doc:
        doc["first"], _, doc["last"] = doc.pop("name").partition(" ")
    doc["n"] = doc["n"] + 1
    return doc
"""
#: A migration whose canary is checked by its own ``check(ctx)``: a flag document must exist.
CHECKED = """
background = {"collection": "users", "from": 1, "to": 2, "batch_size": 100,
              "canary": {"filter": {"n": {"$lt": 50}}}}


def migrate(doc, ctx):
    first, _, last = doc.pop("name").partition(" ")
    doc["first"], doc["last"] = first, last
    return doc


def check(ctx):
    assert ctx.counts == {"old": 0, "new": 50}
    if ctx.db.flags.find_one({"_id": "dashboards-ok"}) is None:
        return False, "the dashboards flag is not set"
    return ctx.db[ctx.collection].count_documents({"$and": [ctx.subset, {"first": None}]}) == 0
"""


@pytest.fixture
def kit(mongo_uri: str, db: Database[dict[str, Any]], migrations: Path) -> Iterator[Migronaut]:
    with make_kit(mongo_uri, db, migrations, lock_ttl_seconds=4) as kit:
        yield kit


def _subset(fraction: float) -> dict[str, Any]:
    return canary_subset(CanarySettings(fraction=fraction))


def _state(db: Database[dict[str, Any]]) -> dict[str, Any]:
    state = db.migronaut_background.find_one({"_id": SPLIT_NAME})
    assert state is not None
    return state


class Application(threading.Thread):
    """The new release of an application, writing new-shape documents and touching old ones
    until it is stopped."""

    def __init__(self, db: Database[dict[str, Any]]) -> None:
        super().__init__(daemon=True)
        self.db = db
        self.stop = threading.Event()
        self.written = 0

    def run(self) -> None:
        next_id = 100_000
        while not self.stop.is_set():
            doc = {"_id": next_id, "first": "New", "last": "Writer", "_v": 2, "n": next_id}
            self.db.users.insert_one(doc)
            self.db.users.update_one({"_id": self.written % 1_000}, {"$inc": {"touched": 1}})
            next_id += 1
            self.written += 1


def test_a_canary_migrates_its_fraction_soaks_then_promotes_while_an_application_writes(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 1_000)
    in_subset = db.users.count_documents(_subset(FRACTION))
    assert 100 < in_subset < 300  # the hash spreads the ids
    write_background(migrations, batch_size=100, extra=CANARY)
    kit.runs.up()
    app = Application(db)
    app.start()
    try:
        answer = step(kit, SPLIT_NAME)
        assert (answer.next, answer.reason, answer.status) == ("wait", "canary-soak", "running")
        # Only the subset is migrated; the rest waits in the old shape.
        assert db.users.count_documents({"$and": [_subset(FRACTION), {"_v": 1}]}) == 0
        outside = {"$nor": [_subset(FRACTION)], "_id": {"$lt": 1_000}}
        assert db.users.count_documents({**outside, "_v": 1}) == 1_000 - in_subset
        view = kit.background.status(SPLIT_NAME)
        assert view is not None and view.canary is not None and view.phase == "canary"
        assert (view.canary.phase, view.canary.subset, view.canary.fraction) == (
            "soaking",
            "fraction",
            FRACTION,
        )
        assert view.canary.counts is not None and view.canary.counts["old"] == 0
        assert view.canary.counts["new"] >= in_subset and view.canary.clean_passes == 1
        # The transform refuses a document in the new shape (no name): never held against it.
        assert view.canary.sample == {"sampled": 20, "changed": 0, "raised": 20}

        answer = step(kit, SPLIT_NAME)  # the second clean check promotes it; the rest runs
        assert (answer.next, answer.status) == ("done", "completed")
    finally:
        app.stop.set()
        app.join(10)
    assert app.written > 0
    assert db.users.count_documents({"_v": 1}) == 0
    assert db.users.count_documents({"_id": {"$lt": 1_000}, "first": {"$regex": "^First"}}) == 1_000
    shown = kit_json.status(kit, SPLIT_NAME)
    assert shown["canary"]["phase"] == "promoted" and shown["totals"]["migrated"] == 1_000
    assert shown["pass"] == 2  # the canary's pass, then the rest's


def test_old_shape_writes_in_the_subset_are_healed_within_the_drift_limit_and_fail_above_it(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 500)
    canary = '"canary": {"fraction": 0.2, "checks": {"max_drift": 0.2}, "soak": {"passes": 2}},'
    write_background(migrations, batch_size=100, extra=canary)
    kit.runs.up()
    assert step(kit, SPLIT_NAME).reason == "canary-soak"
    old_release = [{"_id": 10_000 + i, "name": "Old Writer", "_v": 1, "n": i} for i in range(40)]
    db.users.insert_many(old_release)
    drifted = db.users.count_documents({"$and": [_subset(0.2), {"_v": 1}]})
    assert drifted > 0

    answer = kit.background.coordinate(SPLIT_NAME)
    assert answer.next == "process"  # a healing pass over the subset
    assert _state(db)["canary"]["counts"]["old"] == drifted
    assert step(kit, SPLIT_NAME).reason == "canary-soak"  # healed; the soak starts over
    assert _state(db)["canary"]["clean_passes"] == 1
    assert db.users.count_documents({"$and": [_subset(0.2), {"_v": 1}]}) == 0

    db.users.insert_many([{**doc, "_id": doc["_id"] + 1_000} for doc in old_release * 1])
    db.users.insert_many([{**doc, "_id": doc["_id"] + 2_000} for doc in old_release])
    db.users.insert_many([{**doc, "_id": doc["_id"] + 3_000} for doc in old_release])
    db.users.insert_many(
        [{**doc, "_id": 20_000 + i, "n": i} for i, doc in enumerate(old_release * 10)]
    )
    answer = kit.background.coordinate(SPLIT_NAME)
    assert (answer.next, answer.status, answer.reason) == ("done", "paused", "canary-failed")
    failed = _state(db)["canary"]["failed"]
    assert failed["check"] == "drift" and "above canary.checks.max_drift 20.00%" in failed["reason"]
    assert "Old Writer" not in failed["reason"]


def test_a_transform_that_is_not_idempotent_pauses_the_canary_with_the_reason(
    kit: Migronaut,
    db: Database[dict[str, Any]],
    migrations: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed_users(db, 400)
    write_background(migrations, body=NOT_IDEMPOTENT)
    kit.runs.up()

    answer = step(kit, SPLIT_NAME)
    assert (answer.next, answer.status, answer.reason) == ("done", "paused", "canary-failed")
    view = kit.background.status(SPLIT_NAME)
    assert view is not None and view.canary is not None and view.canary.failed is not None
    assert view.canary.failed["check"] == "idempotence"
    reason = view.canary.failed["reason"]
    assert "change when the transform runs again (fields: n)" in reason
    capsys.readouterr()
    print_views([view.to_dict()])
    assert (
        capsys.readouterr()
        .out.splitlines()[1]
        .endswith(f"canary: check idempotence failed: {reason}")
    )
    last = kit.background.history(SPLIT_NAME)[-1]
    assert (last.action, last.status_to, last.by) == ("pause", "paused", "migronaut")
    assert last.reason == f"canary check idempotence failed: {reason}"
    # Nothing outside the subset was touched; the re-run wrote nothing.
    assert db.users.count_documents({"$nor": [_subset(0.3)], "_v": 1}) == db.users.count_documents(
        {"$nor": [_subset(0.3)]}
    )
    migrated = db.users.find_one({"$and": [_subset(0.3), {"_v": 2}]})
    assert migrated is not None and migrated["n"] == migrated["_id"] + 1


def test_a_failing_user_check_pauses_it_and_resume_checks_again_then_promotes(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 300)
    write_background(migrations, body=CHECKED)
    kit.runs.up()

    answer = step(kit, SPLIT_NAME)
    assert (answer.status, answer.reason) == ("paused", "canary-failed")
    failed = _state(db)["canary"]["failed"]
    assert (failed["check"], failed["reason"]) == ("check", "the dashboards flag is not set")
    assert db.users.count_documents({"_v": 2}) == 50

    db.flags.insert_one({"_id": "dashboards-ok"})
    assert kit.background.control(SPLIT_NAME, "resume").status == "pending"
    answer = step(kit, SPLIT_NAME)
    assert (answer.next, answer.status) == ("done", "completed")
    assert db.users.count_documents({"_v": 2}) == 300
    assert _state(db)["canary"]["failed"] is None


def test_a_canary_over_no_document_while_others_wait_fails_its_counts_check(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 100)
    write_background(migrations, extra='"canary": {"filter": {"n": {"$gt": 1000}}},')
    kit.runs.up()
    answer = step(kit, SPLIT_NAME)
    assert (answer.status, answer.reason) == ("paused", "canary-failed")
    assert _state(db)["canary"]["failed"]["check"] == "counts"
    assert db.users.count_documents({"_v": 1}) == 100
