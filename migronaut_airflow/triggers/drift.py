"""Fire an asset event when a migrated collection drifts back to an old shape.

:class:`CollectionDriftTrigger` is a ``BaseEventTrigger``: the DAG factory attaches
it through an ``AssetWatcher`` to the collection's asset, and the triggerer runs
it. It connects with an ``AsyncMongoClient`` and awaits the core's
:func:`~migronaut_core.next_drift_signal` — the core picks the migrations, reads
the change stream and keeps its position in MongoDB (so a restarted triggerer
resumes after the last position saved, and a signal that never became a DAG
run fires again); this trigger only reports. Each run yields one event and
returns; the triggerer starts it again for the next.

Events are ``{"status": "drift", "collection", "migrations", "events", "source"}``:
names and counts, never document values, ``_id``\\ s or the resume token.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.providers.mongo.hooks.mongo import MongoHook
from airflow.triggers.base import BaseEventTrigger, TriggerEvent
from asgiref.sync import sync_to_async
from pymongo import AsyncMongoClient

from migronaut_airflow.hooks.migronaut import MigronautHook
from migronaut_airflow.triggers.lanes import error_message, mongo_client_options
from migronaut_core import drift_event_settings, next_drift_signal
from migronaut_core.config import DEFAULT_BACKGROUND_COLLECTION, BackgroundCollections

#: A failing wait (MongoDB down, a bad stored spec) tries again after this long, doubling.
FIRST_BACKOFF_SECONDS = 1.0
#: ... up to this long.
MAX_BACKOFF_SECONDS = 60.0


class CollectionDriftTrigger(BaseEventTrigger):
    """Yield one event when old-shape documents of a completed migration land in ``collection``.

    It never fails: an error is logged (its type and a redacted message) and the
    wait starts again after a back-off, from the saved position. Cancelling it (a
    triggerer restart, the DAG paused) needs no clean-up beyond its client.

    :param mongo_conn_id: Airflow connection of type ``mongo`` (read through ``MongoHook``).
    :param database: the database of the collection and of migronaut's state;
        ``None`` uses the connection's schema.
    :param collection: the migrated collection to watch.
    :param collection_prefix: prefix of migronaut's background collections.
    :param refire_after_seconds: how long a fired event has to take effect (its DAG
        run reopening the migration) before old-shape documents still there fire again.
    :param refresh_seconds: how often the migrations are read again.
    """

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
        super().__init__()  # type: ignore[no-untyped-call]  # Airflow leaves it unannotated
        self.settings = drift_event_settings(
            refire_after_seconds=refire_after_seconds, refresh_seconds=refresh_seconds
        )
        self.mongo_conn_id = mongo_conn_id
        self.database = database
        self.collection = collection
        self.collection_prefix = collection_prefix
        self.refire_after_seconds = refire_after_seconds
        self.refresh_seconds = refresh_seconds

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Return the classpath and the keyword arguments that rebuild this trigger."""
        return (
            f"{self.__class__.__module__}.{self.__class__.__qualname__}",
            {
                "mongo_conn_id": self.mongo_conn_id,
                "database": self.database,
                "collection": self.collection,
                "collection_prefix": self.collection_prefix,
                "refire_after_seconds": self.refire_after_seconds,
                "refresh_seconds": self.refresh_seconds,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Wait for drift (trying again after errors), yield one event, then return."""
        failures = 0
        while True:
            try:
                payload = await self._wait()
                break
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                delay = min(MAX_BACKOFF_SECONDS, FIRST_BACKOFF_SECONDS * 2 ** (failures - 1))
                self.log.warning(
                    "Waiting for drift in %s failed (%s); trying again in %.0f s",
                    self.collection,
                    error_message(exc),
                    delay,
                )
                await asyncio.sleep(delay)
        self.log.info(
            "Drift in %s: %s (%d event(s), %s)",
            self.collection,
            ", ".join(payload["migrations"]),
            payload["events"],
            payload["source"],
        )
        yield TriggerEvent(payload)  # type: ignore[no-untyped-call]  # Airflow leaves it unannotated

    async def _wait(self) -> dict[str, Any]:
        # MongoHook looks its connection up in __init__, synchronously: build it in a
        # worker thread so the triggerer's event loop never blocks on the lookup.
        hook = await sync_to_async(MongoHook)(mongo_conn_id=self.mongo_conn_id)
        options = mongo_client_options(hook)
        options.setdefault("appname", "migronaut-airflow-drift-trigger")
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(hook.uri, **options)
        try:
            db = client.get_database(self.database)
            names = BackgroundCollections.from_prefix(self.collection_prefix)
            signal = await next_drift_signal(db, names, self.collection, self.settings)
            return signal.to_payload()
        finally:
            await client.close()
