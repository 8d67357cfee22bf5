"""The shared shape of migronaut's ``AssetWatcher`` triggers: connect, await the core, report.

An event trigger runs in the triggerer and must never fail: the scheduler only
learns what it reports. :class:`MongoEventTrigger` opens an ``AsyncMongoClient``
from the Airflow connection, awaits one signal of the core (its subclass says
which), and on any error logs the type and a redacted message and tries again
after a back-off. Each run yields one event and returns; the triggerer starts it
again for the next. Cancelling it (a triggerer restart, the DAG paused) needs no
clean-up beyond its client: the core keeps what it must remember in MongoDB.
"""

from __future__ import annotations

import asyncio
from abc import abstractmethod
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent
from pymongo.asynchronous.database import AsyncDatabase

from migronaut_airflow.triggers.lanes import connect_async, error_message
from migronaut_airflow.triggers.rebuild import RebuiltFromFields
from migronaut_core import BackgroundCollections

#: A failing wait (MongoDB down, a bad stored spec) tries again after this long, doubling.
FIRST_BACKOFF_SECONDS = 1.0
#: ... up to this long.
MAX_BACKOFF_SECONDS = 60.0


class MongoEventTrigger(RebuiltFromFields, BaseEventTrigger):
    """Yield one event when the core's wait (:meth:`wait_for_signal`) returns a payload.

    :param mongo_conn_id: Airflow connection of type ``mongo`` (read through ``MongoHook``).
    :param database: the database of migronaut's state; ``None`` uses the connection's schema.
    :param collection_prefix: prefix of migronaut's background collections.
    """

    #: The client's ``appname`` (shows in the server's logs and ``currentOp``).
    appname = "migronaut-airflow-trigger"

    def __init__(self, *, mongo_conn_id: str, database: str | None, collection_prefix: str) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Airflow leaves it unannotated
        self.mongo_conn_id = mongo_conn_id
        self.database = database
        self.collection_prefix = collection_prefix

    @abstractmethod
    async def wait_for_signal(
        self, db: AsyncDatabase[dict[str, Any]], names: BackgroundCollections
    ) -> dict[str, Any]:
        """Await the core's signal; return the event's payload (names and counts only)."""

    @abstractmethod
    def describe(self, payload: dict[str, Any] | None = None) -> str:
        """What is awaited (no payload) or what fired (a payload), for the log."""

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Wait for the signal (trying again after errors), yield one event, then return."""
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
                    "Waiting for %s failed (%s); trying again in %.0f s",
                    self.describe(),
                    error_message(exc),
                    delay,
                )
                await asyncio.sleep(delay)
        self.log.info("%s", self.describe(payload))
        yield TriggerEvent(payload)  # type: ignore[no-untyped-call]  # Airflow leaves it unannotated

    async def _wait(self) -> dict[str, Any]:
        client = await connect_async(self.mongo_conn_id, self.appname)
        try:
            db = client.get_database(self.database)
            names = BackgroundCollections.from_prefix(self.collection_prefix)
            return await self.wait_for_signal(db, names)
        finally:
            await client.close()
