"""MongoDB's own health, read for the lanes: flow control, majority lag, cache, tickets, oplog.

A background migration is the least urgent writer on a cluster, so its lanes
watch what the server says about itself and give way first (the limits are the
spec's ``health``, :class:`~migronaut_core.background.spec.HealthSettings`):

- ``serverStatus`` (one command): ``flowControl.isLagged`` / ``targetRateLimit``,
  the WiredTiger cache's dirty and used bytes against its size, the write
  tickets available (``queues.execution`` on newer servers, else
  ``wiredTiger.concurrentTransactions``) and ``globalLock.currentQueue.total``;
- ``replSetGetStatus``: how far the majority commit point is behind the last
  applied write (``optimes.lastAppliedWallTime`` minus ``lastCommittedWallTime``);
- ``local.oplog.rs``: its first and last entries (the window they span) and
  ``$collStats`` (how full it is: a window only limits once the oplog is full,
  before that it is the set's age, not its capacity).

Every lane of a process reading the same cluster shares one
:class:`ServerHealthProbe` (:func:`shared_health_probe`, keyed by the client's
seeds and replica set name, never its URI) that reads at most once per
interval, so N lanes cost one read a second. A source the user may not read
(no ``clusterMonitor``) or that the deployment lacks (a standalone) is reported
once and skipped for good; a passing failure skips one reading. Nothing read
here is a document value.

Tests inject readings through :class:`HealthProbe` (anything with ``read()``).
"""

from __future__ import annotations

import logging
import math
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

import pymongo
from bson.timestamp import Timestamp
from pymongo.errors import OperationFailure, PyMongoError

from migronaut_core.background.spec import (
    HEALTH_SENSE,
    HealthLimit,
    HealthSettings,
    HealthSignal,
)
from migronaut_core.background.warn_once import Warn, WarnOnce
from migronaut_core.clock import aware, monotonic
from migronaut_core.json_shape import to_json_dict
from migronaut_core.server_errors import is_unauthorized, replication_unavailable

if TYPE_CHECKING:
    from pymongo import MongoClient

__all__ = [
    "HEALTH_INTERVAL_S",
    "OPLOG_FULL_FRACTION",
    "HealthBreach",
    "HealthProbe",
    "HealthReading",
    "HealthSource",
    "ServerHealthProbe",
    "breaches",
    "first_breach",
    "oplog_headroom_key",
    "oplog_headroom_s",
    "shared_health_probe",
]

log = logging.getLogger(__name__)

#: The server's health is read at most this often per process and cluster.
HEALTH_INTERVAL_S: Final = 1.0
#: The oplog changes slowly and its reads cost most (two scans' ends and ``$collStats``).
OPLOG_INTERVAL_S: Final = 10.0
#: One source's read gives up after this long (server selection included): during a
#: failover the lanes wait for their own writes, never for a health reading.
READ_TIMEOUT_S: Final = 2.0
#: An oplog at least this full has wrapped (or soon will): its window is its capacity.
OPLOG_FULL_FRACTION: Final = 0.9
#: The oplog headroom warning fires this long (or a tenth of the window, if more)
#: before a hold outlasts the window.
OPLOG_MARGIN_S: Final = 300.0

#: Where a reading comes from; each is skipped on its own when it cannot be read.
HealthSource = Literal["server_status", "replication", "oplog"]
Level = Literal["soft", "hard"]
#: What a lane may hold on: a health signal, or the operator's target-wide ``brake``.
HoldSignal = HealthSignal | Literal["brake"]

#: ``serverStatus`` sections a reading does not need (they make it several times slower).
_TRIMMED: Final = {
    "repl": 0,
    "metrics": 0,
    "locks": 0,
    "tcmalloc": 0,
    "opLatencies": 0,
    "network": 0,
    "transactions": 0,
    "electionMetrics": 0,
}


@dataclass(frozen=True, slots=True)
class HealthReading:
    """What the server said about itself; ``None``: not read (refused, absent or failed).

    Fractions are within ``[0, 1]`` (``oplog_used_fraction`` may pass 1 with
    ``oplogMinRetentionHours``), lag and window non-negative.
    """

    flow_control_lagged: bool | None = None
    flow_control_target_rate: int | None = None
    majority_lag_ms: int | None = None
    cache_dirty_fraction: float | None = None
    cache_used_fraction: float | None = None
    write_tickets_available_fraction: float | None = None
    queued_operations: int | None = None
    oplog_window_seconds: float | None = None
    oplog_used_fraction: float | None = None

    @property
    def oplog_capacity_seconds(self) -> float | None:
        """The oplog window once the oplog is full (its capacity at the current write rate).

        ``None`` while it is filling: the window then spans the set's age, and a
        hold or a change-stream resume is not limited by it.
        """
        used = self.oplog_used_fraction
        if used is None or used < OPLOG_FULL_FRACTION:
            return None
        return self.oplog_window_seconds

    def value_of(self, signal: HealthSignal) -> float | bool | None:
        """The reading a signal's limits are judged on (see ``HealthSettings``)."""
        return self.signals()[signal]

    def signals(self) -> dict[str, float | bool | None]:
        """Every signal's reading, as its limits judge it (``None``: not read)."""
        return {
            "flow_control": self.flow_control_lagged,
            "majority_lag_ms": self.majority_lag_ms,
            "cache_dirty": self.cache_dirty_fraction,
            "cache_used": self.cache_used_fraction,
            "write_tickets": self.write_tickets_available_fraction,
            "queued_operations": self.queued_operations,
            "oplog_window_s": self.oplog_capacity_seconds,
        }

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


@dataclass(frozen=True, slots=True)
class HealthBreach:
    """A signal past one of its limits: which, how far (``reading``) and the ``limit``.

    Fractions are rounded to 4 places and seconds to whole ones, so a status or
    an event shows what mattered.
    """

    signal: HoldSignal
    level: Level
    reading: float | bool
    limit: float | bool

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


class HealthProbe(Protocol):
    """Anything that reads the cluster's health (tests pass their own readings)."""

    def read(self, warn: Warn | None = None) -> HealthReading: ...


def breaches(reading: HealthReading, settings: HealthSettings, level: Level) -> list[HealthBreach]:
    """Every signal of ``reading`` past its ``level`` limit, in the settings' order."""
    found: list[HealthBreach] = []
    for signal, limit in settings.limits().items():
        bound = _bound(limit, level)
        value = reading.value_of(signal)
        if bound is None or value is None or not _breached(signal, value, bound):
            continue
        found.append(HealthBreach(signal, level, _shown(value), bound))
    return found


def first_breach(
    reading: HealthReading, settings: HealthSettings, level: Level
) -> HealthBreach | None:
    """The first signal past its ``level`` limit (the one a hold names), or None."""
    found = breaches(reading, settings, level)
    return found[0] if found else None


def oplog_headroom_s(reading: HealthReading) -> float | None:
    """How long a hold may last before a change stream's resume point may fall off the oplog.

    The full oplog's window less a margin (:data:`OPLOG_MARGIN_S` or a tenth of
    the window, the larger); None while the oplog is not full or not read.
    """
    window = reading.oplog_capacity_seconds
    if window is None:
        return None
    return max(0.0, window - max(OPLOG_MARGIN_S, window / 10))


def oplog_headroom_key(migration: str) -> str:
    """The warn-once key of a hold on ``migration`` outlasting the oplog's window."""
    return f"health:oplog-headroom:{migration}"


def _bound(limit: HealthLimit, level: Level) -> float | bool | None:
    bound = limit.soft if level == "soft" else limit.hard
    return None if bound is False else bound


def _breached(signal: HealthSignal, value: float | bool, bound: float | bool) -> bool:
    sense = HEALTH_SENSE[signal]
    if sense == "flag":
        return bool(value) and bound is True
    if isinstance(value, bool) or isinstance(bound, bool):
        return False
    return value > bound if sense == "above" else value < bound


def _shown(value: float | bool) -> float | bool:
    if isinstance(value, int):  # a bool is one too
        return value
    return round(value, 4) if value < 10 else round(value)


class ServerHealthProbe:
    """One cluster's health, read through ``client`` at most every ``interval_s``; thread-safe.

    Shared by every lane of a process reading the cluster
    (:func:`shared_health_probe`). A source refused for a missing privilege
    (``Unauthorized``) or absent from the deployment is warned about once
    (through the caller's ``warn``, else the probe's own) and never read again;
    a passing failure (network, a stepdown) leaves that source's readings out
    once.
    """

    def __init__(
        self,
        client: MongoClient[Any],
        *,
        interval_s: float = HEALTH_INTERVAL_S,
        oplog_interval_s: float = OPLOG_INTERVAL_S,
        clock: Callable[[], float] = monotonic,
    ) -> None:
        self._client = weakref.ref(client)
        self._interval_s = interval_s
        self._oplog_interval_s = oplog_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._read_at = -math.inf
        self._oplog_at = -math.inf
        self._reading = HealthReading()
        self._oplog: dict[str, Any] = {}
        self._warn = WarnOnce(log)
        #: Sources switched off for good, and why (``unauthorized``, ``absent``).
        self.skipped: dict[HealthSource, str] = {}
        #: How many times the server was read (one per interval, whatever the lanes).
        self.reads = 0

    def bound_to(self, client: MongoClient[Any]) -> bool:
        """Whether this probe still reads through ``client`` (it may outlive an older one)."""
        return self._client() is client

    def rebind(self, client: MongoClient[Any]) -> None:
        """Read through ``client`` from now on (the one it used may have been closed)."""
        with self._lock:
            self._client = weakref.ref(client)

    def read(self, warn: Warn | None = None) -> HealthReading:
        """The latest reading, read again when older than the interval."""
        with self._lock:
            now = self._clock()
            if now - self._read_at < self._interval_s:
                return self._reading
            self._read_at = now
            client = self._client()
            if client is None:
                return HealthReading()
            self.reads += 1
            say = warn or self._warn
            fields: dict[str, Any] = {}
            fields.update(self._source(say, "server_status", lambda: _server_status(client)))
            fields.update(self._source(say, "replication", lambda: _replication(client)))
            if now - self._oplog_at >= self._oplog_interval_s:
                self._oplog_at = now
                self._oplog = self._source(say, "oplog", lambda: _oplog(client))
            fields.update(self._oplog)
            self._reading = HealthReading(**fields)
            return self._reading

    def _source(
        self, warn: Warn, source: HealthSource, read: Callable[[], dict[str, Any]]
    ) -> dict[str, Any]:
        if source in self.skipped:
            return {}
        try:
            with pymongo.timeout(READ_TIMEOUT_S):
                return read()
        except OperationFailure as exc:
            if is_unauthorized(exc):
                self._skip(warn, source, "unauthorized")
            elif replication_unavailable(exc):
                self._skip(warn, source, "absent")
            else:
                log.debug("health source %s unreadable (code %s); skipped once", source, exc.code)
        except PyMongoError as exc:
            log.debug("health source %s unreadable (%s); skipped once", source, type(exc).__name__)
        return {}

    def _skip(self, warn: Warn, source: HealthSource, reason: str) -> None:
        self.skipped[source] = reason
        if reason == "unauthorized":
            warn(
                f"health:unauthorized:{source}",
                "background migrations cannot read MongoDB's %s (it needs the clusterMonitor "
                "role); the health signals it gives are skipped",
                _SOURCE_NAMES[source],
            )
        else:
            warn(
                f"health:absent:{source}",
                "this deployment has no %s (not a replica set member); the health signals it "
                "gives are skipped",
                _SOURCE_NAMES[source],
            )


_SOURCE_NAMES: Final[Mapping[HealthSource, str]] = {
    "server_status": "serverStatus",
    "replication": "replSetGetStatus",
    "oplog": "oplog (local.oplog.rs)",
}


def _server_status(client: MongoClient[Any]) -> dict[str, Any]:
    status = client.admin.command({"serverStatus": 1, **_TRIMMED})
    fields: dict[str, Any] = {}
    flow = status.get("flowControl")
    if isinstance(flow, Mapping) and flow.get("enabled", True):
        lagged = flow.get("isLagged")
        fields["flow_control_lagged"] = lagged if isinstance(lagged, bool) else None
        fields["flow_control_target_rate"] = _int(flow.get("targetRateLimit"))
    wired = status.get("wiredTiger")
    cache = wired.get("cache") if isinstance(wired, Mapping) else None
    if isinstance(cache, Mapping):
        size = _number(cache.get("maximum bytes configured"))
        fields["cache_dirty_fraction"] = _fraction(
            cache.get("tracked dirty bytes in the cache"), size
        )
        fields["cache_used_fraction"] = _fraction(cache.get("bytes currently in the cache"), size)
    write = _write_tickets(status)
    if write is not None:
        fields["write_tickets_available_fraction"] = _fraction(
            write.get("available"), _number(write.get("totalTickets"))
        )
    queue = (status.get("globalLock") or {}).get("currentQueue")
    if isinstance(queue, Mapping):
        fields["queued_operations"] = _int(queue.get("total"))
    return fields


def _write_tickets(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The write tickets: ``queues.execution`` (7.0 on), else
    ``wiredTiger.concurrentTransactions``."""
    for outer, inner in (("queues", "execution"), ("wiredTiger", "concurrentTransactions")):
        section = (status.get(outer) or {}).get(inner)
        write = section.get("write") if isinstance(section, Mapping) else None
        if isinstance(write, Mapping) and _number(write.get("totalTickets")):
            return write
    return None


def _replication(client: MongoClient[Any]) -> dict[str, Any]:
    optimes = client.admin.command("replSetGetStatus").get("optimes") or {}
    applied = _utc(optimes.get("lastAppliedWallTime"))
    committed = _utc(optimes.get("lastCommittedWallTime"))
    if applied is None or committed is None:
        return {}
    return {"majority_lag_ms": max(0, int((applied - committed).total_seconds() * 1000))}


def _oplog(client: MongoClient[Any]) -> dict[str, Any]:
    oplog = client.local["oplog.rs"]
    projection = {"_id": 0, "ts": 1, "wall": 1}
    first = oplog.find_one({}, projection, sort=[("$natural", 1)])
    last = oplog.find_one({}, projection, sort=[("$natural", -1)])
    if first is None or last is None:
        return {}  # a standalone has no oplog
    fields: dict[str, Any] = {}
    start, end = _entry_time(first), _entry_time(last)
    if start is not None and end is not None:
        fields["oplog_window_seconds"] = max(0.0, (end - start).total_seconds())
    stats = next(
        oplog.aggregate(
            [
                {"$collStats": {"storageStats": {}}},
                {"$project": {"size": "$storageStats.size", "max": "$storageStats.maxSize"}},
            ]
        ),
        None,
    )
    if stats is not None:
        size, most = _number(stats.get("size")), _number(stats.get("max"))
        if size is not None and most:
            fields["oplog_used_fraction"] = size / most
    return fields


def _entry_time(entry: Mapping[str, Any]) -> datetime | None:
    wall = _utc(entry.get("wall"))
    if wall is not None:
        return wall
    ts = entry.get("ts")
    return datetime.fromtimestamp(ts.time, UTC) if isinstance(ts, Timestamp) else None


def _utc(value: Any) -> datetime | None:
    if not isinstance(value, datetime):
        return None
    return aware(value)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _int(value: Any) -> int | None:
    number = _number(value)
    return None if number is None else int(number)


def _fraction(part: Any, whole: float | None) -> float | None:
    value = _number(part)
    if value is None or not whole:
        return None
    return min(1.0, max(0.0, value / whole))


class _SharedProbes:
    """The process's probes, one per cluster (by the client's seeds and replica set name)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._probes: dict[Any, ServerHealthProbe] = {}

    def probe(self, client: MongoClient[Any]) -> ServerHealthProbe:
        key = client.eq_props()
        with self._lock:
            probe = self._probes.get(key)
            if probe is None:
                probe = self._probes[key] = ServerHealthProbe(client)
            elif not probe.bound_to(client):
                # The latest asker: an earlier client of the cluster may be closed by now.
                probe.rebind(client)
            return probe


_SHARED: Final = _SharedProbes()


def shared_health_probe(client: MongoClient[Any]) -> ServerHealthProbe:
    """The process's :class:`ServerHealthProbe` of ``client``'s cluster, made on first use.

    Two clients of the same cluster (same seeds and replica set name, whatever
    their credentials) share one probe, which reads through the latest client
    that asked for it (an earlier one may have been closed since).
    """
    return _SHARED.probe(client)
