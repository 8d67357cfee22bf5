"""Maintenance windows: when background lanes may work, and how fast.

A window is a stretch of wall-clock time in a named time zone, on some days of
the week (``days``, ``from``, ``to``, ``timezone``), with a ``rate``: a fraction
of full speed (``0.5``) or documents per second (``"2000/s"``). Outside every
window a migration's lanes stop at a batch boundary and hold; inside one they
work at its rate. A migration's own ``background.windows`` overrides the
target's ``background_windows``; neither set (or an empty list) means always open.

The rules callers may rely on:

- ``days`` names the days a window *opens*; ``to`` at or before ``from``
  crosses midnight into the next day (``22:00`` to ``06:00``), and ``to`` may be
  ``24:00`` (``00:00`` to ``24:00``: the whole day). ``from == to`` is
  refused: it could mean nothing or the whole day.
- Times are wall-clock times of ``timezone`` (IANA names, ``UTC`` by default):
  on a DST change a window keeps its wall-clock bounds, so a ``22:00`` to ``06:00``
  window lasts 7 or 9 real hours that night. A time the clocks skip opens (or
  closes) when they jump past it; a time they repeat means its first occurrence.
- Where windows overlap, the first in the list that is open sets the rate, and
  a window "closes" only when no other open one continues it.

Pure: no clock of its own (callers pass ``now``, an aware datetime) and no
database. :func:`parse_windows` checks a raw list (from a spec or a config)
with the rules of :mod:`migronaut_core.checks`; :func:`window_state` answers
where a moment stands.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Final
from zoneinfo import ZoneInfo

from migronaut_core.checks import (
    NestedSettingError,
    choice_problem,
    clock_time_problem,
    number_problem,
    time_zone_problem,
    wrong_type,
)

__all__ = [
    "ALWAYS_OPEN",
    "DAY_NAMES",
    "HORIZON_DAYS",
    "MAX_DOCS_PER_S",
    "MIN_FRACTION",
    "Window",
    "WindowError",
    "WindowState",
    "docs_per_lane",
    "open_seconds",
    "parse_windows",
    "rate_pause_s",
    "seconds_to_work",
    "window_state",
]

#: Day names a window's ``days`` takes (English, three letters or in full, any case).
DAY_NAMES: Final = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_FULL_DAY_NAMES: Final = (
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
)
#: The slowest fraction of full speed a window may set (the pause is 99x the work).
MIN_FRACTION: Final = 0.01
#: The largest documents-per-second rate a window may set.
MAX_DOCS_PER_S: Final = 10_000_000
_DOCS_PER_S: Final = re.compile(r"^\s*([0-9]+)\s*/\s*s\s*$")
_KEYS: Final = ("days", "from", "to", "timezone", "rate")
_MINUTES_PER_DAY: Final = 24 * 60
#: How far around ``now`` windows are laid out: a week of openings and the day before.
_DAYS_BACK: Final = 2
_DAYS_AHEAD: Final = 9


class WindowError(NestedSettingError):
    """A window list that does not fit: ``problem`` (words after the key) at ``path``.

    Callers turn it into their typed error naming the key (``windows.0.days``).
    """


@dataclass(frozen=True, slots=True)
class Window:
    """One maintenance window, validated (build it with :func:`parse_windows`).

    :param days: weekdays it opens on, ``0`` Monday to ``6`` Sunday, sorted.
    :param start: minutes after local midnight it opens (0-1439).
    :param end: minutes after local midnight it closes (1-1440); at or before
        ``start``: the next day.
    :param timezone: the IANA time zone ``start`` and ``end`` are read in.
    :param fraction: the share of full speed lanes work at (``MIN_FRACTION``-1).
    :param docs_per_s: instead of ``fraction``: documents per second for the
        migration, shared by its ``max_parallel`` lanes.
    """

    days: tuple[int, ...]
    start: int
    end: int
    timezone: str = "UTC"
    fraction: float = 1.0
    docs_per_s: int | None = None

    @property
    def crosses_midnight(self) -> bool:
        return self.end <= self.start

    @property
    def full_speed(self) -> bool:
        return self.docs_per_s is None and self.fraction >= 1.0

    def rate_text(self) -> str:
        """The rate as a person reads it: ``full speed``, ``50%``, ``2000 docs/s``."""
        if self.docs_per_s is not None:
            return f"{self.docs_per_s} docs/s"
        return "full speed" if self.fraction >= 1.0 else f"{self.fraction:.0%}"

    def to_document(self) -> dict[str, Any]:
        """The window as a spec or config writes it (what :func:`parse_windows` reads)."""
        return {
            "days": [DAY_NAMES[day] for day in self.days],
            "from": _clock_text(self.start),
            "to": _clock_text(self.end),
            "timezone": self.timezone,
            "rate": self.fraction if self.docs_per_s is None else f"{self.docs_per_s}/s",
        }


@dataclass(frozen=True, slots=True)
class WindowState:
    """Where a moment stands against a list of windows.

    :param open: lanes may work now (always, without windows).
    :param window: the window in effect now (the first open one in list order);
        ``None`` when closed or without windows.
    :param opens_at: when closed, when the next window opens (UTC).
    :param closes_at: when open, when the open stretch ends (UTC); ``None``
        without windows or when none ends within the coming week.
    """

    open: bool
    window: Window | None = None
    opens_at: datetime | None = None
    closes_at: datetime | None = None


ALWAYS_OPEN: Final = WindowState(open=True)


def parse_windows(value: Any) -> tuple[Window, ...]:
    """Check a raw list of windows (each ``{days, from, to, timezone, rate}``).

    ``days`` defaults to every day, ``timezone`` to ``UTC`` and ``rate`` to full
    speed; ``from`` and ``to`` (``HH:MM``) are required.

    :raises WindowError: naming the index and key at fault, never the value.
    """
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence):
        raise WindowError(f"must be a list of windows{wrong_type(value, list)}")
    return tuple(_window(raw, str(index)) for index, raw in enumerate(value))


def _window(raw: Any, index: str) -> Window:
    if not isinstance(raw, Mapping):
        raise WindowError(f"must be a mapping{wrong_type(raw, dict)}", index)
    for key in raw:
        if key not in _KEYS:
            raise WindowError(
                f"is not a window setting (known: {', '.join(_KEYS)})", index, str(key)[:60]
            )
    for key in ("from", "to"):
        if key not in raw:
            raise WindowError("is required (HH:MM)", index, key)
    start = _minutes(raw["from"], index, "from", allow_end_of_day=False)
    end = _minutes(raw["to"], index, "to", allow_end_of_day=True)
    if start == end:
        raise WindowError(
            "must differ from `from` (use 00:00 to 24:00 for a whole day)", index, "to"
        )
    timezone = raw.get("timezone", "UTC")
    problem = time_zone_problem(timezone)
    if problem is not None:
        raise WindowError(problem, index, "timezone")
    fraction, docs_per_s = _rate(raw.get("rate", 1.0), index)
    return Window(
        days=_days(raw.get("days", DAY_NAMES), index),
        start=start,
        end=end,
        timezone=timezone,
        fraction=fraction,
        docs_per_s=docs_per_s,
    )


def _days(value: Any, index: str) -> tuple[int, ...]:
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence) or not value:
        raise WindowError(
            f"must be a non-empty list of day names{wrong_type(value, list)}", index, "days"
        )
    days: set[int] = set()
    for name in value:
        lowered = name.lower() if isinstance(name, str) else name
        if lowered in _FULL_DAY_NAMES:
            days.add(_FULL_DAY_NAMES.index(lowered))
            continue
        problem = choice_problem(lowered, DAY_NAMES)
        if problem is not None:
            raise WindowError(f"{problem} (or a full English day name)", index, "days")
        days.add(DAY_NAMES.index(lowered))
    return tuple(sorted(days))


def _minutes(value: Any, index: str, key: str, *, allow_end_of_day: bool) -> int:
    problem = clock_time_problem(value, allow_end_of_day=allow_end_of_day)
    if problem is not None:
        raise WindowError(problem, index, key)
    hours, minutes = str(value).split(":")
    return int(hours) * 60 + int(minutes)


def _rate(value: Any, index: str) -> tuple[float, int | None]:
    """``(fraction, docs_per_s)``: a number is a fraction of full speed, ``"N/s"`` a rate."""
    if isinstance(value, str):
        matched = _DOCS_PER_S.match(value)
        count = int(matched.group(1)) if matched else 0
        if not 1 <= count <= MAX_DOCS_PER_S:
            raise WindowError(
                f"must be a fraction of full speed ({MIN_FRACTION}-1) or documents per second "
                f"as '<1-{MAX_DOCS_PER_S}>/s'",
                index,
                "rate",
            )
        return 1.0, count
    problem = number_problem(value, MIN_FRACTION, 1.0)
    if problem is not None:
        raise WindowError(f"{problem}, or documents per second as '<N>/s'", index, "rate")
    return float(value), None


def _clock_text(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


# -- where a moment stands ---------------------------------------------------------------


def window_state(windows: Sequence[Window], now: datetime) -> WindowState:
    """Whether ``now`` (aware) is inside a window, which, and when that changes.

    No windows: always open. The answer's datetimes are UTC.
    """
    if not windows:
        return ALWAYS_OPEN
    moment = _plain_utc(now)
    spans = sorted(
        (start, end, order)
        for order, window in enumerate(windows)
        for start, end in _openings(window, moment)
    )
    inside = [(start, end, order) for start, end, order in spans if start <= moment < end]
    if not inside:
        upcoming = [start for start, _, _ in spans if start > moment]
        return WindowState(open=False, opens_at=min(upcoming) if upcoming else None)
    current = windows[min(order for _, _, order in inside)]
    return WindowState(open=True, window=current, closes_at=_stretch_end(spans, moment))


def _stretch_end(spans: list[tuple[datetime, datetime, int]], moment: datetime) -> datetime | None:
    """When the open stretch holding ``moment`` ends (overlapping or touching windows join)."""
    horizon = moment + timedelta(days=_DAYS_AHEAD - 2)
    end = moment
    for start, stop, _ in spans:
        if start <= end and stop > end:
            end = stop
    return None if end >= horizon else end


def _openings(window: Window, moment: datetime) -> list[tuple[datetime, datetime]]:
    """The window's openings around ``moment``, as (start, end) in UTC."""
    zone = ZoneInfo(window.timezone)
    today = moment.astimezone(zone).date()
    spans: list[tuple[datetime, datetime]] = []
    for offset in range(-_DAYS_BACK, _DAYS_AHEAD):
        day = today + timedelta(days=offset)
        if day.weekday() not in window.days:
            continue
        start = _instant(day, window.start, zone)
        end_day = day + timedelta(days=1) if window.crosses_midnight else day
        end = _instant(end_day, window.end, zone)
        if end > start:
            spans.append((start, end))
    return spans


def _instant(day: date, minutes: int, zone: ZoneInfo) -> datetime:
    """Local wall-clock ``minutes`` after midnight of ``day`` in ``zone``, as UTC.

    ``fold=0``: a skipped time reads with the offset before the change (so it
    lands after the jump), a repeated one is its first occurrence.
    """
    if minutes >= _MINUTES_PER_DAY:
        day, minutes = day + timedelta(days=1), minutes - _MINUTES_PER_DAY
    local = datetime.combine(day, time(minutes // 60, minutes % 60), tzinfo=zone)
    return local.astimezone(UTC)


def rate_pause_s(window: Window | None, worked_s: float) -> float:
    """How long a lane waits after a batch that took ``worked_s`` to keep a fraction's pace.

    ``fraction`` f: the lane works f of the time (pauses ``worked_s * (1 - f) / f``).
    A docs-per-second window paces by batch size instead (:func:`docs_per_lane`).
    """
    if window is None or window.docs_per_s is not None or window.fraction >= 1.0:
        return 0.0
    return max(0.0, worked_s) * (1.0 - window.fraction) / window.fraction


def docs_per_lane(window: Window | None, lanes: int) -> float | None:
    """A docs-per-second window's share for one of ``lanes`` lanes; None otherwise."""
    if window is None or window.docs_per_s is None:
        return None
    return window.docs_per_s / max(1, lanes)


#: How far ahead :func:`seconds_to_work` looks before it gives up (a window that
#: almost never opens, or a rate so low the work outlasts it).
HORIZON_DAYS: Final = 366


def seconds_to_work(
    windows: Sequence[Window],
    now: datetime,
    documents: float,
    rate: Callable[[Window | None], float],
) -> float | None:
    """Seconds from ``now`` until ``documents`` are done, working only while a window is open.

    ``rate(window)`` is the documents per second inside ``window`` (``rate(None)``
    without windows); closed stretches count as time that does no work. None
    when the work does not end within :data:`HORIZON_DAYS` (or a rate is 0).
    """
    if documents <= 0:
        return 0.0
    start = _plain_utc(now)
    horizon = start + timedelta(days=HORIZON_DAYS)
    moment, left = start, float(documents)
    while moment < horizon:
        where = window_state(windows, moment)
        if not where.open:
            if where.opens_at is None:
                return None
            moment = where.opens_at
            continue
        per_s = rate(where.window)
        end = where.closes_at or moment + timedelta(days=_DAYS_AHEAD - 2)
        if per_s > 0:
            stretch = (end - moment).total_seconds()
            if per_s * stretch >= left:
                return (moment - start).total_seconds() + left / per_s
            left -= per_s * stretch
        moment = end
    return None


def open_seconds(windows: Sequence[Window], start: datetime, end: datetime) -> float:
    """Seconds between ``start`` and ``end`` during which a window was open (all, without)."""
    moment, until = _plain_utc(start), _plain_utc(end)
    total = 0.0
    while moment < until:
        where = window_state(windows, moment)
        if not where.open:
            if where.opens_at is None:
                break
            moment = where.opens_at
            continue
        stop = min(until, where.closes_at or moment + timedelta(days=_DAYS_AHEAD - 2))
        total += (stop - moment).total_seconds()
        moment = stop
    return total


def _plain_utc(moment: datetime) -> datetime:
    """``moment`` as a standard-library UTC datetime (a pendulum one's sums lose their zone)."""
    return datetime.fromtimestamp(moment.timestamp(), tz=UTC)
