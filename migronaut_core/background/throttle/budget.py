"""The target's write budget and brake, as a lane meets them at a batch boundary.

``background_budget`` (documents per second) is shared by every background
migration writing to one database, whatever process or machine runs its lanes:
before each batch a lane takes the batch's size from its migration's
sub-bucket (:meth:`TargetBudget.take`; one round trip to the budget document,
refilled on the server's clock, the fairness rule in
:mod:`migronaut_core.background.store.budget`), and waits off any debt before
writing. A migration's weight is its spec's ``priority``. The budget counts
documents a batch may write (its size), an upper bound of what it writes.

The brake (``migronaut background brake``) stops every lane of the target at its
next batch boundary: :meth:`TargetBudget.brake_breach` answers it as a hold on
the signal ``brake``; the lane holds (it releases its partition, answers
``held``, and the state's ``hold`` has the reason ``brake``). A lane reads the
brake at most every :data:`BRAKE_LOOK_S` (a take reads it too), so a lane
writes at most one more batch after the brake is set, or :data:`BRAKE_LOOK_S`
worth without a budget.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from datetime import datetime
from typing import Final, Protocol

from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.throttle.health import HealthBreach
from migronaut_core.clock import aware, monotonic, utc_now

__all__ = [
    "BRAKE_BREACH",
    "BRAKE_LOOK_S",
    "BRAKE_SIGNAL",
    "MAX_BUDGET_WAIT_S",
    "BudgetGrant",
    "BudgetSource",
    "TargetBudget",
    "brake_ended",
]

log = logging.getLogger(__name__)

#: The brake is read again when the last reading is older than this.
BRAKE_LOOK_S: Final = 1.0
#: The signal a braked lane holds on (``hold.signal``, ``held_by.signal``).
BRAKE_SIGNAL: Final = "brake"
#: The brake as a hold's breach: a lane held by it answers this as its ``held_by``.
BRAKE_BREACH: Final = HealthBreach(BRAKE_SIGNAL, "hard", True, True)
#: A debt is waited off in steps of at most this long (the brake is looked at between).
MAX_BUDGET_WAIT_S: Final = 5.0


#: A brake as stored: ``reason``, ``at``, ``until`` (None: until released), ``requested_by``.
Brake = Mapping[str, object]


class BudgetGrant(Protocol):
    """What a take answers (the store's ``Grant``)."""

    @property
    def wait_s(self) -> float: ...

    @property
    def brake(self) -> Brake | None: ...


class BudgetSource(Protocol):
    """The target's budget document (the store's ``BudgetStore``)."""

    def take(self, migration: str, weight: int, count: int, rate: int) -> BudgetGrant: ...

    def brake(self) -> Brake | None: ...


def brake_ended(brake: Brake, now: datetime) -> bool:
    """Whether ``brake`` ended by its ``until`` (judged by ``now``)."""
    until = brake.get("until")
    if not isinstance(until, datetime):
        return False
    return aware(until) <= now


class TargetBudget:
    """The budget and brake of one target, as one runtime's lanes share them; thread-safe.

    :param store: the target's budget document.
    :param rate: documents per second (``background_budget``); None: no budget,
        only the brake.
    """

    def __init__(self, store: BudgetSource, rate: int | None) -> None:
        self._store = store
        self.rate = rate
        self._lock = threading.Lock()
        self._brake: Brake | None = None
        self._read_at = -float("inf")

    def take(self, migration: str, weight: int, count: int, cancel: CancelToken) -> bool:
        """Take ``count`` documents for ``migration`` and wait until its share paid them.

        Returns True when ``cancel`` fired during the wait (stop the lane). A
        brake set meanwhile ends the wait early: the next boundary holds.
        Without a budget, takes nothing.
        """
        if self.rate is None or count <= 0:
            return cancel.cancelled
        grant = self._store.take(migration, weight, count, self.rate)
        self._seen(grant.brake)
        wait_s = grant.wait_s
        while wait_s > 0:
            step = min(wait_s, MAX_BUDGET_WAIT_S)
            if cancel.sleep(step):
                return True
            wait_s -= step
            if wait_s > 0 and self.brake() is not None:
                return False
        return cancel.cancelled

    def brake(self) -> Brake | None:
        """The brake in force (an ended ``until`` is none), read at most every
        :data:`BRAKE_LOOK_S`."""
        with self._lock:
            stale = monotonic() - self._read_at >= BRAKE_LOOK_S
        if stale:
            self._seen(self._store.brake())
        with self._lock:
            brake = self._brake
        if brake is None or brake_ended(brake, utc_now()):
            return None
        return brake

    def forget(self) -> None:
        """Read the brake afresh at the next look (this process just set or released it)."""
        with self._lock:
            self._read_at = -float("inf")

    def brake_breach(self) -> HealthBreach | None:
        """The brake as a hold (signal ``brake``), or None when it is off."""
        if self.brake() is None:
            return None
        return BRAKE_BREACH

    def _seen(self, brake: Brake | None) -> None:
        with self._lock:
            self._brake = brake
            self._read_at = monotonic()
