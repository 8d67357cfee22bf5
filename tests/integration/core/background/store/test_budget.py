"""The budget bucket's arithmetic on a real mongod: refill by weight on the server's clock,
debt, caps, members dropping out, and the brake's settings and log."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core.background.store import BudgetStore
from migronaut_core.background.store.budget import ACTIVE_MS, BURST_S, TARGET_ID
from migronaut_core.config import BackgroundCollections


@pytest.fixture
def budget(db: Database[dict[str, Any]]) -> BudgetStore:
    return BudgetStore(db, BackgroundCollections.from_prefix("mb"))


def _tokens(budget: BudgetStore, migration: str) -> float:
    return next(float(m["tokens"]) for m in budget.members() if m["m"] == migration)


def test_a_new_member_starts_empty_and_runs_into_debt(budget: BudgetStore) -> None:
    grant = budget.take("a", 1, 50, rate=100)
    assert grant.tokens == pytest.approx(-50, abs=1)
    assert grant.share == pytest.approx(100)
    assert grant.wait_s == pytest.approx(0.5, abs=0.01)
    assert grant.brake is None


def test_refill_follows_the_server_clock_and_is_capped_at_the_burst(
    budget: BudgetStore,
) -> None:
    budget.take("a", 1, 0, rate=100)
    time.sleep(0.3)
    grant = budget.take("a", 1, 10, rate=100)
    # 0.3 s of 100/s refilled (the server's clock; allow scheduling slack), then 10 taken.
    assert 30 - 10 - 2 <= grant.tokens <= 30 - 10 + 15
    time.sleep(1.5)
    grant = budget.take("a", 1, 0, rate=100)
    assert grant.tokens == pytest.approx(100 * BURST_S)


def test_active_members_share_the_rate_by_weight(budget: BudgetStore) -> None:
    assert budget.take("a", 1, 0, rate=600).share == pytest.approx(600)
    assert budget.take("b", 2, 0, rate=600).share == pytest.approx(400)
    assert budget.take("c", 3, 0, rate=600).share == pytest.approx(300)
    time.sleep(1.2)  # everyone's sub-bucket fills to its cap: its share of one second
    budget.take("a", 1, 0, rate=600)
    caps = {m["m"]: float(m["tokens"]) for m in budget.members()}
    assert caps == pytest.approx({"a": 100.0, "b": 200.0, "c": 300.0})
    assert sum(caps.values()) == pytest.approx(600 * BURST_S)


def test_one_take_refills_everyone_by_their_share_of_the_gap(budget: BudgetStore) -> None:
    budget.take("a", 1, 100, rate=300)
    budget.take("b", 2, 200, rate=300)
    before = {m["m"]: float(m["tokens"]) for m in budget.members()}
    time.sleep(0.4)
    budget.take("a", 1, 0, rate=300)
    after = {m["m"]: float(m["tokens"]) for m in budget.members()}
    gained_a, gained_b = after["a"] - before["a"], after["b"] - before["b"]
    assert gained_b == pytest.approx(2 * gained_a, rel=0.01)
    # Together they gained the rate times the gap: ~0.4 s (the server measured it).
    assert 0.35 * 300 <= gained_a + gained_b <= 0.6 * 300


def test_a_member_that_stops_taking_drops_out(
    budget: BudgetStore, db: Database[dict[str, Any]]
) -> None:
    budget.take("a", 1, 0, rate=100)
    budget.take("b", 1, 0, rate=100)
    stale = datetime.now(UTC) - timedelta(milliseconds=ACTIVE_MS + 1_000)
    budget.collection.update_one(
        {"_id": TARGET_ID, "members.m": "b"}, {"$set": {"members.$.seen": stale}}
    )
    grant = budget.take("a", 1, 0, rate=100)
    assert grant.share == pytest.approx(100)
    assert [m["m"] for m in budget.members()] == ["a"]


def test_a_member_in_debt_stays_active_until_it_has_waited_it_off(
    budget: BudgetStore, db: Database[dict[str, Any]]
) -> None:
    before = datetime.now(UTC)
    budget.take("a", 1, 3_000, rate=100)  # 30 s of its share: longer than ACTIVE_MS
    seen = next(m["seen"] for m in budget.members() if m["m"] == "a").replace(tzinfo=UTC)
    assert timedelta(seconds=29) <= seen - before <= timedelta(seconds=32)
    grant = budget.take("b", 1, 0, rate=100)
    assert grant.share == pytest.approx(50)  # "a" still counts while it waits


def test_the_brake_is_set_once_logged_and_seen_by_a_take(budget: BudgetStore) -> None:
    at = datetime.now(UTC).replace(microsecond=0)
    until = at + timedelta(hours=1)
    assert budget.set_brake({"reason": "incident 42", "at": at, "until": until}) is True
    assert budget.set_brake({"reason": "still", "at": at, "until": None}) is False
    grant = budget.take("a", 1, 1, rate=100)
    assert grant.brake is not None and grant.brake["reason"] == "still"
    assert budget.release_brake({"action": "release", "at": at, "reason": "fixed"}) is True
    assert budget.release_brake({"action": "release", "at": at}) is False
    assert budget.brake() is None
    assert [entry["action"] for entry in budget.brake_log()] == ["brake", "brake", "release"]
    assert budget.brake_log()[0]["reason"] == "incident 42"
