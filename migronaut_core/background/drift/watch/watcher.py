"""The watcher's handle: one follower thread per watched collection, kept in step with the states.

:func:`start_watch` starts a supervising thread
that reads the migrations every ``refresh_seconds``, starts a
:class:`~migronaut_core.background.drift.watch.follower.Follower` for each
newly watched collection and stops the ones with nothing left to serve.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from pymongo.errors import PyMongoError

from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.drift.watch.edges import watched_collections
from migronaut_core.background.drift.watch.follower import WATCH_BACKOFF, Follower
from migronaut_core.background.drift.watch.settings import WatchSettings
from migronaut_core.background.runtime import Runtime
from migronaut_core.background.store.watch import WatchStore
from migronaut_core.errors import MigronautError
from migronaut_core.scrub import error_text

__all__ = ["Watcher", "start_watch"]

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Watcher:
    """A running drift watcher (see :func:`start_watch`); stop it with :meth:`stop`."""

    rt: Runtime
    store: WatchStore
    settings: WatchSettings
    cancel: CancelToken
    _followers: dict[str, Follower] = field(default_factory=dict)
    _guard: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        """Whether it still watches (False once stopped or its cancel token fired)."""
        thread = self._thread
        return not self.cancel.cancelled and thread is not None and thread.is_alive()

    def status(self) -> list[dict[str, Any]]:
        """What this process does per collection: state, whether it leads, its counters.

        Counters are this process's; the rows (``kit.drift.watch_status``) add up
        every leader's.
        """
        with self._guard:
            followers = sorted(self._followers.values(), key=lambda item: item.collection)
        return [follower.view() for follower in followers]

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every stream, save its position, give up leadership; wait for the threads."""
        self.cancel.cancel("drift watcher stopped")
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        with self._guard:
            followers = list(self._followers.values())
        for follower in followers:
            follower.join(timeout)
            if follower.is_alive():
                log.warning("drift watcher %s did not stop in time", follower.collection)

    def __enter__(self) -> Watcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- supervising -----------------------------------------------------------------------

    def _start(self) -> None:
        self._refresh()
        self._thread = threading.Thread(target=self._supervise, name="migronaut-watch", daemon=True)
        self._thread.start()

    def _supervise(self) -> None:
        failures = 0
        while not self.cancel.sleep(self.settings.refresh_seconds):
            try:
                self._refresh()
                failures = 0
            except (PyMongoError, MigronautError) as error:
                failures += 1
                log.warning("drift watcher: reading the migrations failed (%s)", error_text(error))
                if self.cancel.sleep(WATCH_BACKOFF.seconds(failures)):
                    break

    def _refresh(self) -> None:
        wanted = set(
            watched_collections(self.rt.store.states.list_states(), self.settings.collections)
        )
        with self._guard:
            for name, follower in list(self._followers.items()):
                if not follower.is_alive() and follower.ident is not None:
                    del self._followers[name]
                elif name not in wanted:
                    follower.cancel.cancel("no completed migration to serve")
            started = [name for name in sorted(wanted) if name not in self._followers]
            for name in started:
                self._followers[name] = Follower(
                    self.rt, self.store, self.settings, name, cancel=self.cancel
                )
        for name in started:
            self._followers[name].start()


def start_watch(
    rt: Runtime,
    store: WatchStore,
    settings: WatchSettings,
    *,
    cancel: CancelToken | None = None,
) -> Watcher:
    """Start watching in background threads and return the handle.

    The caller checks :func:`~migronaut_core.background.drift.watch.settings.require_change_streams`
    first, before it writes anything (the kit does, before creating its indexes).
    """
    token = cancel.child() if cancel is not None else CancelToken()
    watcher = Watcher(rt=rt, store=store, settings=settings, cancel=token)
    watcher._start()
    return watcher
