"""Throttle helpers: adaptive settings, a clock tests move by hand, a controller on it."""

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


def controller(initial: dict[str, Any] | None = None, **kwargs: Any) -> AdaptiveController:
    clock = kwargs.pop("clock", Clock())
    return AdaptiveController(SETTINGS, initial, report_interval_s=0, clock=clock, **kwargs)
