"""A deploy gate in a DAG: wait until a background migration reached a milestone.

:class:`BackgroundMigrationSensor` is for the user's own DAGs — a CD pipeline that
ships the code needing the new shape only once the migration completed. It succeeds
(XCom: ``{"migration", "status"}``) when the core's
:func:`~migronaut_core.judge_gate` says ``reached``, and fails without retries when
it says ``ended`` (failed, cancelled, not registered: only a person moves it on).
Deferrable by default: it waits in the triggerer
(:class:`~migronaut_airflow.triggers.gate.MigrationMilestoneTrigger`), holding no
worker slot. The same gate as ``migronaut background wait``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

from airflow.providers.mongo.hooks.mongo import MongoHook
from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from migronaut_airflow.targets import (
    DEFAULT_TARGET,
    TargetSettings,
    check_target_name,
    resolve_target,
)
from migronaut_airflow.triggers.gate import MigrationMilestoneTrigger
from migronaut_core import (
    BACKGROUND_MILESTONES,
    GateVerdict,
    Milestone,
    judge_gate,
    read_gate,
)

if TYPE_CHECKING:
    from airflow.sdk import Context


class BackgroundMigrationSensor(BaseSensorOperator):
    """Wait until ``migration`` of ``target`` reached ``until``.

    :param migration: the background migration's name (templated).
    :param until: the milestone: ``migrated``, ``completed`` (default) or ``finalized``
        (:mod:`migronaut_core.background.gate`).
    :param target: the migronaut target whose database it migrates (its connection,
        database and collection prefix, as the target's DAGs resolve them).
    :param mongo_conn_id: overrides the target's connection.
    :param database: overrides the target's database.
    :param poll_interval: seconds between two reads (also the default ``poke_interval``).
    :param deferrable: wait in the triggerer (default); otherwise poke or reschedule.
    """

    template_fields: Sequence[str] = ("migration",)

    def __init__(
        self,
        *,
        migration: str,
        until: str = "completed",
        target: str = DEFAULT_TARGET,
        mongo_conn_id: str | None = None,
        database: str | None = None,
        poll_interval: float = 30.0,
        deferrable: bool = True,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("poke_interval", poll_interval)
        super().__init__(**kwargs)
        if until not in BACKGROUND_MILESTONES:
            raise ValueError(f"until must be one of {', '.join(BACKGROUND_MILESTONES)}")
        self.migration = migration
        self.until = until
        self.target = check_target_name(target)
        self.mongo_conn_id = mongo_conn_id
        self.database = database
        self.poll_interval = poll_interval
        self.deferrable = deferrable

    @cached_property
    def settings(self) -> TargetSettings:
        """The target's settings, with this sensor's overrides."""
        given = {"conn_id": self.mongo_conn_id, "database": self.database}
        return resolve_target(self.target, given)

    @cached_property
    def hook(self) -> MongoHook:
        return MongoHook(mongo_conn_id=self.settings.mongo_conn_id)

    def execute(self, context: Context) -> Any:
        """Answer at once if the gate already answers; else poke, or defer."""
        if not self.deferrable:
            return super().execute(context)
        try:
            verdict = self._check()
        finally:
            self._close_client()
        if verdict is not None:
            return self._finish(verdict)
        self.defer(
            trigger=MigrationMilestoneTrigger(
                mongo_conn_id=self.settings.mongo_conn_id,
                database=self.settings.database,
                migration=self.migration,
                until=self.until,
                collection_prefix=self.settings.collection_prefix,
                poll_interval=self.poll_interval,
            ),
            method_name="execute_complete",
            timeout=self.execution_timeout or timedelta(seconds=self.timeout),
        )

    def poke(self, context: Context) -> PokeReturnValue:
        """Read once; done when the gate answers (a failure when it says ``ended``)."""
        try:
            verdict = self._check()
        finally:
            self._close_client()
        if verdict is None:
            return PokeReturnValue(is_done=False)
        return PokeReturnValue(is_done=True, xcom_value=self._finish(verdict))

    def execute_complete(
        self, context: Context, event: Mapping[str, Any] | None = None
    ) -> dict[str, str]:
        """The trigger's answer: succeed on ``reached``, fail on ``ended`` or an error."""
        if not isinstance(event, Mapping) or event.get("status") not in ("success", "error"):
            raise AirflowException(f"Waiting for {self.migration} got no usable event")
        if event["status"] == "error":
            raise AirflowException(
                f"Waiting for {self.migration} failed: {event.get('message') or 'no message'}"
            )
        outcome, status = event.get("outcome"), event.get("migration_status")
        if outcome not in ("reached", "ended") or not isinstance(status, str):
            raise AirflowException(f"Waiting for {self.migration} got an event of unknown outcome")
        return self._finish(GateVerdict(outcome, status))

    def on_kill(self) -> None:
        self._close_client()

    def _check(self) -> GateVerdict | None:
        db = self.hook.get_conn().get_database(self.settings.database)
        collections = self.settings.config.background_collections
        snapshot = read_gate(db, collections, self.migration)
        return judge_gate(snapshot, cast(Milestone, self.until))

    def _finish(self, verdict: GateVerdict) -> dict[str, str]:
        if verdict.outcome == "ended":
            raise AirflowFailException(
                f"{self.migration} is {verdict.status}: it will not be {self.until} "
                "without a person acting (retry, resume or up)"
            )
        self.log.info("%s is %s", self.migration, verdict.status)
        return {"migration": self.migration, "status": verdict.status}

    def _close_client(self) -> None:
        hook = self.__dict__.pop("hook", None)
        if hook is not None:
            hook.__exit__(None, None, None)
