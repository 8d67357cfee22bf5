"""How long to wait before trying again: capped exponential back-off, optionally jittered.

Every retry loop of the background engine (a failed slice or coordinator step,
a transient transaction error, a lagging secondary, a failing drift watcher)
waits by a :class:`Backoff` of its own numbers, so the rule is written once.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["Backoff"]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Wait ``first`` seconds after the first failure, doubling per failure, at most ``cap``.

    :param jitter: the share of each wait that is random: 0 waits exactly, 1 waits
        anywhere between 0 and the wait (full jitter), 0.5 between half of it and all.
    """

    first: float
    cap: float
    jitter: float = 0.0

    def seconds(self, failures: int) -> float:
        """The wait after ``failures`` failures in a row (1 for the first)."""
        wait = float(min(self.cap, self.first * 2 ** (failures - 1)))
        if self.jitter == 0:
            return wait
        return random.uniform(1.0 - self.jitter, 1.0) * wait
