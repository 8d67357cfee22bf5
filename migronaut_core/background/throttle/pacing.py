"""The throttle of one lane: what it waits for before a batch, and what it learns after one.

A :class:`Throttle` is built per claimed partition (:meth:`Throttle.for_job`)
from the spec's ``throttle`` and ``health`` settings, the user's
``throttle(ctx)`` function and the controller, lag probe and health probe the
lanes of a runtime share (a
:class:`~migronaut_core.background.throttle.registry.ThrottleRegistry`).
Every wait goes through :meth:`CancelToken.sleep`: cancelling wakes it at once.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, Protocol

from migronaut_core.background.backoff import Backoff
from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.spec import BackgroundFunctions, BackgroundSpec, HealthSettings
from migronaut_core.background.telemetry import NO_TELEMETRY, Telemetry
from migronaut_core.background.throttle.adaptive import AdaptiveController, ThrottleChange
from migronaut_core.background.throttle.budget import TargetBudget
from migronaut_core.background.throttle.health import HealthBreach, HealthProbe, first_breach
from migronaut_core.background.throttle.lag import LagSource
from migronaut_core.background.throttle.registry import ThrottleRegistry
from migronaut_core.background.warn_once import Warn, WarnOnce
from migronaut_core.clock import monotonic, utc_now
from migronaut_core.server_errors import is_overload
from migronaut_core.windows import (
    ALWAYS_OPEN,
    Window,
    WindowState,
    docs_per_lane,
    rate_pause_s,
    window_state,
)

if TYPE_CHECKING:
    from pymongo import MongoClient

__all__ = [
    "MAX_USER_PAUSE_MS",
    "SOFT_HEALTH_PAUSE_MS",
    "PacedJob",
    "Throttle",
    "ThrottleContext",
    "warning_keys",
]

log = logging.getLogger(__name__)

#: A user's throttle result is capped to this (the limit of ``pause_ms``).
MAX_USER_PAUSE_MS: Final = 3_600_000
#: A lagging secondary is looked at again after 0.25 s, doubling up to 2 s.
LAG_BACKOFF: Final = Backoff(first=0.25, cap=2.0)
#: A lane without an adaptive controller waits this long before a batch while a
#: health signal is past its soft limit (the controller's first back-off).
SOFT_HEALTH_PAUSE_MS: Final = 100
#: A wait for the budget at least this long is counted (``throttled``, reason ``budget``).
BUDGET_COUNTED_WAIT_S: Final = 0.01
#: What a throttle warns about: the user's function raised, or returned no number.
_WARNINGS: Final = ("raised", "value")


def _warning_key(kind: str, migration: str) -> str:
    return f"throttle-{kind}:{migration}"


def warning_keys(migration: str) -> frozenset[str]:
    """The warn-once keys the throttles of ``migration`` use (forgotten when it ends)."""
    return frozenset(_warning_key(kind, migration) for kind in _WARNINGS)


class PacedJob(Protocol):
    """What :meth:`Throttle.for_job` reads of a job (a ``Job`` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def spec(self) -> BackgroundSpec: ...

    @property
    def fns(self) -> BackgroundFunctions: ...

    @property
    def generation(self) -> int: ...


@dataclass(frozen=True, slots=True)
class ThrottleContext:
    """What a user's ``throttle(ctx)`` sees; it returns extra milliseconds to wait."""

    migration: str
    generation: int
    partition: str
    batch_size: int
    collection: str | None = None


@dataclass
class Throttle:
    """Everything one lane waits for before a batch, and what it learns after one.

    :meth:`before_batch` waits ``pause_ms`` + the user's ``throttle(ctx)`` +
    the adaptive pause, then (with ``max_lag_ms`` and a ``lag_probe``) while a
    secondary lags too far, backing off from 0.25 s to 2 s between looks. A
    server health signal past its soft limit (``health`` read through
    ``health_probe``) counts as an overload for the controller, or, without one,
    waits :data:`SOFT_HEALTH_PAUSE_MS`; past its hard limit,
    :meth:`hard_breach` says so and the lane stops at the batch boundary. A
    user function that raises or returns something other than a non-negative
    number counts as 0 and is warned about once (through ``warn``: the
    runtime's in a lane, else the throttle's own); it never fails the slice.
    Each change of the controller and each wait for lag is counted on
    ``telemetry`` (``migronaut.background.throttled``, by reason); the
    controller's batch size and pause, and the health signals' readings, are
    its gauges.

    With maintenance ``windows`` (judged on ``wall_clock``), :meth:`window_hold`
    says when none is open (the lane stops at the batch boundary and holds);
    inside one, its rate paces the lane: a fraction ``f`` of full speed waits
    ``(1 - f) / f`` times the previous batch's work before the next, and
    documents per second cap each batch at one second's share of the lane (the
    rate over ``lanes``) and wait out the rest of that second.
    """

    migration: str
    pause_ms: int = 0
    user_throttle: Callable[[ThrottleContext], Any] | None = None
    generation: int = 0
    partition: str = ""
    batch_size: int = 0
    max_lag_ms: int | None = None
    lag_probe: LagSource | None = None
    adaptive: AdaptiveController | None = None
    warn: Warn = field(default_factory=lambda: WarnOnce(log))
    collection: str | None = None
    #: The partition's shard group, when it has one (a telemetry attribute).
    group: str | None = None
    telemetry: Telemetry = NO_TELEMETRY
    health: HealthSettings | None = None
    health_probe: HealthProbe | None = None
    #: The target's write budget and brake (``background_budget``, ``brake``).
    budget: TargetBudget | None = None
    #: This migration's weight in the budget (the spec's ``priority``).
    priority: int = 1
    windows: tuple[Window, ...] = ()
    wall_clock: Callable[[], datetime] = utc_now
    #: How many lanes share a docs-per-second window's rate (the spec's ``max_parallel``).
    lanes: int = 1
    #: The signal past its hard limit at the last :meth:`hard_breach`, if one was.
    held_by: HealthBreach | None = field(default=None, init=False)
    _window: WindowState = field(default=ALWAYS_OPEN, init=False, repr=False)
    _batch_started: float | None = field(default=None, init=False, repr=False)
    _lagged: bool = field(default=False, init=False, repr=False)
    _strained: bool = field(default=False, init=False, repr=False)

    @classmethod
    def for_job(
        cls,
        job: PacedJob,
        partition: Mapping[str, Any],
        *,
        registry: ThrottleRegistry,
        client: MongoClient[Any] | None,
        warn: Warn,
        telemetry: Telemetry = NO_TELEMETRY,
        budget: TargetBudget | None = None,
        windows: tuple[Window, ...] = (),
        wall_clock: Callable[[], datetime] = utc_now,
    ) -> Throttle:
        """Build a lane's throttle for one claimed partition of ``job``.

        Wires the spec's ``throttle`` settings, the user's function, the
        shared lag probe of ``client`` (when ``max_lag_ms`` is set) and the
        shared controller of the partition's group (when ``adaptive`` is on;
        the partition's stored ``throttle`` state seeds a new controller) and
        the health probe (when ``health`` is on), all from ``registry``; its
        warnings go to ``warn``, its changes and waits to ``telemetry``.
        ``windows`` (the ones the lane keeps: the spec's, else the target's)
        are judged on ``wall_clock``. With ``budget``, each batch takes its size
        from the target's budget (weighted by the spec's ``priority``) and the
        brake holds the lane.
        """
        spec = job.spec
        group = partition.get("group")
        lag_on = spec.throttle.max_lag_ms is not None
        health_on = spec.health is not None
        throttle = cls(
            migration=job.name,
            pause_ms=spec.throttle.pause_ms,
            user_throttle=job.fns.throttle,
            generation=job.generation,
            partition=str(partition.get("_id", "")),
            batch_size=spec.batch_size,
            max_lag_ms=spec.throttle.max_lag_ms,
            lag_probe=registry.lag_probe(client) if lag_on and client is not None else None,
            adaptive=_adaptive_of(job, partition, registry),
            warn=warn,
            collection=spec.collection,
            group=None if group is None else str(group),
            telemetry=telemetry,
            health=spec.health,
            health_probe=(
                registry.health_probe(client) if health_on and client is not None else None
            ),
            budget=budget,
            priority=spec.priority,
            windows=windows,
            wall_clock=wall_clock,
            lanes=spec.max_parallel,
        )
        throttle._observe_adaptive()
        throttle.window_hold()
        return throttle

    def next_batch_size(self) -> int:
        """The size the next batch should read: the controller's, else ``batch_size``;
        at most one second's share of a docs-per-second window."""
        size = self.adaptive.batch_size() if self.adaptive is not None else self.batch_size
        share = docs_per_lane(self._window.window, self.lanes)
        return size if share is None else max(1, min(size, int(share)))

    def before_batch(self, cancel: CancelToken) -> bool:
        """Wait before the next batch; return True when ``cancel`` fired (stop the lane)."""
        wait_ms = self.pause_ms + self._user_pause_ms() + self._window_pause_ms()
        if self.adaptive is not None:
            wait_ms += self.adaptive.pause_ms()
        if wait_ms > 0 and cancel.sleep(wait_ms / 1000):
            return True
        if cancel.cancelled:
            return True
        if self._slow_for_health(cancel):
            return True
        stopped = self._wait_for_lag(cancel) or self._take_budget(cancel)
        self._batch_started = monotonic()
        return stopped

    def _take_budget(self, cancel: CancelToken) -> bool:
        """Take the next batch from the target's budget, waiting off a debt; True: cancelled."""
        if self.budget is None or self.budget.rate is None:
            return False
        started = monotonic()
        cancelled = self.budget.take(self.migration, self.priority, self.next_batch_size(), cancel)
        if monotonic() - started >= BUDGET_COUNTED_WAIT_S:
            self.telemetry.throttled(self.migration, "budget", shard=self.group)
        return cancelled

    def window_hold(self) -> WindowState | None:
        """Where the clock stands when no maintenance window is open (with ``opens_at``),
        else None; the open window's rate paces the next batches.

        Asked at each batch boundary: outside every window the lane must not
        write another batch.
        """
        self._window = window_state(self.windows, self.wall_clock())
        return None if self._window.open else self._window

    def _window_pause_ms(self) -> float:
        """The wait that keeps the open window's rate, from the previous batch's work."""
        window = self._window.window
        if window is None or window.full_speed or self._batch_started is None:
            return 0.0
        worked_s = monotonic() - self._batch_started
        share = docs_per_lane(window, self.lanes)
        if share is None:
            return rate_pause_s(window, worked_s) * 1000
        return max(0.0, self.next_batch_size() / share - worked_s) * 1000

    def hard_breach(self) -> HealthBreach | None:
        """The server health signal past its hard limit, if one is (also kept in ``held_by``).

        The lane must not write another batch: it stops at this batch boundary,
        releases its partition and holds until the signal clears. The reading
        is the probe's cached one, so asking before every batch costs nothing.
        """
        if (braked := self.brake_hold()) is not None:
            return braked
        if self.health is None or self.health_probe is None:
            return None
        reading = self.health_probe.read(self.warn)
        self.telemetry.health_read(self.migration, reading.signals())
        breach = first_breach(reading, self.health, "hard")
        if breach is not None and self.held_by is None:
            self.telemetry.throttled(self.migration, "health", shard=self.group)
        self.held_by = breach
        return breach

    def brake_hold(self) -> HealthBreach | None:
        """The target's brake as a hold (signal ``brake``, kept in ``held_by``), or None.

        Its reading is at most a second old (a budget take refreshes it), so
        asking after the budget's wait as well as before costs nothing.
        """
        braked = None if self.budget is None else self.budget.brake_breach()
        if braked is not None:
            self.held_by = braked
        return braked

    def _slow_for_health(self, cancel: CancelToken) -> bool:
        """Slow down while a signal is past its soft limit; True when ``cancel`` fired."""
        if self.health is None or self.health_probe is None:
            return False
        breach = first_breach(self.health_probe.read(self.warn), self.health, "soft")
        if breach is None:
            return False
        self.telemetry.throttled(self.migration, "health", shard=self.group)
        log.debug(
            "%s: %s reads %s (soft limit %s); slowing down",
            self.migration,
            breach.signal,
            breach.reading,
            breach.limit,
        )
        self._strained = True
        if self.adaptive is None:
            return cancel.sleep(SOFT_HEALTH_PAUSE_MS / 1000)
        return False

    def take_lagged(self) -> bool:
        """Whether a wait for a lagging secondary happened since the last call; clears it."""
        lagged, self._lagged = self._lagged, False
        return lagged

    def after_batch(self, latency_ms: float, *, overloaded: bool = False) -> ThrottleChange | None:
        """Feed a written batch to the controller (a lag wait or a soft health breach
        before it counts as overload)."""
        lagged = self.take_lagged()
        strained, self._strained = self._strained, False
        if self.adaptive is None:
            return None
        return self._counted(self.adaptive.record(latency_ms, overloaded or lagged or strained))

    def after_error(self, error: BaseException, latency_ms: float) -> ThrottleChange | None:
        """Feed a failed batch to the controller when ``error`` is an overload; else nothing."""
        if self.adaptive is None or not is_overload(error):
            return None
        return self._counted(self.adaptive.record(latency_ms, True))

    def _counted(self, change: ThrottleChange | None) -> ThrottleChange | None:
        if change is not None:
            self.telemetry.throttled(self.migration, change.reason, shard=self.group)
            self._observe_adaptive()
        return change

    def _observe_adaptive(self) -> None:
        """Report the adaptive controller's batch size and pause now (its gauges)."""
        if self.adaptive is not None:
            self.telemetry.throttle_observed(
                self.migration,
                batch_size=self.adaptive.batch_size(),
                pause_ms=self.adaptive.pause_ms(),
                shard=self.group,
            )

    def state(self) -> dict[str, int] | None:
        """The controller's state to checkpoint on the partition, or None without one."""
        return self.adaptive.state() if self.adaptive is not None else None

    def _user_pause_ms(self) -> int:
        if self.user_throttle is None:
            return 0
        ctx = ThrottleContext(
            self.migration, self.generation, self.partition, self.next_batch_size(), self.collection
        )
        try:
            value = self.user_throttle(ctx)
        except Exception as exc:
            self.warn(
                _warning_key("raised", self.migration),
                "%s: throttle() raised %s; not waiting for it",
                self.migration,
                type(exc).__name__,
            )
            return 0
        return self._user_value(value)

    def _user_value(self, value: Any) -> int:
        if value is None:
            return 0
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or value < 0:
            self.warn(
                _warning_key("value", self.migration),
                "%s: throttle() returned %s, not a non-negative number of ms; ignored",
                self.migration,
                type(value).__name__,
            )
            return 0
        return min(int(value), MAX_USER_PAUSE_MS)

    def _wait_for_lag(self, cancel: CancelToken) -> bool:
        if self.max_lag_ms is None or self.lag_probe is None:
            return False
        looks = 0
        while True:
            lag = self.lag_probe.lag_ms(self.warn)
            if lag is None or lag <= self.max_lag_ms:
                return cancel.cancelled
            if looks == 0:
                self.telemetry.throttled(self.migration, "lag", shard=self.group)
            self._lagged = True
            looks += 1
            delay = LAG_BACKOFF.seconds(looks)
            log.debug(
                "%s: a secondary lags %d ms (max %d ms); waiting %.2f s",
                self.migration,
                lag,
                self.max_lag_ms,
                delay,
            )
            if cancel.sleep(delay):
                return True


def _adaptive_of(
    job: PacedJob, partition: Mapping[str, Any], registry: ThrottleRegistry
) -> AdaptiveController | None:
    """The shared controller of a claimed partition's group, when the spec asks for one."""
    if job.spec.adaptive is None:
        return None
    group = partition.get("group")
    return registry.adaptive_for(
        job.name,
        None if group is None else str(group),
        job.spec.adaptive,
        partition.get("throttle"),
        start_batch_size=job.spec.batch_size,
    )
