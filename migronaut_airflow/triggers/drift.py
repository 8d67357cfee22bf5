"""Fire an asset event when a migrated collection drifts back to an old shape.

:class:`CollectionDriftTrigger` is a ``BaseEventTrigger``: the DAG factory attaches
it through an ``AssetWatcher`` to the collection's asset, and the triggerer runs
it. It awaits the core's :func:`~migronaut_core.next_drift_signal` — the core
picks the migrations, reads the change stream and keeps its position in MongoDB
(so a restarted triggerer resumes after the last position saved, and a signal
that never became a DAG run fires again); this trigger only reports (see
:class:`~migronaut_airflow.triggers.events.MongoEventTrigger`).

Events are ``{"status": "drift", "collection", "migrations", "events", "source"}``:
names and counts, never document values, ``_id``\\ s or the resume token.
"""

from __future__ import annotations

from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from migronaut_airflow.hooks.migronaut import MigronautHook
from migronaut_airflow.triggers.events import MongoEventTrigger
from migronaut_core import (
    DEFAULT_BACKGROUND_COLLECTION,
    BackgroundCollections,
    drift_event_settings,
    next_drift_signal,
)


class CollectionDriftTrigger(MongoEventTrigger):
    """Yield one event when old-shape documents of a completed migration land in ``collection``.

    :param mongo_conn_id: Airflow connection of type ``mongo`` (read through ``MongoHook``).
    :param database: the database of the collection and of migronaut's state;
        ``None`` uses the connection's schema.
    :param collection: the migrated collection to watch.
    :param collection_prefix: prefix of migronaut's background collections.
    :param refire_after_seconds: how long a fired event has to take effect (its DAG
        run reopening the migration) before old-shape documents still there fire again.
    :param refresh_seconds: how often the migrations are read again.
    """

    appname = "migronaut-airflow-drift-trigger"

    rebuild_fields = (
        "mongo_conn_id",
        "database",
        "collection",
        "collection_prefix",
        "refire_after_seconds",
        "refresh_seconds",
    )

    def __init__(
        self,
        *,
        mongo_conn_id: str = MigronautHook.default_conn_name,
        database: str | None,
        collection: str,
        collection_prefix: str = DEFAULT_BACKGROUND_COLLECTION,
        refire_after_seconds: float = 300.0,
        refresh_seconds: float = 10.0,
    ) -> None:
        super().__init__(
            mongo_conn_id=mongo_conn_id, database=database, collection_prefix=collection_prefix
        )
        self.settings = drift_event_settings(
            refire_after_seconds=refire_after_seconds, refresh_seconds=refresh_seconds
        )
        self.collection = collection
        self.refire_after_seconds = refire_after_seconds
        self.refresh_seconds = refresh_seconds

    async def wait_for_signal(
        self, db: AsyncDatabase[dict[str, Any]], names: BackgroundCollections
    ) -> dict[str, Any]:
        signal = await next_drift_signal(db, names, self.collection, self.settings)
        return signal.to_payload()

    def describe(self, payload: dict[str, Any] | None = None) -> str:
        if payload is None:
            return f"drift in {self.collection}"
        return (
            f"Drift in {self.collection}: {', '.join(payload['migrations'])} "
            f"({payload['events']} event(s), {payload['source']})"
        )
