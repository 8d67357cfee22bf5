"""Events the engine emits, for listeners (progress bars, metrics, the Airflow UI).

Names follow the seeds (:data:`EVENTS`; docs/background.md lists each payload):
``background:registered`` (``up``, and ``down``: a revert or a withdrawal, with
``waits_for``), ``background:waiting`` (a run stopped before a migration that
waits), ``background:partitioned``, ``background:batch`` (with ``batch_size``),
``background:slice:start``, ``background:slice:end``, ``background:pass``,
``background:completed``, ``background:failed``, ``background:control``,
``background:lease:lost``, ``background:unblocked``, ``background:throttle``,
``background:watch``, ``background:drift``. Payloads carry names, counts and ids
of runs and partitions — never document values or ``_id``s. A listener that
raises is logged and otherwise ignored: observers never break a migration.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

Listener = Callable[[str, dict[str, Any]], None]

EVENTS = frozenset(
    {
        "background:registered",
        "background:partitioned",
        "background:batch",
        "background:slice:start",
        "background:slice:end",
        "background:pass",
        "background:completed",
        "background:failed",
        "background:control",
        "background:lease:lost",
        "background:unblocked",
        "background:throttle",
        "background:waiting",
        "background:watch",
        "background:drift",
    }
)


class Events:
    """A small, thread-safe publish/subscribe hub."""

    def __init__(self) -> None:
        self._listeners: dict[str, list[Listener]] = {}
        self._lock = threading.Lock()

    def on(self, event: str, listener: Listener) -> Callable[[], None]:
        """Subscribe to ``event`` (or ``"*"`` for all); returns an unsubscribe function."""
        with self._lock:
            self._listeners.setdefault(event, []).append(listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners.get(event, []):
                    self._listeners[event].remove(listener)

        return unsubscribe

    def emit(self, event: str, payload: dict[str, Any]) -> None:
        """Call every listener of ``event`` and of ``*``; one that raises is logged, not raised."""
        with self._lock:
            listeners = [*self._listeners.get(event, ()), *self._listeners.get("*", ())]
        for listener in listeners:
            try:
                listener(event, payload)
            except Exception:
                log.exception("a listener of %s raised; ignored", event)
