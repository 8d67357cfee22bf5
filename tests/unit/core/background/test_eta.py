"""The ETA model: windows' closed time, a window's rate, the budget's share, the range."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pendulum
import pytest

from migronaut_core.background.eta import (
    LANE_GAIN,
    RATE_SPREAD,
    budget_share,
    duration_range,
    lane_speedup,
    live_range,
    relative_error,
)
from migronaut_core.windows import open_seconds, parse_windows, seconds_to_work

#: A Monday, 12:00 UTC.
NOON = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NIGHTS = parse_windows([{"from": "22:00", "to": "06:00"}])


def test_without_windows_the_work_takes_documents_over_rate() -> None:
    assert seconds_to_work((), NOON, 10_000, lambda _: 100.0) == pytest.approx(100.0)


def test_closed_time_does_no_work() -> None:
    # Opens at 22:00 (10 h away); 8 h open a night at 1 doc/s: 10 h of work ends
    # the next night, 2 h after it opens.
    seconds = seconds_to_work(NIGHTS, NOON, 10 * 3600, lambda _: 1.0)
    assert seconds == pytest.approx((10 + 24 + 2) * 3600)


def test_a_window_that_never_fits_the_work_in_a_year_answers_none() -> None:
    assert seconds_to_work(NIGHTS, NOON, 1e12, lambda _: 1.0) is None
    assert seconds_to_work((), NOON, 10, lambda _: 0.0) is None


def test_nothing_to_do_takes_no_time() -> None:
    assert seconds_to_work(NIGHTS, NOON, 0, lambda _: 1.0) == 0.0


def test_a_pendulum_now_is_read_like_a_standard_one() -> None:
    now = pendulum.instance(NOON)
    assert seconds_to_work(NIGHTS, now, 3600, lambda _: 1.0) == pytest.approx(11 * 3600)


def test_open_seconds_count_only_the_open_stretches() -> None:
    day = timedelta(days=1)
    assert open_seconds(NIGHTS, NOON, NOON + day) == pytest.approx(8 * 3600)
    assert open_seconds((), NOON, NOON + day) == pytest.approx(24 * 3600)


def test_a_fractional_window_slows_the_estimate_and_a_docs_rate_caps_it() -> None:
    half = parse_windows([{"from": "00:00", "to": "24:00", "rate": 0.5}])
    capped = parse_windows([{"from": "00:00", "to": "24:00", "rate": "10/s"}])
    full = duration_range(1000, 100.0, 0.0, now=NOON)
    assert full.seconds == pytest.approx(10.0)
    assert duration_range(1000, 100.0, 0.0, windows=half, now=NOON).seconds == pytest.approx(20.0)
    assert duration_range(1000, 100.0, 0.0, windows=capped, now=NOON).seconds == pytest.approx(
        100.0
    )


def test_the_budget_caps_the_rate_at_the_migrations_weighted_share() -> None:
    assert budget_share(None, 1, ()) is None
    assert budget_share(1000, 1, ()) == 1000
    assert budget_share(1000, 3, (1,)) == pytest.approx(750)
    share = budget_share(1000, 1, (1, 2))
    assert share == pytest.approx(250)
    assert duration_range(1000, 400.0, 0.0, share=share, now=NOON).seconds == pytest.approx(4.0)
    # A share above the lanes' own rate changes nothing.
    assert duration_range(1000, 100.0, 0.0, share=share, now=NOON).seconds == pytest.approx(10.0)


def test_the_range_brackets_the_expected_duration_by_the_spread() -> None:
    eta = duration_range(1000, 100.0, 0.25, now=NOON)
    assert eta.low_seconds == pytest.approx(8.0)
    assert eta.seconds == pytest.approx(10.0)
    assert eta.high_seconds == pytest.approx(13.3, abs=0.1)
    assert eta.to_dict() == {"low_seconds": 8.0, "seconds": 10.0, "high_seconds": 13.3}


def test_the_range_under_a_budget_narrows_to_the_share() -> None:
    eta = duration_range(1000, 400.0, 0.25, share=100.0, now=NOON)
    assert eta.low_seconds == eta.seconds == eta.high_seconds == pytest.approx(10.0)


def test_the_samples_relative_error_is_its_standard_error_over_its_mean() -> None:
    assert relative_error([1.0]) == 0.0
    assert relative_error([2.0, 2.0, 2.0]) == 0.0
    assert relative_error([1.0, 3.0]) == pytest.approx(1.0 / 2.0)


def test_lanes_add_a_share_each_up_to_the_servers_cores() -> None:
    assert lane_speedup(1, 8) == 1.0
    assert lane_speedup(2, 8) == pytest.approx(1 + LANE_GAIN)
    assert lane_speedup(4, 2) == lane_speedup(2, 2)
    assert lane_speedup(3, None) == pytest.approx(1 + 2 * LANE_GAIN)


def test_the_live_range_works_the_rest_at_the_rate_of_the_open_time_so_far() -> None:
    # Started 24 h ago under nightly windows: 8 h open, 28,800 documents: 1 doc/s.
    eta = live_range(3600, 28_800, NOON - timedelta(days=1), NOON, NIGHTS)
    assert eta is not None
    assert eta.seconds == pytest.approx(11 * 3600)
    assert eta.low_seconds is not None and eta.high_seconds is not None
    assert eta.low_seconds < eta.seconds < eta.high_seconds
    # Without windows, the pass's average rate, ± the spread.
    plain = live_range(100, 100, NOON - timedelta(seconds=10), NOON)
    assert plain is not None and plain.seconds == pytest.approx(10.0)
    assert plain.low_seconds == pytest.approx(10.0 / (1 + RATE_SPREAD), abs=0.1)


def test_the_live_range_is_untold_before_work_or_after_the_end() -> None:
    assert live_range(100, 0, NOON - timedelta(hours=1), NOON) is None
    assert live_range(0, 100, NOON - timedelta(hours=1), NOON) is None


def test_a_fractional_window_slows_several_lanes_less_than_one() -> None:
    # Two lanes reach 125 docs/s together, 100 each alone: at half time each,
    # they do 100 together (one's pause leaves the server to the other).
    half = parse_windows([{"from": "00:00", "to": "24:00", "rate": 0.5}])
    two = duration_range(1000, 125.0, 0.0, windows=half, lanes_alone=200.0, now=NOON)
    assert two.seconds == pytest.approx(10.0)
    one = duration_range(1000, 100.0, 0.0, windows=half, lanes_alone=100.0, now=NOON)
    assert one.seconds == pytest.approx(20.0)
