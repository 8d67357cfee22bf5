"""Maintenance windows: parsing, days, midnight, DST in a named zone, several windows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pendulum
import pytest

from migronaut_core.windows import (
    Window,
    WindowError,
    docs_per_lane,
    parse_windows,
    rate_pause_s,
    window_state,
)


def at(text: str) -> datetime:
    """A UTC moment from ISO text."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def one(**raw: Any) -> Window:
    return parse_windows([raw])[0]


# -- parsing ----------------------------------------------------------------------------


def test_a_window_defaults_to_every_day_utc_full_speed() -> None:
    window = one(**{"from": "01:00", "to": "05:30"})
    assert window == Window(days=(0, 1, 2, 3, 4, 5, 6), start=60, end=330)
    assert window.full_speed
    assert window.rate_text() == "full speed"


def test_days_take_short_and_full_names_in_any_case() -> None:
    window = one(days=["Sun", "MONDAY", "wed", "mon"], **{"from": "22:00", "to": "06:00"})
    assert window.days == (0, 2, 6)
    assert window.crosses_midnight


def test_rates_are_a_fraction_or_documents_per_second() -> None:
    assert one(rate=0.25, **{"from": "01:00", "to": "02:00"}).rate_text() == "25%"
    per_second = one(rate="2000/s", **{"from": "01:00", "to": "02:00"})
    assert per_second.docs_per_s == 2000
    assert per_second.rate_text() == "2000 docs/s"


def test_a_window_reads_back_as_written() -> None:
    raw = {"days": ["fri"], "from": "22:00", "to": "24:00", "timezone": "Asia/Tokyo", "rate": "5/s"}
    window = parse_windows([raw])[0]
    assert window.to_document() == raw
    assert parse_windows([window.to_document()]) == (window,)


@pytest.mark.parametrize(
    ("raw", "path", "words"),
    [
        ({"days": ["mun"], "from": "01:00", "to": "02:00"}, ("0", "days"), "must be one of"),
        ({"days": [], "from": "01:00", "to": "02:00"}, ("0", "days"), "non-empty list"),
        ({"days": "mon", "from": "01:00", "to": "02:00"}, ("0", "days"), "(got str)"),
        ({"from": "22:00", "to": "22:00"}, ("0", "to"), "must differ from `from`"),
        ({"from": "00:00", "to": "00:00"}, ("0", "to"), "must differ from `from`"),
        ({"from": "24:00", "to": "02:00"}, ("0", "from"), "00:00 to 23:59"),
        ({"from": "7:00", "to": "08:00"}, ("0", "from"), "HH:MM"),
        ({"from": "07:00", "to": "08:60"}, ("0", "to"), "HH:MM"),
        ({"to": "08:00"}, ("0", "from"), "is required"),
        ({"from": "01:00", "to": "02:00", "timezone": "Mars/Olympus"}, ("0", "timezone"), "IANA"),
        ({"from": "01:00", "to": "02:00", "timezone": 1}, ("0", "timezone"), "(got int)"),
        ({"from": "01:00", "to": "02:00", "rate": 0}, ("0", "rate"), "between 0.01 and 1"),
        ({"from": "01:00", "to": "02:00", "rate": 1.5}, ("0", "rate"), "between 0.01 and 1"),
        ({"from": "01:00", "to": "02:00", "rate": True}, ("0", "rate"), "(got bool)"),
        ({"from": "01:00", "to": "02:00", "rate": "0/s"}, ("0", "rate"), "'<1-10000000>/s'"),
        ({"from": "01:00", "to": "02:00", "rate": "fast"}, ("0", "rate"), "documents per second"),
        ({"from": "01:00", "to": "02:00", "speed": 1}, ("0", "speed"), "not a window setting"),
    ],
)
def test_a_bad_window_names_its_index_and_key(
    raw: dict[str, Any], path: tuple[str, ...], words: str
) -> None:
    with pytest.raises(WindowError) as caught:
        parse_windows([raw])
    assert caught.value.path == path
    assert words in caught.value.problem


@pytest.mark.parametrize("value", ["01:00-02:00", {"from": "01:00", "to": "02:00"}, 3, None])
def test_windows_must_be_a_list(value: Any) -> None:
    with pytest.raises(WindowError, match="must be a list of windows"):
        parse_windows(value)


def test_a_problem_never_repeats_the_value() -> None:
    with pytest.raises(WindowError) as caught:
        parse_windows([{"from": "01:00", "to": "02:00", "timezone": "Secret/Zone-7f3a9"}])
    assert "7f3a9" not in caught.value.problem


# -- where a moment stands --------------------------------------------------------------


def test_no_windows_means_always_open() -> None:
    state = window_state((), at("2026-06-01T12:00:00"))
    assert state.open
    assert state.window is None
    assert state.opens_at is None
    assert state.closes_at is None


def test_a_weekday_window_opens_on_its_days_only() -> None:
    windows = parse_windows([{"days": ["fri"], "from": "09:00", "to": "17:00"}])
    friday = at("2026-06-05T10:00:00")  # a Friday
    inside = window_state(windows, friday)
    assert inside.open
    assert inside.closes_at == at("2026-06-05T17:00:00")
    saturday = window_state(windows, at("2026-06-06T10:00:00"))
    assert not saturday.open
    assert saturday.opens_at == at("2026-06-12T09:00:00")


def test_the_bounds_are_from_inclusive_to_exclusive() -> None:
    windows = parse_windows([{"from": "09:00", "to": "17:00"}])
    assert window_state(windows, at("2026-06-05T09:00:00")).open
    closing = window_state(windows, at("2026-06-05T17:00:00"))
    assert not closing.open
    assert closing.opens_at == at("2026-06-06T09:00:00")


def test_a_window_crossing_midnight_belongs_to_the_day_it_opens() -> None:
    windows = parse_windows([{"days": ["mon"], "from": "22:00", "to": "06:00"}])
    # Monday 2026-06-01 22:00 to Tuesday 06:00.
    tuesday_early = window_state(windows, at("2026-06-02T03:00:00"))
    assert tuesday_early.open
    assert tuesday_early.closes_at == at("2026-06-02T06:00:00")
    monday_early = window_state(windows, at("2026-06-01T03:00:00"))
    assert not monday_early.open  # Sunday night is not a window
    assert monday_early.opens_at == at("2026-06-01T22:00:00")
    tuesday_night = window_state(windows, at("2026-06-02T23:00:00"))
    assert tuesday_night.opens_at == at("2026-06-08T22:00:00")


def test_00_00_to_24_00_is_the_whole_day() -> None:
    windows = parse_windows([{"days": ["sun"], "from": "00:00", "to": "24:00"}])
    state = window_state(windows, at("2026-06-07T00:00:00"))
    assert state.open
    assert state.closes_at == at("2026-06-08T00:00:00")


def test_a_window_ending_at_24_00_closes_at_midnight() -> None:
    windows = parse_windows([{"days": ["sat"], "from": "20:00", "to": "24:00"}])
    state = window_state(windows, at("2026-06-06T23:59:00"))
    assert state.open
    assert state.closes_at == at("2026-06-07T00:00:00")


def test_a_named_zone_reads_wall_clock_time() -> None:
    windows = parse_windows([{"from": "01:00", "to": "05:00", "timezone": "Asia/Tokyo"}])
    # 01:00 in Tokyo (UTC+9, no DST) is 16:00 UTC the day before.
    state = window_state(windows, at("2026-06-01T17:00:00"))
    assert state.open
    assert state.closes_at == at("2026-06-01T20:00:00")


def test_spring_forward_shortens_a_window_by_the_skipped_hour() -> None:
    # Paris moves from UTC+1 to UTC+2 at 02:00 on Sunday 2026-03-29.
    windows = parse_windows([{"from": "01:00", "to": "05:00", "timezone": "Europe/Paris"}])
    saturday = window_state(windows, at("2026-03-28T00:30:00"))
    assert saturday.closes_at == at("2026-03-28T04:00:00")  # four real hours
    sunday = window_state(windows, at("2026-03-29T00:30:00"))
    assert sunday.open
    assert sunday.closes_at == at("2026-03-29T03:00:00")  # three real hours
    monday = window_state(windows, at("2026-03-29T22:00:00"))
    assert monday.opens_at == at("2026-03-29T23:00:00")  # 01:00 at UTC+2


def test_fall_back_lengthens_a_window_crossing_midnight() -> None:
    # Paris moves from UTC+2 back to UTC+1 at 03:00 on Sunday 2026-10-25.
    windows = parse_windows(
        [{"days": ["sat"], "from": "22:00", "to": "06:00", "timezone": "Europe/Paris"}]
    )
    state = window_state(windows, at("2026-10-24T21:00:00"))
    assert state.open
    assert state.closes_at == at("2026-10-25T05:00:00")  # nine real hours
    assert state.closes_at - at("2026-10-24T20:00:00") == timedelta(hours=9)


def test_a_time_the_clocks_skip_opens_after_the_jump() -> None:
    windows = parse_windows(
        [{"days": ["sun"], "from": "02:30", "to": "04:00", "timezone": "Europe/Paris"}]
    )
    state = window_state(windows, at("2026-03-29T00:00:00"))
    assert state.opens_at == at("2026-03-29T01:30:00")  # 03:30 CEST, the first minute after


def test_the_first_open_window_in_the_list_sets_the_rate() -> None:
    windows = parse_windows(
        [
            {"from": "00:00", "to": "06:00", "rate": 0.5},
            {"from": "04:00", "to": "08:00", "rate": "100/s"},
        ]
    )
    early = window_state(windows, at("2026-06-01T05:00:00"))
    assert early.window == windows[0]
    late = window_state(windows, at("2026-06-01T07:00:00"))
    assert late.window == windows[1]


def test_overlapping_and_touching_windows_close_together() -> None:
    windows = parse_windows(
        [
            {"from": "00:00", "to": "06:00"},
            {"from": "04:00", "to": "08:00"},
            {"from": "08:00", "to": "09:00"},
            {"from": "20:00", "to": "22:00"},
        ]
    )
    state = window_state(windows, at("2026-06-01T01:00:00"))
    assert state.closes_at == at("2026-06-01T09:00:00")
    between = window_state(windows, at("2026-06-01T12:00:00"))
    assert not between.open
    assert between.opens_at == at("2026-06-01T20:00:00")


def test_the_earliest_of_several_windows_opens_next() -> None:
    windows = parse_windows(
        [
            {"days": ["wed"], "from": "01:00", "to": "02:00"},
            {"days": ["tue"], "from": "23:00", "to": "01:00", "timezone": "America/New_York"},
        ]
    )
    # Tuesday 23:00 in New York (UTC-4 in June) is Wednesday 03:00 UTC, after Wednesday 01:00.
    state = window_state(windows, at("2026-06-02T12:00:00"))
    assert state.opens_at == at("2026-06-03T01:00:00")
    later = window_state(windows, at("2026-06-03T02:30:00"))
    assert later.opens_at == at("2026-06-03T03:00:00")


def test_a_window_open_all_week_never_closes_within_the_horizon() -> None:
    windows = parse_windows([{"from": "00:00", "to": "12:00"}, {"from": "12:00", "to": "24:00"}])
    state = window_state(windows, at("2026-06-01T05:00:00"))
    assert state.open
    assert state.closes_at is None


def test_a_moment_in_another_zone_is_judged_the_same() -> None:
    windows = parse_windows([{"from": "09:00", "to": "17:00"}])
    from zoneinfo import ZoneInfo

    local = datetime(2026, 6, 1, 11, 0, tzinfo=ZoneInfo("Europe/Paris"))  # 09:00 UTC
    assert window_state(windows, local).open


# -- pacing -----------------------------------------------------------------------------


def test_a_fraction_waits_so_the_lane_works_that_share_of_the_time() -> None:
    half = one(rate=0.5, **{"from": "01:00", "to": "02:00"})
    quarter = one(rate=0.25, **{"from": "01:00", "to": "02:00"})
    assert rate_pause_s(half, 2.0) == pytest.approx(2.0)
    assert rate_pause_s(quarter, 1.0) == pytest.approx(3.0)
    assert rate_pause_s(one(**{"from": "01:00", "to": "02:00"}), 5.0) == 0.0
    assert rate_pause_s(None, 5.0) == 0.0


def test_documents_per_second_are_shared_by_the_lanes() -> None:
    window = one(rate="1000/s", **{"from": "01:00", "to": "02:00"})
    assert docs_per_lane(window, 4) == 250
    assert docs_per_lane(window, 0) == 1000
    assert docs_per_lane(one(rate=0.5, **{"from": "01:00", "to": "02:00"}), 4) is None
    assert rate_pause_s(window, 1.0) == 0.0  # paced by batch size instead


def test_a_pendulum_now_is_judged_like_a_standard_one() -> None:
    # The runtime's wall clock answers pendulum times, whose sums with a timedelta
    # lose their zone: an open window's end was then naive and raised TypeError.
    windows = parse_windows([{"from": "00:00", "to": "24:00", "rate": 0.5}])
    now = pendulum.datetime(2026, 6, 1, 12, 0, tz="UTC")
    state = window_state(windows, now)
    assert state.open and state.window is not None and state.window.fraction == 0.5
    assert state.closes_at is None  # open all week: no end within the horizon
    nightly = parse_windows([{"from": "22:00", "to": "06:00"}])
    assert window_state(nightly, now).opens_at == at("2026-06-01T22:00:00")
    assert window_state(nightly, pendulum.instance(at("2026-06-01T23:00:00"))).closes_at == at(
        "2026-06-02T06:00:00"
    )
