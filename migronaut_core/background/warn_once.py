"""Warnings said once: each thing worth warning about has a key, logged the first time only.

The runtime keeps one :class:`WarnOnce` per kit (``rt.warn_once``); the engine's
parts accept any :class:`Warn` callable, so a test can pass its own.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["Warn", "WarnOnce"]


class Warn(Protocol):
    """Log ``message % args`` as a warning unless ``key`` was already warned about."""

    def __call__(self, key: str, message: str, *args: Any) -> None: ...


class WarnOnce:
    """A :class:`Warn` that remembers its keys; thread-safe.

    :param logger: where the warnings go (default: the background engine's logger).
    """

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self._log = logger or logging.getLogger("migronaut_core.background")
        self._said: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, key: str, message: str, *args: Any) -> None:
        with self._lock:
            if key in self._said:
                return
            self._said.add(key)
        self._log.warning(message, *args)

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` was warned about (and not forgotten since)."""
        with self._lock:
            return key in self._said

    def forget(self, chosen: Callable[[str], bool]) -> None:
        """Warn again about the keys ``chosen`` says yes to."""
        with self._lock:
            self._said = {key for key in self._said if not chosen(key)}
