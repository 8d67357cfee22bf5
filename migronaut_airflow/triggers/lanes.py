"""Wait, in the triggerer, for the lanes of one background migration pass to stop.

:class:`BackgroundLanesTrigger` polls MongoDB with an ``AsyncMongoClient`` and fires
exactly one event when waiting is over, for one of the reasons of
:data:`~migronaut_core.LANE_WAIT_REASONS` (the core judges: this
trigger only reads snapshots through
:func:`~migronaut_core.background.store.lanes.read_lanes_async` and reports).

Success events are ``{"status": "success", "reason", "migration"}`` (plus
``migration_status`` for ``left-running``); a failure is one
``{"status": "error", "message", "migration"}`` whose message names the error type
and never holds document values.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.providers.mongo.hooks.mongo import MongoHook
from airflow.triggers.base import BaseTrigger, TriggerEvent
from asgiref.sync import sync_to_async
from pymongo import AsyncMongoClient

from migronaut_airflow.hooks.migronaut import MigronautHook, mongo_conn_id_from
from migronaut_airflow.triggers.rebuild import RebuiltFromFields
from migronaut_core import (
    DEFAULT_BACKGROUND_COLLECTION,
    BackgroundCollections,
    LanesWatch,
    read_lanes_async,
    redact_uri,
)

#: Longest exception text an error event carries.
MAX_MESSAGE_CHARS = 300


def error_message(exc: BaseException) -> str:
    """``Type: text`` of an exception, shortened, with any URI credentials redacted."""
    text = redact_uri(str(exc)).strip()
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def mongo_client_options(hook: MongoHook) -> dict[str, Any]:
    """The client keyword options ``MongoHook.get_conn`` would use (extras, TLS leniency)."""
    options = dict(hook.extras)
    if hook.allow_insecure:
        options["tlsAllowInvalidCertificates"] = True
    return options


async def connect_async(
    mongo_conn_id: str, appname: str = "migronaut-airflow-trigger"
) -> AsyncMongoClient[dict[str, Any]]:
    """An ``AsyncMongoClient`` on a ``mongo`` connection, as ``MongoHook.get_conn`` would open it.

    ``MongoHook`` looks its connection up in ``__init__``, synchronously: it is built in
    a worker thread so the triggerer's event loop never blocks on the lookup.
    """
    hook = await sync_to_async(MongoHook)(mongo_conn_id=mongo_conn_id)
    options = mongo_client_options(hook)
    options.setdefault("appname", appname)
    return AsyncMongoClient(hook.uri, **options)


class BackgroundLanesTrigger(RebuiltFromFields, BaseTrigger):
    """Fire once when the lanes of one pass of a background migration have stopped.

    Reads only; never changes the state or the partitions, so cancelling it (a
    triggerer restart, a user kill) needs no clean-up beyond closing its client.

    :param mongo_conn_id: Airflow connection of type ``mongo`` (read through ``MongoHook``).
    :param database: database holding the state; ``None`` uses the connection's schema.
    :param migration: name of the background migration (its state ``_id``).
    :param generation: generation of the pass the lanes were started on.
    :param plan: token of the plan the lanes were started on.
    :param collection_prefix: prefix of the state and partition collections.
    :param poll_interval: seconds between two polls.
    :param no_lease_grace_seconds: how long open partitions may go without any live
        lease before the lanes count as dead.
    :param conn_id: deprecated name of ``mongo_conn_id`` (triggers serialized before
        the rename carry it).
    """

    rebuild_fields = (
        "mongo_conn_id",
        "database",
        "migration",
        "generation",
        "plan",
        "collection_prefix",
        "poll_interval",
        "no_lease_grace_seconds",
    )

    def __init__(
        self,
        *,
        mongo_conn_id: str = MigronautHook.default_conn_name,
        database: str | None,
        migration: str,
        generation: int,
        plan: str,
        collection_prefix: str = DEFAULT_BACKGROUND_COLLECTION,
        poll_interval: float = 2.0,
        no_lease_grace_seconds: float = 30.0,
        conn_id: str | None = None,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Airflow leaves it unannotated
        if poll_interval <= 0:
            raise ValueError(f"poll_interval must be positive, got {poll_interval!r}")
        if no_lease_grace_seconds < 0:
            raise ValueError(
                f"no_lease_grace_seconds must not be negative, got {no_lease_grace_seconds!r}"
            )
        self.mongo_conn_id = mongo_conn_id_from(mongo_conn_id, conn_id)
        self.database = database
        self.migration = migration
        self.generation = generation
        self.plan = plan
        self.collection_prefix = collection_prefix
        self.poll_interval = poll_interval
        self.no_lease_grace_seconds = no_lease_grace_seconds

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Poll until waiting is over, yield one event, then return."""
        try:
            fields = await self._watch()
        except Exception as exc:
            self.log.warning(
                "Watching the lanes of %s failed: %s", self.migration, type(exc).__name__
            )
            payload = {"status": "error", "message": error_message(exc)}
        else:
            self.log.info("Done waiting for the lanes of %s: %s", self.migration, fields["reason"])
            payload = {"status": "success", **fields}
        event = {**payload, "migration": self.migration}
        yield TriggerEvent(event)  # type: ignore[no-untyped-call]  # Airflow leaves it unannotated

    async def _watch(self) -> dict[str, Any]:
        client = await connect_async(self.mongo_conn_id)
        try:
            db = client.get_database(self.database)
            names = BackgroundCollections.from_prefix(self.collection_prefix)
            watch = LanesWatch(
                generation=self.generation,
                plan=self.plan,
                no_lease_grace_seconds=self.no_lease_grace_seconds,
            )
            loop = asyncio.get_running_loop()
            while True:
                snapshot = await read_lanes_async(
                    db, names, self.migration, generation=self.generation, plan=self.plan
                )
                verdict = watch.judge(snapshot, now=loop.time())
                if verdict is not None:
                    return verdict
                await asyncio.sleep(self.poll_interval)
        finally:
            await client.close()
