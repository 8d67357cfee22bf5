"""Throttle helpers: adaptive settings, a clock tests move by hand, a controller on it, a
``warn_once`` that remembers what it said."""

from __future__ import annotations

from typing import Any

from migronaut_core.background.spec import AdaptiveSettings
from migronaut_core.background.throttle import AdaptiveController

SETTINGS = AdaptiveSettings(
    min_batch_size=50,
    max_batch_size=400,
    increase=50,
    decrease=0.5,
    target_latency_ms=100,
    max_pause_ms=1_000,
)


class Clock:
    """Monotonic seconds that move only when a test says so."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Warnings:
    """A ``warn_once`` that remembers what it said."""

    def __init__(self) -> None:
        self.said: list[str] = []
        self._keys: set[str] = set()

    def __call__(self, key: str, message: str, *args: Any) -> None:
        if key not in self._keys:
            self._keys.add(key)
            self.said.append(key)


def controller(initial: dict[str, Any] | None = None, **kwargs: Any) -> AdaptiveController:
    clock = kwargs.pop("clock", Clock())
    return AdaptiveController(SETTINGS, initial, report_interval_s=0, clock=clock, **kwargs)
