"""How long a pass takes: the one model behind ``background estimate`` and the live ETA range.

Pure (no database, no clock of its own). The rules callers may rely on:

- **One lane's rate** is ``1 / (transform_s + WRITE_FACTOR * write_s)`` documents
  per second, from per-document costs sampled on the target
  (:mod:`migronaut_core.background.estimate`): the transform timed in this process,
  the guarded write timed in a transaction that is always aborted. A lane also
  reads, checkpoints and commits what the aborted write never commits;
  :data:`WRITE_FACTOR` is that difference, calibrated by ``bench/estimate.py``
  against the real engine on the bench machine (docs/performance.md).
- **More lanes** add :data:`LANE_GAIN` of one lane each, up to the server's cores
  (measured: 2 lanes are 1.2-1.3x one on 2 cores; a lane beyond the cores adds
  nothing).
- **Windows and the budget** cap that rate: inside a window at a fraction ``f``
  each lane works ``f`` of the time, so the lanes do at most ``f`` times what each
  would do alone, together (2 lanes at 0.5 on 2 cores: one lane's rate, 0.8 of
  full speed); a ``docs/s`` window caps the migration at that rate; closed
  stretches do no work (:func:`~migronaut_core.windows.seconds_to_work`).
  The budget (``background_budget``) caps it at the migration's weighted share,
  ``budget * priority / (sum of the priorities sharing it)``.
- **The range** widens the expected rate by :data:`RATE_SPREAD` (the run-to-run
  swing of docs/s measured on a shared machine) plus twice the sample's relative
  standard error: ``low`` is the duration at the faster rate, ``high`` at the
  slower.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from migronaut_core.json_shape import to_json_dict
from migronaut_core.windows import Window, open_seconds, seconds_to_work

__all__ = [
    "LANE_GAIN",
    "OPLOG_ENTRY_BYTES",
    "RATE_SPREAD",
    "WRITE_FACTOR",
    "EtaRange",
    "budget_share",
    "duration_range",
    "lane_speedup",
    "live_range",
    "relative_error",
]

#: A lane's write costs this many times the same write timed in an aborted transaction
#: (reading, the fenced checkpoint, the commit; calibrated by ``bench/estimate.py``).
WRITE_FACTOR: Final = 1.6
#: Each lane past the first adds this share of one lane's rate (up to the server's cores).
LANE_GAIN: Final = 0.25
#: The run-to-run swing of a lane's docs/s on a shared machine (docs/performance.md).
RATE_SPREAD: Final = 0.15
#: What an oplog entry of one update carries besides its ``o`` (the diff or the whole
#: document) and its ``ns`` text: ``ts``, ``t``, ``v``, ``op``, ``ui``, ``o2: {_id}``
#: (a small ``_id``), ``wall``, and a retryable write's ``lsid``, ``txnNumber``,
#: ``stmtId`` and ``prevOpTime`` (read from ``local.oplog.rs`` on MongoDB 6.0).
OPLOG_ENTRY_BYTES: Final = 267


@dataclass(frozen=True, slots=True)
class EtaRange:
    """Seconds from now to the end of a pass: expected, and the low-high range around it.

    A bound is None when the work does not end within the windows' horizon.
    """

    low_seconds: float | None
    seconds: float | None
    high_seconds: float | None

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


def relative_error(values: Sequence[float]) -> float:
    """The standard error of ``values``' mean over the mean (0 with fewer than 2 values)."""
    if len(values) < 2:
        return 0.0
    mean = statistics.fmean(values)
    if mean <= 0:
        return 0.0
    return statistics.stdev(values) / math.sqrt(len(values)) / mean


def lane_speedup(lanes: int, cores: int | None) -> float:
    """How many one-lane rates ``lanes`` lanes reach (see the module docstring)."""
    useful = max(1, lanes if cores is None else min(lanes, max(1, cores)))
    return 1.0 + (useful - 1) * LANE_GAIN


def budget_share(budget: int | None, priority: int, others: Sequence[int]) -> float | None:
    """The migration's share of the target's budget, in docs/s; None without a budget.

    ``others``: the priorities of the other migrations sharing it (the running ones
    when the estimate is made: who else will run later is not known).
    """
    if budget is None:
        return None
    return budget * priority / max(1, priority + sum(others))


def _rate_in(
    window: Window | None, full: float, share: float | None, paced: bool, lanes_alone: float
) -> float:
    """Docs/s inside ``window`` (or without windows) at ``full`` speed, under ``share``.

    ``paced``: at the window's own rate. A fraction ``f`` makes each lane work ``f``
    of the time, so the lanes together do at most ``f`` of what each would do alone
    (``lanes_alone``: the lanes' count times one lane's rate), and never more than
    ``full``: with several lanes, one's pause leaves the server to the others.
    """
    rate = full
    if window is not None and paced:
        if window.docs_per_s is None:
            rate = min(full, window.fraction * lanes_alone)
        else:
            rate = min(full, window.docs_per_s)
    return rate if share is None else min(rate, share)


def duration_range(
    documents: float,
    full_rate: float,
    spread: float,
    *,
    windows: Sequence[Window] = (),
    share: float | None = None,
    paced: bool = True,
    lanes_alone: float | None = None,
    now: datetime,
) -> EtaRange:
    """How long ``documents`` take from ``now`` at ``full_rate`` docs/s, ± ``spread`` of it.

    :param spread: the relative uncertainty of ``full_rate`` (e.g. 0.2 for ±20%).
    :param share: the budget's share for the migration (docs/s; None: no budget).
    :param paced: a window's rate applies (False: ``full_rate`` is already the rate
        inside windows, as a running pass measured it).
    :param lanes_alone: what the lanes would do each alone, together (lanes times one
        lane's rate); ``full_rate`` when not given (one lane).
    """
    alone = full_rate if lanes_alone is None else lanes_alone

    def at(rate: float) -> float | None:
        scaled = alone * rate / full_rate if full_rate > 0 else 0.0
        seconds = seconds_to_work(
            windows, now, documents, lambda window: _rate_in(window, rate, share, paced, scaled)
        )
        return None if seconds is None else round(seconds, 1)

    return EtaRange(
        low_seconds=at(full_rate * (1 + spread)),
        seconds=at(full_rate),
        high_seconds=at(full_rate * max(0.05, 1 - spread)),
    )


def live_range(
    remaining: int,
    done: int,
    started: datetime,
    now: datetime,
    windows: Sequence[Window] = (),
) -> EtaRange | None:
    """The ETA of a running pass from its own rate so far, as a range; None when untold.

    The rate is the pass's documents over the time a window was open since it
    started (all of it without windows); the rest is worked at that rate in the
    windows to come, ± :data:`RATE_SPREAD`. The budget and the windows' rates are
    already in that rate.
    """
    if remaining <= 0 or done <= 0:
        return None
    worked = open_seconds(windows, started, now)
    if worked <= 0:
        return None
    return duration_range(
        remaining, done / worked, RATE_SPREAD, windows=windows, paced=False, now=now
    )
