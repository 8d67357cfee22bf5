"""A cancellation token: what JavaScript's AbortSignal is to the seeds.

Lanes, coordinators and drivers take one; every wait they make goes through
:meth:`CancelToken.sleep`, so cancelling the token wakes them at once.
"""

from __future__ import annotations

import threading
import weakref


class CancelToken:
    """Cancelled once, with a reason; cancelling it cancels its children too."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._children: weakref.WeakSet[CancelToken] = weakref.WeakSet()
        self._lock = threading.Lock()
        self.reason: str | None = None

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self, reason: str = "cancelled") -> None:
        with self._lock:
            if self._event.is_set():
                return
            self.reason = reason
            self._event.set()
            children = list(self._children)
        for child in children:
            child.cancel(reason)

    def sleep(self, seconds: float) -> bool:
        """Wait ``seconds`` or until cancelled; return True when cancelled."""
        return self._event.wait(max(0.0, seconds))

    def child(self) -> CancelToken:
        """A token cancelled with this one, that can also be cancelled alone."""
        child = CancelToken()
        with self._lock:
            self._children.add(child)
            if self._event.is_set():
                child.cancel(self.reason or "cancelled")
        return child
