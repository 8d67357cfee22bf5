"""The budget's settings and answers: config and spec checks, a grant's wait, the brake
as a hold, and a target without a budget taking nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.spec import read_stored, resolve_spec
from migronaut_core.background.store import BrakeDocument, Grant
from migronaut_core.background.throttle import BRAKE_SIGNAL, TargetBudget, Throttle
from migronaut_core.background.throttle.budget import brake_ended
from migronaut_core.config import load_config
from migronaut_core.errors import ConfigInvalidError
from tests.support.spec import NAME, module, refused, resolve


def test_the_budget_is_off_by_default_and_range_checked(tmp_path: Path) -> None:
    assert load_config(cwd=tmp_path, env={}).background_budget is None
    assert load_config({"background_budget": 500}, cwd=tmp_path, env={}).background_budget == 500
    for bad in (0, -5, 10_000_001):
        with pytest.raises(ConfigInvalidError) as raised:
            load_config({"background_budget": bad}, cwd=tmp_path, env={})
        assert raised.value.code == "CONFIG_INVALID"
        assert raised.value.context["key"] == "background_budget"
    with pytest.raises(ConfigInvalidError):
        load_config({"background_budget": "fast"}, cwd=tmp_path, env={})


def test_priority_defaults_to_one_and_is_range_checked() -> None:
    spec, _ = resolve_spec(NAME, module())
    assert spec.priority == 1
    assert resolve(priority=7).priority == 7
    for bad in (0, 1_001, 2.5, "high", True):
        refused(lambda bad=bad: resolve(priority=bad), "priority")


def test_a_stored_spec_without_priority_reads_as_one() -> None:
    stored = resolve(priority=3).to_document()
    assert read_stored(stored).priority == 3
    del stored["priority"]
    assert read_stored(stored).priority == 1


def test_a_grant_waits_off_its_debt_at_its_share() -> None:
    assert Grant(-50.0, 100.0, None).wait_s == pytest.approx(0.5)
    assert Grant(10.0, 100.0, None).wait_s == 0
    assert Grant(-1.0, 0.0, None).wait_s == 0


class _Budget:
    """A budget document whose brake the test sets; counts the takes."""

    def __init__(self, brake: BrakeDocument | None = None) -> None:
        self.stored_brake = brake
        self.takes = 0

    def brake(self) -> BrakeDocument | None:
        return self.stored_brake

    def take(self, *args: Any) -> Grant:
        self.takes += 1
        return Grant(0.0, 1.0, self.stored_brake)


def test_without_a_budget_nothing_is_taken_but_the_brake_holds() -> None:
    store = _Budget({"reason": "incident", "at": datetime.now(UTC)})
    budget = TargetBudget(store, None)
    assert budget.take("m", 1, 100, CancelToken()) is False
    assert store.takes == 0
    breach = budget.brake_breach()
    assert breach is not None and breach.signal == BRAKE_SIGNAL
    assert breach.to_dict()["level"] == "hard"


def test_a_cancelled_wait_stops_the_lane() -> None:
    class Indebted(_Budget):
        def take(self, *args: Any) -> Grant:
            return Grant(-1_000.0, 1.0, None)

    cancel = CancelToken()
    cancel.cancel()
    assert TargetBudget(Indebted(), 10).take("m", 1, 5, cancel) is True


def test_a_brake_ends_at_its_until() -> None:
    now = datetime.now(UTC)
    assert brake_ended({"reason": "r", "at": now, "until": now}, now)
    assert brake_ended({"reason": "r", "until": now.replace(tzinfo=None)}, now)
    assert not brake_ended({"reason": "r", "at": now, "until": None}, now)
    assert not brake_ended({"reason": "r", "until": now + timedelta(seconds=1)}, now)


class _Recording(_Budget):
    def __init__(self, brake: BrakeDocument | None = None) -> None:
        super().__init__(brake)
        self.asked: list[tuple[Any, ...]] = []

    def take(self, *args: Any) -> Grant:
        self.asked.append(args)
        return Grant(0.0, 1.0, self.stored_brake)


def test_a_lane_takes_its_next_batch_weighted_by_priority_before_writing() -> None:
    store = _Recording()
    throttle = Throttle(migration="m", batch_size=40, budget=TargetBudget(store, 100), priority=3)
    assert throttle.before_batch(CancelToken()) is False
    assert store.asked == [("m", 3, 40, 100)]
    assert throttle.hard_breach() is None


def test_the_brake_holds_a_lane_before_any_health_reading() -> None:
    store = _Recording({"reason": "incident", "at": datetime.now(UTC)})
    throttle = Throttle(migration="m", batch_size=40, budget=TargetBudget(store, 100))
    breach = throttle.hard_breach()
    assert breach is not None and breach.signal == BRAKE_SIGNAL
    assert throttle.held_by == breach
