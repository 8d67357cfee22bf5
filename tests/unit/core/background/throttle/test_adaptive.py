"""The adaptive (AIMD) controller: batch sizes and pauses learned from each batch."""

from __future__ import annotations

import json
import threading
from typing import Any

import bson
import pytest

from migronaut_core.background.throttle import (
    AdaptiveController,
    ThrottleChange,
)
from tests.support.throttle import SETTINGS, Clock, controller


def feed(
    adaptive: AdaptiveController, clock: Clock, latency_ms: float, overloaded: bool = False
) -> ThrottleChange | None:
    """Record one batch a second after the previous one."""
    clock.advance(1.0)
    return adaptive.record(latency_ms, overloaded)


# ─── AIMD ─────────────────────────────────────────────────────────────────────


def test_starts_at_max_or_clamped_start_size() -> None:
    assert controller().batch_size() == 400
    assert controller(start_batch_size=120).batch_size() == 120
    assert controller(start_batch_size=5).batch_size() == 50
    assert controller(start_batch_size=9_999).batch_size() == 400
    assert controller().pause_ms() == 0


def test_first_batch_warms_up_unless_overloaded() -> None:
    clock = Clock()
    adaptive = controller(clock=clock)
    assert feed(adaptive, clock, 5_000) is None
    assert adaptive.batch_size() == 400
    other = controller(clock=clock)
    assert feed(other, clock, 1, overloaded=True) == ThrottleChange("overload", 200, 0)


def test_shrinks_multiplicatively_on_latency_and_overload_down_to_the_floor() -> None:
    clock = Clock()
    adaptive = controller({"batch_size": 400, "pause_ms": 0}, clock=clock)
    assert feed(adaptive, clock, 150) == ThrottleChange("latency", 200, 0)
    assert feed(adaptive, clock, 10, overloaded=True) == ThrottleChange("overload", 100, 0)
    assert feed(adaptive, clock, 500) == ThrottleChange("latency", 50, 0)
    assert adaptive.batch_size() == 50


def test_pause_grows_at_the_floor_up_to_max_pause() -> None:
    clock = Clock()
    adaptive = controller({"batch_size": 50}, clock=clock)
    pauses = []
    for _ in range(6):
        feed(adaptive, clock, 500)
        pauses.append(adaptive.pause_ms())
    assert pauses == [100, 200, 400, 800, 1_000, 1_000]
    assert adaptive.batch_size() == 50
    assert feed(adaptive, clock, 500) is None  # nothing left to change


def test_recovers_pause_first_then_size_additively_up_to_the_cap() -> None:
    clock = Clock()
    adaptive = controller({"batch_size": 50, "pause_ms": 400}, clock=clock)
    seen = [feed(adaptive, clock, 5) for _ in range(12)]
    pauses_then_sizes = [(change.pause_ms, change.batch_size) for change in seen if change]
    assert pauses_then_sizes[:6] == [(200, 50), (100, 50), (50, 50), (25, 50), (12, 50), (0, 50)]
    assert [size for _, size in pauses_then_sizes[6:]] == [100, 150, 200, 250, 300, 350]
    assert all(change.reason == "recovered" for change in seen if change)
    feed(adaptive, clock, 5)
    assert adaptive.batch_size() == 400
    assert feed(adaptive, clock, 5) is None  # at the cap: nothing to report


def test_grows_back_after_shrinking() -> None:
    clock = Clock()
    adaptive = controller({"batch_size": 400}, clock=clock)
    for _ in range(3):
        feed(adaptive, clock, 1_000)
    assert adaptive.batch_size() == 50
    for _ in range(7):
        feed(adaptive, clock, 1)
    assert adaptive.batch_size() == 400


def test_concurrent_lanes_decrease_once_per_round_trip() -> None:
    clock = Clock()
    adaptive = controller({"batch_size": 400}, clock=clock)
    clock.advance(1)
    assert adaptive.record(300, overloaded=True) is not None
    clock.advance(0.1)  # a second lane's batch, slow over the same moment
    assert adaptive.record(300, overloaded=True) is None
    assert adaptive.batch_size() == 200
    clock.advance(0.5)
    adaptive.record(300)
    assert adaptive.batch_size() == 100


def test_reports_are_rate_limited_and_keep_the_most_severe_reason() -> None:
    clock = Clock()
    adaptive = AdaptiveController(SETTINGS, {"batch_size": 200}, report_interval_s=10, clock=clock)
    assert feed(adaptive, clock, 500) == ThrottleChange("latency", 100, 0)
    assert feed(adaptive, clock, 1, overloaded=True) is None
    assert feed(adaptive, clock, 1) is None
    clock.advance(10)
    change = feed(adaptive, clock, 1)
    assert change == ThrottleChange("overload", 150, 0)
    assert change.to_dict() == {"reason": "overload", "batch_size": 150, "pause_ms": 0}


def test_state_round_trip_is_bson_and_json_safe() -> None:
    clock = Clock()
    adaptive = controller({"batch_size": 50}, clock=clock)
    feed(adaptive, clock, 500)
    state = adaptive.state()
    assert state == {"batch_size": 50, "pause_ms": 100}
    stored = bson.decode(bson.encode({"throttle": state}))["throttle"]
    assert json.loads(json.dumps(stored)) == state
    again = controller(stored)
    assert (again.batch_size(), again.pause_ms()) == (50, 100)


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ({"batch_size": 10_000, "pause_ms": 99_999}, (400, 1_000)),
        ({"batch_size": -3, "pause_ms": -1}, (50, 0)),
        ({"batch_size": "many", "pause_ms": None}, (400, 0)),
        ({"batch_size": True, "pause_ms": float("nan")}, (400, 0)),
        ({}, (400, 0)),
    ],
)
def test_state_out_of_range_is_clamped_or_ignored(
    state: dict[str, Any], expected: tuple[int, int]
) -> None:
    adaptive = controller(state)
    assert (adaptive.batch_size(), adaptive.pause_ms()) == expected


def test_record_is_thread_safe() -> None:
    adaptive = AdaptiveController(SETTINGS, {"batch_size": 50}, report_interval_s=0)

    def healthy() -> None:
        for _ in range(200):
            adaptive.record(1)

    threads = [threading.Thread(target=healthy) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert adaptive.batch_size() == 400
    assert adaptive.pause_ms() == 0
