"""Wait, in the triggerer, until a background migration reaches a milestone or ends short of it.

:class:`MigrationMilestoneTrigger` reads the migration's status with an
``AsyncMongoClient`` (the core's
:func:`~migronaut_core.background.store.gate.read_gate_async`) and lets the
core's :func:`~migronaut_core.judge_gate` decide. It fires one event:
``{"status": "success", "outcome": "reached" | "ended", "migration_status", "migration"}``,
or ``{"status": "error", "message", "migration"}`` whose message names the error type and
never holds document values. Reads only.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

from airflow.triggers.base import BaseTrigger, TriggerEvent

from migronaut_airflow.triggers.lanes import connect_async, error_message
from migronaut_airflow.triggers.rebuild import RebuiltFromFields
from migronaut_core import (
    BACKGROUND_MILESTONES,
    BackgroundCollections,
    GateVerdict,
    Milestone,
    judge_gate,
    read_gate_async,
)


class MigrationMilestoneTrigger(RebuiltFromFields, BaseTrigger):
    """Fire once when ``migration`` reached ``until`` or ended short of it.

    :param mongo_conn_id: Airflow connection of type ``mongo``.
    :param database: database holding the state; ``None`` uses the connection's schema.
    :param migration: the background migration's name.
    :param until: the milestone (:data:`~migronaut_core.BACKGROUND_MILESTONES`).
    :param collection_prefix: prefix of migronaut's background collections.
    :param poll_interval: seconds between two reads.
    """

    rebuild_fields = (
        "mongo_conn_id",
        "database",
        "migration",
        "until",
        "collection_prefix",
        "poll_interval",
    )

    def __init__(
        self,
        *,
        mongo_conn_id: str,
        database: str | None,
        migration: str,
        until: str,
        collection_prefix: str,
        poll_interval: float = 30.0,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Airflow leaves it unannotated
        if until not in BACKGROUND_MILESTONES:
            raise ValueError(f"until must be one of {', '.join(BACKGROUND_MILESTONES)}")
        if poll_interval <= 0:
            raise ValueError(f"poll_interval must be positive, got {poll_interval!r}")
        self.mongo_conn_id = mongo_conn_id
        self.database = database
        self.migration = migration
        self.until = until
        self.collection_prefix = collection_prefix
        self.poll_interval = poll_interval

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Read until the gate answers, yield one event, then return."""
        try:
            verdict = await self._watch()
        except Exception as exc:
            self.log.warning("Watching %s failed: %s", self.migration, type(exc).__name__)
            payload: dict[str, Any] = {"status": "error", "message": error_message(exc)}
        else:
            self.log.info("%s is %s (%s)", self.migration, verdict.status, verdict.outcome)
            payload = {
                "status": "success",
                "outcome": verdict.outcome,
                "migration_status": verdict.status,
            }
        yield TriggerEvent({**payload, "migration": self.migration})  # type: ignore[no-untyped-call]

    async def _watch(self) -> GateVerdict:
        client = await connect_async(self.mongo_conn_id)
        try:
            db = client.get_database(self.database)
            names = BackgroundCollections.from_prefix(self.collection_prefix)
            until = cast(Milestone, self.until)
            while True:
                snapshot = await read_gate_async(db, names, self.migration)
                verdict = judge_gate(snapshot, until)
                if verdict is not None:
                    return verdict
                await asyncio.sleep(self.poll_interval)
        finally:
            await client.close()
