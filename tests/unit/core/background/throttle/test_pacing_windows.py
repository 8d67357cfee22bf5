"""A lane's throttle inside and outside maintenance windows: the hold, the rate's pacing."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.throttle import Throttle, pacing
from migronaut_core.windows import parse_windows

INSIDE = datetime(2026, 6, 1, 2, 0, tzinfo=UTC)
OUTSIDE = datetime(2026, 6, 1, 6, 0, tzinfo=UTC)


class Sleeps(CancelToken):
    """A cancel token that records each wait instead of sleeping."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def sleep(self, seconds: float) -> bool:
        self.waits.append(seconds)
        return False


class Monotonic:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def throttle_for(rate: float | str, now: datetime, **fields: Any) -> Throttle:
    windows = parse_windows([{"from": "01:00", "to": "05:00", "rate": rate}])
    throttle = Throttle("m", windows=windows, wall_clock=lambda: now, **fields)
    throttle.window_hold()
    return throttle


def test_outside_every_window_the_throttle_says_when_the_next_opens() -> None:
    throttle = throttle_for(1.0, OUTSIDE, batch_size=100)
    closed = throttle.window_hold()
    assert closed is not None
    assert closed.opens_at == datetime(2026, 6, 2, 1, 0, tzinfo=UTC)
    assert throttle_for(1.0, INSIDE).window_hold() is None
    assert Throttle("m").window_hold() is None  # no windows: always open


def test_a_fraction_waits_for_its_share_of_the_previous_batchs_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Monotonic()
    monkeypatch.setattr(pacing, "monotonic", clock)
    throttle = throttle_for(0.25, INSIDE, batch_size=100)
    token = Sleeps()
    assert throttle.before_batch(token) is False
    assert token.waits == []  # nothing worked yet
    clock.now += 2.0  # the batch took 2 s
    throttle.before_batch(token)
    assert token.waits == [pytest.approx(6.0)]  # working a quarter of the time
    assert throttle.next_batch_size() == 100


def test_documents_per_second_cap_the_batch_and_wait_out_the_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Monotonic()
    monkeypatch.setattr(pacing, "monotonic", clock)
    throttle = throttle_for("200/s", INSIDE, batch_size=500, lanes=4)
    token = Sleeps()
    assert throttle.next_batch_size() == 50  # 200 docs/s over 4 lanes
    throttle.before_batch(token)
    clock.now += 0.2
    throttle.before_batch(token)
    assert token.waits == [pytest.approx(0.8)]
    clock.now += 3.0  # a slow batch: no wait at all
    throttle.before_batch(token)
    assert len(token.waits) == 1


def test_a_rate_below_one_document_per_lane_still_moves_one_at_a_time() -> None:
    throttle = throttle_for("2/s", INSIDE, batch_size=500, lanes=8)
    assert throttle.next_batch_size() == 1


def test_full_speed_windows_never_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Monotonic()
    monkeypatch.setattr(pacing, "monotonic", clock)
    throttle = throttle_for(1.0, INSIDE, batch_size=100)
    token = Sleeps()
    throttle.before_batch(token)
    clock.now += 5.0
    throttle.before_batch(token)
    assert token.waits == []
