"""Recent throughput, sampled in this process from successive reads of the store.

The store keeps each partition's counters and when they last moved, not a time
series, so the rate is measured here: every time the API reads a migration it
hands the pass's ``done`` count to :class:`ThroughputSampler`, and the rate
between two samples of the same pass is one point of the series. The pages poll
every two seconds, so a watched migration gets a point every two seconds;
samples closer together than :data:`MIN_SPACING_SECONDS` (several viewers at
once) are skipped. Samples live in memory for :data:`WINDOW_SECONDS` and start
afresh when the API server restarts; each API worker keeps its own.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

#: How much history a migration's series keeps.
WINDOW_SECONDS = 600
#: The window of the "docs/second now" figure.
RECENT_SECONDS = 60
#: Samples closer together than this are skipped.
MIN_SPACING_SECONDS = 1.5


@dataclass(frozen=True, slots=True)
class Sample:
    at: float
    done: int


@dataclass(frozen=True, slots=True)
class Rate:
    at: float
    docs_per_second: float

    def iso_at(self) -> str:
        return datetime.fromtimestamp(self.at, UTC).isoformat()


class ThroughputSampler:
    """Per-migration samples of ``done``; thread-safe, one per process.

    :param clock: seconds since the epoch (tests pass their own).
    """

    def __init__(
        self,
        *,
        window_seconds: float = WINDOW_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.window_seconds = window_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._samples: dict[str, tuple[int, deque[Sample]]] = {}

    def observe(self, name: str, generation: int, done: int) -> list[Sample]:
        """Record ``done`` for a migration's pass; return its samples, oldest first.

        A new pass (generation) or a count that went back (retry from start)
        starts the series again.
        """
        now = self._clock()
        with self._lock:
            seen, samples = self._samples.get(name, (generation, deque()))
            if seen != generation or (samples and done < samples[-1].done):
                samples = deque()
            if not samples or now - samples[-1].at >= MIN_SPACING_SECONDS:
                samples.append(Sample(now, done))
            while samples and now - samples[0].at > self.window_seconds:
                samples.popleft()
            self._samples[name] = (generation, samples)
            return list(samples)

    def now(self) -> float:
        return self._clock()


def rates(samples: Sequence[Sample]) -> list[Rate]:
    """The rate between each two successive samples."""
    return [
        Rate(later.at, round((later.done - earlier.done) / (later.at - earlier.at), 1))
        for earlier, later in itertools.pairwise(samples)
        if later.at > earlier.at
    ]


def recent_rate(
    samples: Sequence[Sample], now: float, seconds: float = RECENT_SECONDS
) -> float | None:
    """Documents per second over the last ``seconds`` of samples; None with fewer than two."""
    recent = [sample for sample in samples if now - sample.at <= seconds]
    if len(recent) < 2 or recent[-1].at <= recent[0].at:
        return None
    return round((recent[-1].done - recent[0].done) / (recent[-1].at - recent[0].at), 1)
