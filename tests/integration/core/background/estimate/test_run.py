"""``kit.background.estimate`` on a real server: what a pass would take, under windows and
the budget, with nothing written."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core import MigrationEstimate, Migronaut
from migronaut_core.background.eta import OPLOG_ENTRY_BYTES, WRITE_FACTOR
from migronaut_core.errors import ConfigInvalidError, TransactionsUnsupportedError
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background

OTHER_NAME = "20240102000000_tag_orders"
#: A second migration on another collection, weighing 3 in the budget.
TAG_ORDERS = """
background = {"collection": "orders", "from": 1, "to": 2, "priority": 3, "batch_size": 10}


def migrate(doc, ctx):
    doc["tagged"] = True
    return doc
"""
#: A Monday at noon UTC; NIGHTLY opens at 22:00.
NOON = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NIGHTLY = '"windows": [{"from": "22:00", "to": "06:00"}],'


def users_hash(db: Database[dict[str, Any]]) -> str:
    return str(db.command("dbHash", collections=["users"])["collections"]["users"])


def assert_consistent(estimate: MigrationEstimate) -> None:
    """What every estimate keeps: a range around its expected time, totals from the sample."""
    eta = estimate.eta
    assert eta.seconds is not None and eta.low_seconds is not None
    assert eta.high_seconds is not None
    assert 0 <= eta.low_seconds <= eta.seconds <= eta.high_seconds
    assert estimate.docs_per_s > 0
    assert estimate.costs.write_ms > 0
    assert estimate.documents is not None
    assert estimate.oplog_bytes == round(estimate.documents * estimate.costs.oplog_bytes)


def test_an_unregistered_migration_is_estimated_and_nothing_is_written(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 300)
    write_background(migrations, max_parallel=2)
    before = users_hash(db)

    estimate = kit.background.estimate(SPLIT_NAME, sample=100)

    assert users_hash(db) == before
    assert "migronaut_background" not in db.list_collection_names()
    assert (estimate.documents, estimate.at_least) == (300, False)
    assert estimate.collection == "users" and estimate.mode == "declarative"
    assert estimate.lanes == 2  # the spec's max_parallel
    assert estimate.costs.documents == 100 and estimate.costs.failed == 0
    assert estimate.costs.transform_ms > 0
    # name -> first and last: the rewritten document is larger by the stamps and a key.
    assert estimate.costs.after_bytes > estimate.costs.before_bytes
    assert estimate.costs.oplog_bytes > OPLOG_ENTRY_BYTES
    assert_consistent(estimate)
    assert estimate.windows is None and estimate.budget is None
    assert estimate.finishes_at is not None
    data = estimate.to_dict()
    json.dumps(data)
    assert "First1" not in json.dumps(data) and "windows" not in data
    assert set(data["eta"]) == {"low_seconds", "seconds", "high_seconds"}


def test_only_the_documents_left_are_counted_and_more_lanes_go_faster(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 200)
    db.users.update_many({"_id": {"$lt": 50}}, {"$set": {"_v": 2}})
    write_background(migrations)
    kit.runs.up()

    one = kit.background.estimate(SPLIT_NAME, sample=50, lanes=1)
    two = kit.background.estimate(SPLIT_NAME, sample=50, lanes=2)

    assert one.documents == two.documents == 150
    assert one.lanes == 1 and two.lanes == 2
    per_doc_one = one.costs.transform_ms + WRITE_FACTOR * one.costs.write_ms
    assert one.docs_per_s == pytest.approx(1000 / per_doc_one, rel=0.01)
    # Per lane and cost, two lanes count for more than one (the machine has 2+ cores).
    assert (
        two.docs_per_s / (1000 / (two.costs.transform_ms + WRITE_FACTOR * two.costs.write_ms)) > 1.0
    )


def test_the_budget_caps_the_rate_at_the_weighted_share_of_the_running_migrations(
    mongo_uri: str, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 100)
    db.orders.insert_many([{"_id": i, "_v": 1} for i in range(50)])
    write_background(migrations)
    (migrations / f"{OTHER_NAME}.py").write_text(TAG_ORDERS)
    with make_kit(mongo_uri, db, migrations, background_budget=40) as kit:
        kit.runs.up()
        alone = kit.background.estimate(SPLIT_NAME, sample=20)
        assert alone.budget is not None
        assert (alone.budget.share, alone.budget.others) == (40, ())
        assert alone.eta.seconds == pytest.approx(100 / 40, rel=0.01)

        assert kit.background.coordinate(OTHER_NAME).next == "process"  # now running
        shared = kit.background.estimate(SPLIT_NAME, sample=20)

    assert shared.budget is not None
    assert shared.budget.others == (3,) and shared.budget.share == 10
    assert shared.eta.seconds == pytest.approx(100 / 10, rel=0.01)
    # The budget binds: the range narrows to it.
    assert shared.eta.low_seconds == shared.eta.high_seconds == shared.eta.seconds


def test_closed_windows_count_as_time_that_does_no_work(
    mongo_uri: str, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 100)
    write_background(migrations, extra=NIGHTLY)
    with make_kit(mongo_uri, db, migrations) as kit:
        kit._runtime.wall_clock = lambda: NOON
        estimate = kit.background.estimate(SPLIT_NAME, sample=20)

    assert estimate.windows == "spec"
    assert_consistent(estimate)
    ten_hours = 10 * 3600
    assert estimate.eta.seconds is not None
    assert ten_hours <= estimate.eta.seconds < ten_hours + 60
    assert estimate.finishes_at is not None
    assert estimate.finishes_at - NOON == timedelta(seconds=estimate.eta.seconds)


def test_an_update_pipeline_migration_is_timed_by_its_write(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 120)
    write_background(migrations, update=True)
    before = users_hash(db)

    estimate = kit.background.estimate(SPLIT_NAME, sample=40)

    assert users_hash(db) == before
    assert estimate.mode == "update" and estimate.costs.transform_ms == 0
    assert_consistent(estimate)


def test_bad_options_and_step_migrations_are_refused_before_anything_is_read(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed_users(db, 5)
    write_background(migrations)
    for options in ({"sample": 5}, {"sample": 10_001}, {"lanes": 0}):
        with pytest.raises(ConfigInvalidError) as raised:
            kit.background.estimate(SPLIT_NAME, **options)
        assert raised.value.code == "CONFIG_INVALID"
    write_background(
        migrations,
        body='background = {"mode": "step", "from": 1, "to": 2}\n\n\n'
        "def step(ctx):\n    return {'done': True}\n",
    )
    with pytest.raises(ConfigInvalidError, match="step migration"):
        kit.background.estimate(SPLIT_NAME)


def test_a_standalone_server_is_refused(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed_users(db, 5)
    write_background(migrations)
    monkeypatch.setattr(kit._runtime, "_transactions", False)  # as a standalone answers
    with pytest.raises(TransactionsUnsupportedError):
        kit.background.estimate(SPLIT_NAME)
