"""Replication lag: how far the slowest counted secondary is behind the primary.

With ``throttle.max_lag_ms`` a lane waits while a secondary lags further than
that. :class:`LagProbe` reads ``replSetGetStatus`` at most once a second for
all the lanes that share it, leaves hidden and delayed members out, and turns
itself off (warning once) where the lag cannot be read at all.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import weakref
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, Protocol

from pymongo.errors import OperationFailure, PyMongoError

from migronaut_core.background.warn_once import Warn, WarnOnce
from migronaut_core.clock import monotonic
from migronaut_core.server_errors import is_unauthorized, replication_unavailable

if TYPE_CHECKING:
    from pymongo import MongoClient

__all__ = ["LagProbe", "LagSource", "replication_lag_ms"]

log = logging.getLogger(__name__)

#: The replica set status is read at most this often per client.
LAG_INTERVAL_S: Final = 1.0
#: The replica set config (hidden and delayed members) is read at most this often.
CONFIG_INTERVAL_S: Final = 60.0

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

    def lag_ms(self, warn: Warn | None = None) -> int | None: ...


class LagProbe:
    """Replication lag of one client's deployment, read at most every ``interval_s``.

    Shared by every lane of a runtime (see
    :meth:`~migronaut_core.background.throttle.registry.ThrottleRegistry.lag_probe`)
    and thread-safe: one ``replSetGetStatus`` per interval, whatever the number of
    lanes. Where the lag cannot be read for good (no privilege; no replica set:
    standalone or mongos), the probe switches itself off and warns once (through
    the caller's ``warn``, else its own); a passing failure (network) only skips
    that one reading.
    """

    def __init__(
        self,
        client: MongoClient[Any],
        *,
        interval_s: float = LAG_INTERVAL_S,
        clock: Callable[[], float] = monotonic,
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
        self._warn = WarnOnce(log)
        #: How many times the status was read from the server.
        self.reads = 0

    def lag_ms(self, warn: Warn | None = None) -> int | None:
        """Return the lag of the slowest secondary (cached), or None when unknown or off."""
        with self._lock:
            if self.disabled is not None:
                return None
            if self._clock() - self._read_at < self._interval_s:
                return self._lag
            self._read_at = self._clock()
            self._lag = self._read(warn or self._warn)
            return self._lag

    def _read(self, warn: Warn) -> int | None:
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

    def _switch_off(self, exc: OperationFailure, warn: Warn) -> bool:
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
