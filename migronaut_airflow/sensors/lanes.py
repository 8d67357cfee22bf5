"""Wait for the lanes of one background migration pass (the ``wait_for_lanes`` task).

:class:`BackgroundLanesSensor` succeeds, returning (and pushing as XCom) one of
:data:`~migronaut_core.LANE_WAIT_REASONS`, when the pass drained, the
migration left ``running``, it was re-planned, or no lease stayed live for the grace
period. Deferrable by default: it then waits in the triggerer
(:class:`~migronaut_airflow.triggers.lanes.BackgroundLanesTrigger`) and frees its
worker slot.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.providers.mongo.hooks.mongo import MongoHook
from airflow.sdk import BaseSensorOperator, PokeReturnValue, XComArg
from airflow.sdk.exceptions import AirflowException

from migronaut_airflow.hooks.migronaut import MigronautHook, mongo_conn_id_from
from migronaut_airflow.triggers.lanes import BackgroundLanesTrigger
from migronaut_core import (
    DEFAULT_BACKGROUND_COLLECTION,
    LANE_WAIT_REASONS,
    BackgroundCollections,
    LanesWatch,
    read_lanes,
)

if TYPE_CHECKING:
    from airflow.sdk import Context


class LanesWaitError(AirflowException):
    """Waiting for lanes failed: the trigger reported an error or an unusable event."""


class BackgroundLanesSensor(BaseSensorOperator):
    """Wait until the lanes of one pass of a background migration have stopped.

    Returns the reason waiting ended (``drained``, ``left-running``, ``replanned`` or
    ``no-live-lease``); the coordinator's next round decides what follows. Reads
    only. ``migration``, ``generation``, ``plan`` and ``collection_prefix`` are
    templated, so they can come from the coordinate task's XCom (an ``XComArg`` is
    resolved before the sensor runs).

    :param migration: name of the background migration.
    :param generation: generation of the pass the lanes were started on.
    :param plan: token of the plan the lanes were started on.
    :param mongo_conn_id: Airflow connection of type ``mongo``.
    :param database: database holding the state; ``None`` uses the connection's schema.
    :param collection_prefix: prefix of the state and partition collections.
    :param poll_interval: seconds between two checks (also the default
        ``poke_interval`` when not deferrable).
    :param no_lease_grace_seconds: how long open partitions may go without any live
        lease before the lanes count as dead.
    :param deferrable: wait in the triggerer. Defaults to True whatever
        ``[operators] default_deferrable`` says: in ``poke`` mode the sensor holds a
        worker slot for the whole pass. ``reschedule`` mode is refused, since the
        no-live-lease grace cannot be measured across reschedules.
    :param conn_id: deprecated name of ``mongo_conn_id``.
    """

    template_fields: Sequence[str] = ("migration", "generation", "plan", "collection_prefix")

    SUCCESS_STATES = ("success",)
    FAILURE_STATES = ("error",)

    def __init__(
        self,
        *,
        migration: str,
        generation: int | str | XComArg,
        plan: str | XComArg,
        mongo_conn_id: str = MigronautHook.default_conn_name,
        database: str | None = None,
        collection_prefix: str | XComArg = DEFAULT_BACKGROUND_COLLECTION,
        poll_interval: float = 2.0,
        no_lease_grace_seconds: float = 30.0,
        deferrable: bool = True,
        conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("poke_interval", poll_interval)
        super().__init__(**kwargs)
        if self.mode == "reschedule":
            raise ValueError(
                "BackgroundLanesSensor does not support mode='reschedule'; "
                "use deferrable=True to free the worker slot"
            )
        self.migration = migration
        self.generation = generation
        self.plan = plan
        self.mongo_conn_id = mongo_conn_id_from(mongo_conn_id, conn_id)
        self.database = database
        self.collection_prefix = collection_prefix
        self.poll_interval = poll_interval
        self.no_lease_grace_seconds = no_lease_grace_seconds
        self.deferrable = deferrable
        self._watch: LanesWatch | None = None

    @cached_property
    def hook(self) -> MongoHook:
        """The MongoDB hook, built (and its connection looked up) on first use."""
        return MongoHook(mongo_conn_id=self.mongo_conn_id)

    def execute(self, context: Context) -> Any:
        """Return the reason at once if waiting is already over; else poke or defer."""
        if not self.deferrable:
            try:
                return super().execute(context)
            finally:
                self._close_client()
        try:
            reason = self._check()
        finally:
            self._close_client()
        if reason is not None:
            return reason
        self.defer(
            trigger=BackgroundLanesTrigger(
                mongo_conn_id=self.mongo_conn_id,
                database=self.database,
                migration=self.migration,
                generation=self._generation(),
                plan=str(self.plan),
                collection_prefix=self._collection_prefix(),
                poll_interval=self.poll_interval,
                no_lease_grace_seconds=self.no_lease_grace_seconds,
            ),
            method_name="execute_complete",
            timeout=self.execution_timeout or timedelta(seconds=self.timeout),
        )

    def poke(self, context: Context) -> PokeReturnValue:
        """Check once; done (with the reason as XCom value) when waiting is over."""
        reason = self._check()
        return PokeReturnValue(is_done=reason is not None, xcom_value=reason)

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> str:
        """Return the reason of a success event; raise :class:`LanesWaitError` otherwise."""
        if not isinstance(event, dict):
            raise LanesWaitError(f"Waiting for the lanes of {self.migration} got no event")
        status = event.get("status")
        if status in self.FAILURE_STATES:
            raise LanesWaitError(
                f"Waiting for the lanes of {self.migration} failed: "
                f"{event.get('message') or 'no message'}"
            )
        if status not in self.SUCCESS_STATES:
            raise LanesWaitError(
                f"Waiting for the lanes of {self.migration} got an event of unknown status"
            )
        reason = event.get("reason")
        if reason not in LANE_WAIT_REASONS:
            raise LanesWaitError(
                f"Waiting for the lanes of {self.migration} got an event of unknown reason"
            )
        self.log.info("Done waiting for the lanes of %s: %s", self.migration, reason)
        return str(reason)

    def on_kill(self) -> None:
        """Close the client; the sensor changes nothing in MongoDB."""
        self._close_client()

    def _generation(self) -> int:
        if not isinstance(self.generation, XComArg):
            try:
                return int(self.generation)
            except (TypeError, ValueError):
                pass
        raise ValueError("generation must be an integer (after templating)")

    def _collection_prefix(self) -> str:
        if isinstance(self.collection_prefix, XComArg):
            raise ValueError("collection_prefix must be a string (after templating)")
        return self.collection_prefix

    def _check(self) -> str | None:
        """Judge the lanes once, synchronously; the reason when waiting is over."""
        generation, plan = self._generation(), str(self.plan)
        watch = self._watch
        if watch is None or watch.generation != generation or watch.plan != plan:
            self._watch = watch = LanesWatch(
                generation=generation, plan=plan, no_lease_grace_seconds=self.no_lease_grace_seconds
            )
        db = self.hook.get_conn().get_database(self.database)
        names = BackgroundCollections.from_prefix(self._collection_prefix())
        snapshot = read_lanes(db, names, self.migration, generation=generation, plan=plan)
        verdict = watch.judge(snapshot, now=time.monotonic())
        if verdict is None:
            return None
        self.log.info("Done waiting for the lanes of %s: %s", self.migration, verdict["reason"])
        return str(verdict["reason"])

    def _close_client(self) -> None:
        hook = self.__dict__.get("hook")
        if hook is not None:
            hook.__exit__(None, None, None)
