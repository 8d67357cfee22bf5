"""Pacing between batches: what keeps a background migration polite.

This module holds the fixed pause (``throttle.pause_ms``) and the user's own
``throttle(ctx)`` function; replication-lag backoff and the adaptive (AIMD)
controller plug in here too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from migronaut_core.background.cancel import CancelToken

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ThrottleContext:
    """What a user's ``throttle(ctx)`` sees; it returns extra milliseconds to wait."""

    migration: str
    generation: int
    partition: str
    batch_size: int


@dataclass
class Throttle:
    """Waits before each batch; ``before_batch`` returns True when cancelled meanwhile."""

    migration: str
    pause_ms: int = 0
    user_throttle: Callable[[ThrottleContext], Any] | None = None
    generation: int = 0
    partition: str = ""
    batch_size: int = 0

    def before_batch(self, cancel: CancelToken) -> bool:
        wait_ms = self.pause_ms + self._user_pause_ms()
        if wait_ms <= 0:
            return cancel.cancelled
        return cancel.sleep(wait_ms / 1000)

    def _user_pause_ms(self) -> int:
        if self.user_throttle is None:
            return 0
        ctx = ThrottleContext(self.migration, self.generation, self.partition, self.batch_size)
        value = self.user_throttle(ctx)
        if value is None:
            return 0
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            log.warning("%s: throttle() returned a non-number; ignored", self.migration)
            return 0
        return int(value)
