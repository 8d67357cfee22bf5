"""Pacing between batches: what keeps a background migration polite.

A background migration rewrites a collection the application is using, so each
lane waits before every batch for:

- the fixed pause of the spec (``throttle.pause_ms``);
- the user's ``throttle(ctx)`` function, whose result is extra milliseconds;
- the adaptive controller's pause (see :class:`AdaptiveController`);
- replication lag: with ``throttle.max_lag_ms``, a lane waits while the slowest
  secondary is further behind the primary than that (see :class:`LagProbe`).

The adaptive (AIMD) controller sizes batches from their latency and from
overload signals (:func:`is_overload`, a lagging secondary). One controller per
migration and shard group is shared by the lanes of a process
(:func:`adaptive_for`), and its :meth:`~AdaptiveController.state` is stored on
the partition so a later lane resumes from it.

Every wait goes through :meth:`CancelToken.sleep`: cancelling wakes it at once.
Log lines carry migration names and numbers, never documents.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

from pymongo.errors import (
    OperationFailure,
    PyMongoError,
)

from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.spec import AdaptiveSettings
from migronaut_core.server_errors import is_overload, is_unauthorized, replication_unavailable

if TYPE_CHECKING:
    from pymongo import MongoClient

    from migronaut_core.background.job import Job

__all__ = [
    "AdaptiveController",
    "LagProbe",
    "LagSource",
    "Throttle",
    "ThrottleChange",
    "ThrottleContext",
    "WarnOnce",
    "adaptive_for",
    "forget_adaptive",
    "is_overload",
    "lag_probe_for",
    "replication_lag_ms",
]

log = logging.getLogger(__name__)


class WarnOnce(Protocol):
    """Log ``message % args`` as a warning unless ``key`` was already warned about."""

    def __call__(self, key: str, message: str, *args: Any) -> None: ...


_warned: set[str] = set()
_warned_lock = threading.Lock()


def _warn_once(key: str, message: str, *args: Any) -> None:
    """The process-wide fallback when the caller passes no ``warn``."""
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning(message, *args)


# ─── Overload ─────────────────────────────────────────────────────────────────


# ─── The adaptive controller (AIMD) ───────────────────────────────────────────

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
        return {"reason": self.reason, "batch_size": self.batch_size, "pause_ms": self.pause_ms}


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
        clock: Callable[[], float] = time.monotonic,
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


_AdaptiveKey = tuple[str, str, str | None]
_controllers: dict[_AdaptiveKey, AdaptiveController] = {}
_controllers_lock = threading.Lock()


def adaptive_for(
    migration: str,
    group: str | None,
    settings: AdaptiveSettings,
    initial_state: Mapping[str, Any] | None = None,
    *,
    namespace: str = "",
    start_batch_size: int | None = None,
) -> AdaptiveController:
    """Return the process's controller of ``(namespace, migration, group)``, made on first use.

    Every lane of the process working that migration and shard group gets the
    same controller. ``initial_state`` (the claimed partition's ``throttle``)
    only seeds a new controller. When ``settings`` changed (a repin), the
    controller is replaced by one that starts from the old one's state.

    :param namespace: what tells apart deployments or databases that reuse
        migration names in one process (the state collection's full name).
    """
    key = (namespace, migration, group)
    with _controllers_lock:
        current = _controllers.get(key)
        if current is not None and current.settings == settings:
            return current
        seed = current.state() if current is not None else initial_state
        controller = AdaptiveController(settings, seed, start_batch_size=start_batch_size)
        _controllers[key] = controller
        return controller


def forget_adaptive(migration: str | None = None, *, namespace: str | None = None) -> int:
    """Drop the process's controllers (of one migration and/or namespace); return how many."""
    with _controllers_lock:
        doomed = [
            key
            for key in _controllers
            if (migration is None or key[1] == migration)
            and (namespace is None or key[0] == namespace)
        ]
        for key in doomed:
            del _controllers[key]
        return len(doomed)


# ─── Replication lag ──────────────────────────────────────────────────────────

#: The replica set status is read at most this often per client.
LAG_INTERVAL_S: Final = 1.0
#: The replica set config (hidden and delayed members) is read at most this often.
CONFIG_INTERVAL_S: Final = 60.0
#: A lagging secondary is looked at again after this, doubling up to LAG_BACKOFF_MAX_S.
LAG_BACKOFF_START_S: Final = 0.25
LAG_BACKOFF_MAX_S: Final = 2.0

_PRIMARY, _SECONDARY = 1, 2


def replication_lag_ms(status: Mapping[str, Any], excluded: frozenset[str] = frozenset()) -> int:
    """Return how far the slowest secondary is behind the primary, in ms (0 when none is).

    Reads a ``replSetGetStatus`` reply: compares ``optimeDate`` of healthy
    secondaries with the primary's. Arbiters, down, recovering and
    ``excluded`` members (hidden or delayed) do not count; without a primary
    the lag is 0 (nothing is written then anyway).
    """
    members = [m for m in status.get("members") or () if isinstance(m, Mapping)]
    primary = next((m for m in members if m.get("state") == _PRIMARY), None)
    head = primary.get("optimeDate") if primary is not None else None
    if not isinstance(head, datetime):
        return 0
    worst = 0.0
    for member in members:
        if member.get("state") != _SECONDARY or member.get("health", 1) == 0:
            continue
        optime = member.get("optimeDate")
        if member.get("name") in excluded or not isinstance(optime, datetime):
            continue
        worst = max(worst, (head - optime).total_seconds() * 1000)
    return int(worst)


def _excluded_members(config: Mapping[str, Any]) -> frozenset[str]:
    """Hidden and delayed members of a ``replSetGetConfig`` reply: they lag by design."""
    hosts = set()
    for member in (config.get("config") or {}).get("members") or ():
        delay = member.get("secondaryDelaySecs", member.get("slaveDelay", 0)) or 0
        if member.get("hidden") is True or float(delay) > 0:
            hosts.add(str(member.get("host")))
    return frozenset(hosts)


class LagSource(Protocol):
    """Anything that says the current replication lag (ms), or None when it cannot."""

    def lag_ms(self, warn: WarnOnce | None = None) -> int | None: ...


class LagProbe:
    """Replication lag of one client's deployment, read at most every ``interval_s``.

    Shared by every lane of a process (:func:`lag_probe_for`) and thread-safe:
    one ``replSetGetStatus`` per interval, whatever the number of lanes. Where
    the lag cannot be read for good (no privilege: code 13; no replica set:
    standalone or mongos), the probe switches itself off and warns once;
    a passing failure (network) only skips that one reading.
    """

    def __init__(
        self,
        client: MongoClient[Any],
        *,
        interval_s: float = LAG_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = weakref.ref(client)
        self._interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._read_at = -math.inf
        self._config_at = -math.inf
        self._excluded: frozenset[str] = frozenset()
        self._lag: int | None = None
        self.disabled: str | None = None
        #: How many times the status was read from the server.
        self.reads = 0

    def lag_ms(self, warn: WarnOnce | None = None) -> int | None:
        """Return the lag of the slowest secondary (cached), or None when unknown or off."""
        with self._lock:
            if self.disabled is not None:
                return None
            if self._clock() - self._read_at < self._interval_s:
                return self._lag
            self._read_at = self._clock()
            self._lag = self._read(warn or _warn_once)
            return self._lag

    def _read(self, warn: WarnOnce) -> int | None:
        client = self._client()
        if client is None:
            self.disabled = "closed"
            return None
        try:
            self._refresh_config(client)
            self.reads += 1
            return replication_lag_ms(client.admin.command("replSetGetStatus"), self._excluded)
        except OperationFailure as exc:
            if self._switch_off(exc, warn):
                return None
            log.debug("replication lag unreadable (code %s); not waiting this time", exc.code)
        except PyMongoError as exc:
            log.debug("replication lag unreadable (%s); not waiting this time", type(exc).__name__)
        return None

    def _refresh_config(self, client: MongoClient[Any]) -> None:
        if self._clock() - self._config_at < CONFIG_INTERVAL_S:
            return
        self._config_at = self._clock()
        # Without the config every secondary counts: the cautious reading.
        with contextlib.suppress(PyMongoError):
            self._excluded = _excluded_members(client.admin.command("replSetGetConfig"))

    def _switch_off(self, exc: OperationFailure, warn: WarnOnce) -> bool:
        if is_unauthorized(exc):
            self.disabled = "unauthorized"
            warn(
                "lag:unauthorized",
                "background migrations cannot read the replication lag (replSetGetStatus "
                "needs the clusterMonitor role); they no longer wait for secondaries",
            )
            return True
        if replication_unavailable(exc):
            self.disabled = "no-replica-set"
            warn(
                "lag:no-replica-set",
                "replication lag cannot be read on this deployment (not a replica set "
                "member); background migrations ignore throttle.max_lag_ms",
            )
            return True
        return False


_probes: dict[int, tuple[weakref.ref[Any], LagProbe]] = {}
_probes_lock = threading.Lock()


def lag_probe_for(client: MongoClient[Any]) -> LagProbe:
    """Return the process's :class:`LagProbe` of ``client`` (by identity), made on first use."""
    with _probes_lock:
        for key in [key for key, (ref, _) in _probes.items() if ref() is None]:
            del _probes[key]
        entry = _probes.get(id(client))
        if entry is not None and entry[0]() is client:
            return entry[1]
        probe = LagProbe(client)
        _probes[id(client)] = (weakref.ref(client), probe)
        return probe


def _adaptive_of(
    job: Job, partition: Mapping[str, Any], namespace: str
) -> AdaptiveController | None:
    """The shared controller of a claimed partition's group, when the spec asks for one."""
    if job.spec.adaptive is None:
        return None
    group = partition.get("group")
    return adaptive_for(
        job.name,
        None if group is None else str(group),
        job.spec.adaptive,
        partition.get("throttle"),
        namespace=namespace,
        start_batch_size=job.spec.batch_size,
    )


# ─── The throttle of one lane ─────────────────────────────────────────────────

#: A user's throttle result is capped to this (the limit of ``pause_ms``).
MAX_USER_PAUSE_MS: Final = 3_600_000


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
    user function that raises or returns something other than a non-negative
    number counts as 0 and is warned about once; it never fails the slice.
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
    warn: WarnOnce | None = None
    collection: str | None = None
    _lagged: bool = field(default=False, init=False, repr=False)

    @classmethod
    def for_job(
        cls,
        job: Job,
        partition: Mapping[str, Any],
        *,
        client: MongoClient[Any] | None,
        warn: WarnOnce | None = None,
        namespace: str = "",
    ) -> Throttle:
        """Build a lane's throttle for one claimed partition of ``job``.

        Wires the spec's ``throttle`` settings, the user's function, the
        shared lag probe of ``client`` (when ``max_lag_ms`` is set) and the
        shared controller of the partition's group (when ``adaptive`` is on;
        the partition's stored ``throttle`` state seeds a new controller).
        """
        spec = job.spec
        lag_on = spec.throttle.max_lag_ms is not None
        return cls(
            migration=job.name,
            pause_ms=spec.throttle.pause_ms,
            user_throttle=job.fns.throttle,
            generation=job.generation,
            partition=str(partition.get("_id", "")),
            batch_size=spec.batch_size,
            max_lag_ms=spec.throttle.max_lag_ms,
            lag_probe=lag_probe_for(client) if lag_on and client is not None else None,
            adaptive=_adaptive_of(job, partition, namespace),
            warn=warn,
            collection=spec.collection,
        )

    def next_batch_size(self) -> int:
        """The size the next batch should read: the controller's, else ``batch_size``."""
        return self.adaptive.batch_size() if self.adaptive is not None else self.batch_size

    def before_batch(self, cancel: CancelToken) -> bool:
        """Wait before the next batch; return True when ``cancel`` fired (stop the lane)."""
        wait_ms = self.pause_ms + self._user_pause_ms()
        if self.adaptive is not None:
            wait_ms += self.adaptive.pause_ms()
        if wait_ms > 0 and cancel.sleep(wait_ms / 1000):
            return True
        if cancel.cancelled:
            return True
        return self._wait_for_lag(cancel)

    def take_lagged(self) -> bool:
        """Whether a wait for a lagging secondary happened since the last call; clears it."""
        lagged, self._lagged = self._lagged, False
        return lagged

    def after_batch(self, latency_ms: float, *, overloaded: bool = False) -> ThrottleChange | None:
        """Feed a written batch to the controller (a lag wait counts as overload)."""
        lagged = self.take_lagged()
        if self.adaptive is None:
            return None
        return self.adaptive.record(latency_ms, overloaded or lagged)

    def after_error(self, error: BaseException, latency_ms: float) -> ThrottleChange | None:
        """Feed a failed batch to the controller when ``error`` is an overload; else nothing."""
        if self.adaptive is None or not is_overload(error):
            return None
        return self.adaptive.record(latency_ms, True)

    def state(self) -> dict[str, int] | None:
        """The controller's state to checkpoint on the partition, or None without one."""
        return self.adaptive.state() if self.adaptive is not None else None

    def _warn(self, key: str, message: str, *args: Any) -> None:
        (self.warn or _warn_once)(key, message, *args)

    def _user_pause_ms(self) -> int:
        if self.user_throttle is None:
            return 0
        ctx = ThrottleContext(
            self.migration, self.generation, self.partition, self.next_batch_size(), self.collection
        )
        try:
            value = self.user_throttle(ctx)
        except Exception as exc:
            self._warn(
                f"throttle-raised:{self.migration}",
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
            self._warn(
                f"throttle-value:{self.migration}",
                "%s: throttle() returned %s, not a non-negative number of ms; ignored",
                self.migration,
                type(value).__name__,
            )
            return 0
        return min(int(value), MAX_USER_PAUSE_MS)

    def _wait_for_lag(self, cancel: CancelToken) -> bool:
        if self.max_lag_ms is None or self.lag_probe is None:
            return False
        delay = LAG_BACKOFF_START_S
        while True:
            lag = self.lag_probe.lag_ms(self._warn)
            if lag is None or lag <= self.max_lag_ms:
                return cancel.cancelled
            self._lagged = True
            log.debug(
                "%s: a secondary lags %d ms (max %d ms); waiting %.2f s",
                self.migration,
                lag,
                self.max_lag_ms,
                delay,
            )
            if cancel.sleep(delay):
                return True
            delay = min(delay * 2, LAG_BACKOFF_MAX_S)
