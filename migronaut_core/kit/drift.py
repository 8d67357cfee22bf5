"""Drift on the kit, ``kit.drift``: the poll (verify) and the live watcher (watch, status).

:class:`Drift` is the namespace of :class:`~migronaut_core.kit.Migronaut`
that finds old-shape documents reappearing after a background migration
completed, by polling (:mod:`~migronaut_core.background.drift.verify`) or by
change streams (:mod:`~migronaut_core.background.drift.watch`).
"""

from __future__ import annotations

from typing import overload

from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.drift import verify as drift
from migronaut_core.background.drift import watch as watching
from migronaut_core.background.drift.watch import Watcher
from migronaut_core.changelog import Actor
from migronaut_core.kit.base import KitBase
from migronaut_core.kit.results import VerifyReport, WatchStatus


class Drift:
    """Drift, ``kit.drift``: verify by polling, watch with change streams, the watchers' status.

    :param kit: the kit whose connection and wiring every operation uses.
    """

    __slots__ = ("_kit",)

    def __init__(self, kit: KitBase) -> None:
        self._kit = kit

    def verify(
        self,
        *,
        on_drift: str | None = None,
        collections: list[str] | None = None,
        requested_by: str | None = None,
        reason: str | None = None,
    ) -> VerifyReport:
        """Find old-shape documents that reappeared after completion; reopen or report.

        :param on_drift: ``reopen`` or ``report``; default: ``background_on_drift``.
            In drift mode ``stream`` (``background_drift``) the poll is the safety
            net: collections whose watcher is streaming and fresh are skipped. In
            ``both`` it polls every collection, streamed or not.
        :returns: how many were checked and skipped, and those that drifted.
        """
        actor = Actor(requested_by=requested_by, reason=reason) if requested_by or reason else None
        chosen = self._kit.config.background_on_drift if on_drift is None else on_drift
        checked = drift.check_on_drift(chosen)
        self._kit._ready()
        streamed: set[str] = set()
        if self._kit.config.background_drift == "stream":
            streamed = set(self._kit._watch_store().streaming_collections())
        report = drift.verify(
            self._kit._runtime,
            on_drift=checked,
            collections=collections,
            actor=actor,
            streamed=streamed,
        )
        return VerifyReport.from_row(report)

    def watch(
        self,
        *,
        collections: list[str] | None = None,
        on_drift: str | None = None,
        cancel: CancelToken | None = None,
        batch_size: int = 100,
        batch_ms: int = 200,
        refresh_seconds: float = 10.0,
        leader_retry_seconds: float | None = None,
    ) -> Watcher:
        """Start the live drift watcher in background threads and return its handle.

        One change stream per collection with a completed forward background
        migration (or per one of ``collections``), led by one process at a time
        across all processes (the ``watch:<collection>`` lock; the others stand
        by and take over when the leader dies). Old-shape writes are upgraded
        moments after they land, through the lanes' write path; at-least-once
        (the resume token is saved after each batch). ``on_drift``: what to do
        with old-shape documents it cannot upgrade itself — those found by the
        probe of a fresh start, or whose upgrade failed: ``reopen`` the
        migration or only ``report`` them (a ``background:drift`` event);
        default: ``background_on_drift``.

        :returns: a :class:`~migronaut_core.background.drift.watch.Watcher` with
            ``running``, ``status()`` and ``stop()``; ``cancel`` stops it too.
        :raises ConfigInvalidError: a bad option, or a standalone server (no
            change streams: keep drift mode ``poll``).
        """
        settings = watching.watch_settings(
            ttl_seconds=self._kit.config.lock_ttl_seconds,
            collections=collections,
            on_drift=self._kit.config.background_on_drift if on_drift is None else on_drift,
            batch_size=batch_size,
            batch_ms=batch_ms,
            refresh_seconds=refresh_seconds,
            leader_retry_seconds=leader_retry_seconds,
        )
        watching.require_change_streams(self._kit._runtime)
        self._kit._ready()
        return watching.start_watch(
            self._kit._runtime, self._kit._watch_store(), settings, cancel=cancel
        )

    @overload
    def watch_status(self, collection: None = None) -> list[WatchStatus]: ...

    @overload
    def watch_status(self, collection: str) -> WatchStatus | None: ...

    def watch_status(self, collection: str | None = None) -> list[WatchStatus] | WatchStatus | None:
        """What the drift watchers recorded: state, leader, counters, last event.

        One per watched collection (or the one asked for, None when it has
        none); never the resume token.
        """
        rows = [
            WatchStatus.from_document(row) for row in self._kit._watch_store().statuses(collection)
        ]
        if collection is not None:
            return rows[0] if rows else None
        return rows
