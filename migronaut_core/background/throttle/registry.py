"""What the lanes of one runtime share to pace themselves, and forget when a migration ends.

One :class:`ThrottleRegistry` lives on each
:class:`~migronaut_core.background.runtime.Runtime` (one per kit): every lane of
that kit working the same migration and shard group gets the same
:class:`~.adaptive.AdaptiveController`, and every lane reading through the same
client the same :class:`~.lag.LagProbe`. Nothing here is process-wide, so two
kits never share state, and a finished migration's controllers go with
:meth:`ThrottleRegistry.forget`. The one exception is the server's health
(:mod:`.health`): a fact about the cluster, not the kit's state, read once per
process and cluster (:func:`~.health.shared_health_probe`) unless a probe of
one's own is given (:meth:`ThrottleRegistry.use_health_probe`).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from migronaut_core.background.spec import AdaptiveSettings
from migronaut_core.background.throttle.adaptive import AdaptiveController
from migronaut_core.background.throttle.health import HealthProbe, shared_health_probe
from migronaut_core.background.throttle.lag import LagProbe

if TYPE_CHECKING:
    from pymongo import MongoClient

__all__ = ["ThrottleRegistry"]


class ThrottleRegistry:
    """The shared controllers (by migration and group) and lag probes (by client); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._controllers: dict[tuple[str, str | None], AdaptiveController] = {}
        self._probes: dict[int, tuple[weakref.ref[Any], LagProbe]] = {}
        self._health: HealthProbe | None = None

    def adaptive_for(
        self,
        migration: str,
        group: str | None,
        settings: AdaptiveSettings,
        initial_state: Mapping[str, Any] | None = None,
        *,
        start_batch_size: int | None = None,
    ) -> AdaptiveController:
        """Return the controller of ``(migration, group)``, made on first use.

        ``initial_state`` (the claimed partition's ``throttle``) only seeds a new
        controller. When ``settings`` changed (a repin), the controller is
        replaced by one that starts from the old one's state.
        """
        key = (migration, group)
        with self._lock:
            current = self._controllers.get(key)
            if current is not None and current.settings == settings:
                return current
            seed = current.state() if current is not None else initial_state
            controller = AdaptiveController(settings, seed, start_batch_size=start_batch_size)
            self._controllers[key] = controller
            return controller

    def lag_probe(self, client: MongoClient[Any]) -> LagProbe:
        """Return the :class:`LagProbe` of ``client`` (by identity), made on first use."""
        with self._lock:
            for key in [key for key, (ref, _) in self._probes.items() if ref() is None]:
                del self._probes[key]
            entry = self._probes.get(id(client))
            if entry is not None and entry[0]() is client:
                return entry[1]
            probe = LagProbe(client)
            self._probes[id(client)] = (weakref.ref(client), probe)
            return probe

    def health_probe(self, client: MongoClient[Any]) -> HealthProbe:
        """The health probe lanes of this kit read: the one given, else the process's for
        ``client``'s cluster."""
        with self._lock:
            given = self._health
        return given if given is not None else shared_health_probe(client)

    def use_health_probe(self, probe: HealthProbe | None) -> None:
        """Read the cluster's health through ``probe`` (None: the process's shared one again).

        For tests that inject readings, and for callers with a source of their own.
        """
        with self._lock:
            self._health = probe

    def migrations(self) -> frozenset[str]:
        """The migrations that have a controller here."""
        with self._lock:
            return frozenset(migration for migration, _ in self._controllers)

    def forget(self, migration: str | None = None) -> int:
        """Drop the controllers of ``migration`` (of every one when None); return how many.

        A lane that claims a partition of it afterwards starts from the state
        stored on that partition, as a lane of a new process would.
        """
        with self._lock:
            doomed = [key for key in self._controllers if migration is None or key[0] == migration]
            for key in doomed:
                del self._controllers[key]
            return len(doomed)
