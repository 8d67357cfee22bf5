"""Fire an asset event as soon as a running background migration stalls.

:class:`StalledMigrationTrigger` is a ``BaseEventTrigger`` the DAG factory attaches
through an ``AssetWatcher`` to the asset of migronaut's state collection; the
``migronaut_stalls`` DAG scheduled on it takes the stalled runs over. It awaits
the core's :func:`~migronaut_core.next_stall_signal`, which polls the running
migrations, judges by the rule the heal and the audit use, and notes what it
signalled in MongoDB (so a restarted triggerer neither repeats a signal nor
loses one that never took effect); this trigger only reports.

Events are ``{"status": "stalled", "migrations", "idle_seconds"}``: names and
durations only.
"""

from __future__ import annotations

from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from migronaut_airflow.hooks.migronaut import MigronautHook
from migronaut_airflow.triggers.events import MongoEventTrigger
from migronaut_core import (
    DEFAULT_BACKGROUND_COLLECTION,
    STALL_SECONDS,
    BackgroundCollections,
    next_stall_signal,
    stall_watch_settings,
)


class StalledMigrationTrigger(MongoEventTrigger):
    """Yield one event when running migrations stand still for ``stall_seconds``.

    :param mongo_conn_id: Airflow connection of type ``mongo`` (read through ``MongoHook``).
    :param database: the database of migronaut's state; ``None`` uses the connection's schema.
    :param collection_prefix: prefix of migronaut's background collections.
    :param stall_seconds: how long nothing may move a running migration (no live
        lease, no partition write, no progress, no coordinator step).
    :param poll_seconds: how often the running migrations are read (default a
        tenth of ``stall_seconds``, between 1 and 30).
    """

    appname = "migronaut-airflow-stall-trigger"

    rebuild_fields = (
        "mongo_conn_id",
        "database",
        "collection_prefix",
        "stall_seconds",
        "poll_seconds",
    )

    def __init__(
        self,
        *,
        mongo_conn_id: str = MigronautHook.default_conn_name,
        database: str | None,
        collection_prefix: str = DEFAULT_BACKGROUND_COLLECTION,
        stall_seconds: float = STALL_SECONDS,
        poll_seconds: float | None = None,
    ) -> None:
        super().__init__(
            mongo_conn_id=mongo_conn_id, database=database, collection_prefix=collection_prefix
        )
        self.settings = stall_watch_settings(stall_seconds=stall_seconds, poll_seconds=poll_seconds)
        self.stall_seconds = stall_seconds
        self.poll_seconds = poll_seconds

    async def wait_for_signal(
        self, db: AsyncDatabase[dict[str, Any]], names: BackgroundCollections
    ) -> dict[str, Any]:
        signal = await next_stall_signal(db, names, self.settings)
        return signal.to_payload()

    def describe(self, payload: dict[str, Any] | None = None) -> str:
        if payload is None:
            return "stalled background migrations"
        idle = payload["idle_seconds"]
        return "Stalled: " + ", ".join(f"{name} ({idle[name]:.0f} s)" for name in idle)
