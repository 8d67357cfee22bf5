"""The adaptive (AIMD) controller: batch sizes and pauses learned from each batch.

A controller grows the batch size while batches are healthy and shrinks it (then
grows a pause) on overload or latency; see :class:`AdaptiveController`. Its
:meth:`~AdaptiveController.state` is what a lane stores on its partition, so a
later lane resumes from it. Pure arithmetic under a lock: no server, no clock
but the injected one.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from migronaut_core.background.spec import AdaptiveSettings
from migronaut_core.clock import monotonic
from migronaut_core.json_shape import to_json_dict

__all__ = ["AdaptiveController", "Reason", "ThrottleChange"]

Reason = Literal["overload", "latency", "recovered"]

#: The first extra pause once the batch size is at its floor.
FIRST_BACKOFF_MS: Final = 100
#: A decaying pause below this is dropped.
_PAUSE_FLOOR_MS: Final = 10
#: Changes are reported at most this often per controller (the latest wins).
REPORT_INTERVAL_S: Final = 10.0


@dataclass(frozen=True, slots=True)
class ThrottleChange:
    """What an adaptive controller changed: the new batch size and pause, and why.

    ``reason`` is the most severe since the last report: ``overload`` (an error
    or a lagging secondary), ``latency`` (a batch slower than the target) or
    ``recovered`` (healthy batches grew the size or shortened the pause).
    """

    reason: Reason
    batch_size: int
    pause_ms: int

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


_SEVERITY: Final[Mapping[Reason, int]] = {"recovered": 0, "latency": 1, "overload": 2}


class AdaptiveController:
    """AIMD batch sizing for one migration and shard group; safe to share between threads.

    A healthy batch (no overload, latency within the target) first halves the
    pause, then adds ``increase`` documents, up to ``max_batch_size``. An
    overloaded or slow batch multiplies the size by ``decrease``, down to
    ``min_batch_size``; at that floor it grows a pause instead (100 ms, then
    doubling, up to ``max_pause_ms``). Several lanes that see the same slow
    moment decrease once: a decrease within one batch latency of the previous
    one is ignored. Without an ``initial`` state the first batch only warms
    up (its latency is not judged; an overload still counts).

    :param settings: the spec's resolved ``adaptive`` settings.
    :param initial: a :meth:`state` stored on a partition; values out of
        range are clamped, unreadable ones ignored.
    :param start_batch_size: the size to start from without ``initial``
        (clamped); default ``max_batch_size``.
    :param report_interval_s: report a change at most this often (0: every change).
    :param clock: monotonic seconds (injected by tests).
    """

    def __init__(
        self,
        settings: AdaptiveSettings,
        initial: Mapping[str, Any] | None = None,
        *,
        start_batch_size: int | None = None,
        report_interval_s: float = REPORT_INTERVAL_S,
        clock: Callable[[], float] = monotonic,
    ) -> None:
        self.settings = settings
        self._clock = clock
        self._report_interval_s = report_interval_s
        self._lock = threading.Lock()
        start = settings.max_batch_size if start_batch_size is None else start_batch_size
        self._size = self._clamp_size(_int_of(initial, "batch_size", start))
        self._pause = self._clamp_pause(_int_of(initial, "pause_ms", 0))
        self._warm = initial is not None
        self._last_decrease = -math.inf
        self._last_report = -math.inf
        self._pending: Reason | None = None

    def batch_size(self) -> int:
        """The size of the next batch, within ``[min_batch_size, max_batch_size]``."""
        with self._lock:
            return self._size

    def pause_ms(self) -> int:
        """The extra pause before the next batch, within ``[0, max_pause_ms]``."""
        with self._lock:
            return self._pause

    def state(self) -> dict[str, int]:
        """A BSON/JSON-safe snapshot to store on the partition (``initial`` of a later lane)."""
        with self._lock:
            return {"batch_size": self._size, "pause_ms": self._pause}

    def record(self, latency_ms: float, overloaded: bool = False) -> ThrottleChange | None:
        """Judge one batch; return the change to report, or None (nothing new to say)."""
        with self._lock:
            reason = self._judge(max(0.0, float(latency_ms)), overloaded)
            if reason is None:
                return None
            return self._report(reason)

    def _judge(self, latency_ms: float, overloaded: bool) -> Reason | None:
        slow = latency_ms > self.settings.target_latency_ms
        if not self._warm:
            self._warm = True
            if not overloaded:
                return None
        if overloaded or slow:
            return self._decrease("overload" if overloaded else "latency", latency_ms)
        return self._recover()

    def _decrease(self, reason: Reason, latency_ms: float) -> Reason | None:
        now = self._clock()
        if (now - self._last_decrease) * 1000 < max(latency_ms, 1.0):
            return None
        self._last_decrease = now
        floor = self.settings.min_batch_size
        if self._size > floor:
            self._size = max(floor, int(self._size * self.settings.decrease))
        elif self._pause < self.settings.max_pause_ms:
            self._pause = self._clamp_pause(max(FIRST_BACKOFF_MS, self._pause * 2))
        else:
            return None
        return reason

    def _recover(self) -> Reason | None:
        if self._pause > 0:
            halved = self._pause // 2
            self._pause = halved if halved >= _PAUSE_FLOOR_MS else 0
            return "recovered"
        if self._size < self.settings.max_batch_size:
            self._size = self._clamp_size(self._size + self.settings.increase)
            return "recovered"
        return None

    def _report(self, reason: Reason) -> ThrottleChange | None:
        pending = self._pending
        if pending is None or _SEVERITY[reason] > _SEVERITY[pending]:
            self._pending = pending = reason
        now = self._clock()
        if now - self._last_report < self._report_interval_s:
            return None
        self._last_report = now
        self._pending = None
        return ThrottleChange(pending, self._size, self._pause)

    def _clamp_size(self, size: int) -> int:
        return min(self.settings.max_batch_size, max(self.settings.min_batch_size, size))

    def _clamp_pause(self, pause: int) -> int:
        return min(self.settings.max_pause_ms, max(0, pause))


def _int_of(state: Mapping[str, Any] | None, key: str, default: int) -> int:
    value = state.get(key) if isinstance(state, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return default
    return int(value)
