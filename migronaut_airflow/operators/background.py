"""Operators that run migronaut's coordinator steps, lanes and controls as Airflow tasks.

They are a thin skin: each converts its arguments, calls the kit, and turns the
answer into what Airflow understands — a return value (XCom), a deferral, a skip,
or a failure. ``MigronautError``s that retrying cannot fix fail the task at once
(:class:`~airflow.sdk.exceptions.AirflowFailException`); a failed slice raises so
Airflow's retries apply.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

import pendulum
from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from migronaut_airflow.authorization import AUTH_MANAGER, authorize_run, check_policy
from migronaut_airflow.hooks.migronaut import MigronautHook, mongo_conn_id_from
from migronaut_airflow.operators.takeover import Decision, decide, new_holds
from migronaut_airflow.targets import DEFAULT_TARGET, check_target_name, dag_id_for, dag_prefix
from migronaut_airflow.triggers.delay import DelayTrigger
from migronaut_core import (
    BRAKE_ACTIONS,
    CANARY_AWAITING_APPROVAL,
    STALL_SECONDS,
    Answer,
    CancelToken,
    ConfigInvalidError,
    Driver,
    LaneBinding,
    Migronaut,
    MigronautError,
    RunResult,
    check_control,
    parse_until,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

#: The prefix of the default target's per-migration DAG ids.
DAG_PREFIX = dag_id_for("")
#: How long an ``up`` or ``down`` run waits for the run lock another run holds.
RUN_LOCK_WAIT_SECONDS = 60


class MigronautOperator(BaseOperator):
    """Base of migronaut's operators: the connection, the migrations and a kit.

    :param mongo_conn_id: a ``mongo`` connection (its schema is the database).
    :param migrations_dir: the migration files (default ``$MIGRONAUT_MIGRATIONS_DIR``).
    :param database: overrides the connection's schema.
    :param migronaut_config: further migronaut config keys (e.g. ``lock_ttl_seconds``).
    :param target: the target's name: the DAGs this task starts are the target's.
    :param conn_id: deprecated name of ``mongo_conn_id``.
    """

    def __init__(
        self,
        *,
        target: str = DEFAULT_TARGET,
        mongo_conn_id: str = MigronautHook.default_conn_name,
        migrations_dir: str | None = None,
        database: str | None = None,
        migronaut_config: Mapping[str, Any] | None = None,
        conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.target = check_target_name(target)
        self.mongo_conn_id = mongo_conn_id_from(mongo_conn_id, conn_id)
        self.migrations_dir = migrations_dir
        self.database = database
        self.migronaut_config = dict(migronaut_config or {})

    @cached_property
    def hook(self) -> MigronautHook:
        return MigronautHook(
            self.mongo_conn_id,
            migrations_dir=self.migrations_dir,
            database=self.database,
            config=self.migronaut_config,
        )

    @property
    def kit(self) -> Migronaut:
        return self.hook.get_conn()

    def dag_id_for(self, migration: str) -> str:
        """The id of ``migration``'s DAG in this task's target."""
        return dag_id_for(migration, self.target)

    def runnable_dag_ids(self) -> list[str]:
        """The DAG ids of the background migrations with work to do, oldest first."""
        return [self.dag_id_for(row.name) for row in self.kit.background.runnable()]

    def coordinate(self, migration: str, context: Context, round_: int | None) -> Answer:
        """One coordinator step for this DAG run's round; errors as :func:`fail_fast` says."""
        try:
            return self.kit.background.coordinate(
                migration,
                driver=Driver("airflow", ref=context["run_id"], round=round_, rounds=True),
            )
        except MigronautError as exc:
            raise fail_fast(exc) from exc

    def post_execute(self, context: Context, result: Any = None) -> None:
        self.hook.close()

    def on_kill(self) -> None:
        self.hook.close()


def fail_fast(error: MigronautError) -> Exception:
    """An error Airflow should retry (retryable) as is; any other fails the task at once."""
    if error.retryable:
        return error
    return AirflowFailException(f"{error.code}: {error.message}")


def requester(requested_by: str | None, context: Context) -> str | None:
    """Who asks: ``requested_by`` if given, else the user who triggered the DAG run."""
    dag_run = context.get("dag_run")
    return requested_by or getattr(dag_run, "triggering_user_name", None) or None


def check_event(event: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """Reject a missing or failed trigger event."""
    if event is None or event.get("status") != "success":
        message = (event or {}).get("message", "no event")
        raise AirflowFailException(f"the trigger failed: {message}")
    return event


class CoordinateBackgroundOperator(MigronautOperator):
    """Run one coordinator step for a migration, as one round of this DAG run.

    ``process``: returns the slots (one per lane to start: the mapped lanes expand
    over it) and pushes ``answer``, ``registration``, ``generation``, ``plan``,
    ``round`` and ``collection_prefix`` (the configured ``background_collection``)
    as XComs; the lanes are bound to the first three and the round.
    ``wait``/``busy``: defers, then steps again — except, with ``hand_off_approval``,
    a canary awaiting approval: it skips, and the DAG's ``approve_canary`` task asks.
    ``done``/``superseded``: skips what follows (a failed migration fails the task).
    """

    template_fields: Sequence[str] = ("migration",)

    def __init__(
        self,
        *,
        migration: str,
        max_wait_seconds: float = 30.0,
        hand_off_approval: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.migration = migration
        self.max_wait_seconds = max_wait_seconds
        self.hand_off_approval = hand_off_approval

    def execute(self, context: Context) -> list[int]:
        return self._step(context, None)

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        round_ = check_event(event).get("round")
        return self._step(context, int(round_) if round_ is not None else None)

    def _step(self, context: Context, round_: int | None) -> list[int]:
        answer = self.coordinate(self.migration, context, round_)
        if answer.ends_driving:
            raise AirflowSkipException(end_round(self.migration, answer))
        if self.hand_off_approval and answer.reason == CANARY_AWAITING_APPROVAL:
            self.hook.close()
            raise AirflowSkipException(
                f"{self.migration}: its canary awaits approval; approve_canary asks for it"
            )
        if answer.steps_again_later:
            self.log.info(
                "%s: %s (%s); stepping again later", self.migration, answer.next, answer.reason
            )
            self.hook.close()
            self.defer(
                trigger=DelayTrigger(
                    seconds=min(answer.retry_after_ms / 1000, self.max_wait_seconds),
                    payload={"round": answer.round},
                ),
                method_name="execute_complete",
            )
        ti = context["ti"]
        ti.xcom_push(key="answer", value=answer.to_dict())
        ti.xcom_push(key="registration", value=answer.registration)
        ti.xcom_push(key="generation", value=answer.generation)
        ti.xcom_push(key="plan", value=answer.plan)
        ti.xcom_push(key="round", value=answer.round)
        ti.xcom_push(key="collection_prefix", value=self.kit.config.background_collection)
        self.log.info(
            "%s: %d lane(s) to start for generation %s",
            self.migration,
            answer.lanes,
            answer.generation,
        )
        return list(range(answer.lanes))


def _bound(value: Any) -> str | None:
    """A rendered binding field: None, or empty (no XCom), compares nothing."""
    return None if value is None or value in ("", "None") else str(value)


def _bound_number(value: Any) -> int | None:
    text = _bound(value)
    return None if text is None else int(text)


def end_round(migration: str, answer: Answer) -> str:
    """A coordinator said there is nothing to drive: fail on a failed migration, else say why.

    :raises AirflowFailException: the migration failed.
    """
    if answer.next == "superseded":
        return f"{migration}: a newer run drives it (round superseded)"
    if answer.status == "failed":
        raise AirflowFailException(f"background migration {migration} failed: {answer.error}")
    return f"{migration} is {answer.status}; nothing to drive"


class BackgroundLaneOperator(MigronautOperator):
    """One lane: run slices until the lane has nothing more to do, deferring between them.

    Deferring frees the worker slot between slices; a paused DAG is not scheduled
    again, so its lanes stop at the next slice boundary. ``exhausted``, ``paused``,
    ``cancelled``, ``stale`` and ``lost`` end the task successfully; a failed
    migration fails it without retries; a failed slice raises so retries apply.

    A ``held`` slice (a MongoDB health signal past its hard limit) defers like a
    ``busy`` one and looks again after its ``retry_after_ms``.

    A slice ``deferred`` by a deploy in progress (this worker's migration file is not
    the registered one yet) defers the task and tries again; past
    ``max_deploy_wait_seconds`` of that the task fails, naming the migration and
    both checksums.

    A lane is bound to the ``registration``, ``generation`` and ``round`` of the
    coordinator step that mapped it (templated: the generated DAG passes the
    ``coordinate`` task's XComs). When the migration's no longer match (it was
    registered again, a new pass began, a newer run took it over), the lane ends
    successfully without claiming, its result's ``outcome`` ``superseded`` and
    ``reason`` what changed. Left None, nothing is compared.

    :param registration: the registration the lane works for.
    :param generation: the generation (pass) the lane works for.
    :param round: the coordinator round (the DAG run) the lane belongs to.
    :param max_slices: end the task (successfully) after this many slices even with
        work left; the next round's lanes take it. None: until nothing is left.
    :param max_deploy_wait_seconds: how long a lane waits for a deploy to reach its
        worker before it fails.
    """

    template_fields: Sequence[str] = ("migration", "registration", "generation", "round")
    FINISHED = frozenset(
        {"exhausted", "paused", "cancelled", "stale", "superseded", "lost", "stopped"}
    )

    def __init__(
        self,
        *,
        migration: str,
        slot: int = 0,
        registration: str | None = None,
        generation: int | str | None = None,
        round: int | str | None = None,
        slice_ms: int | None = None,
        pause_between_slices: float = 0.1,
        max_slices: int | None = None,
        max_deploy_wait_seconds: float = 900.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.migration = migration
        self.slot = slot
        self.registration = registration
        self.generation = generation
        self.round = round
        self.slice_ms = slice_ms
        self.pause_between_slices = pause_between_slices
        self.max_slices = max_slices
        self.max_deploy_wait_seconds = max_deploy_wait_seconds
        self._cancel: CancelToken | None = None

    def execute(self, context: Context) -> dict[str, Any]:
        return self._run({}, 0, None)

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        checked = check_event(event)
        since = checked.get("deferred_since")
        return self._run(
            dict(checked.get("counters") or {}),
            int(checked.get("slices") or 0),
            float(since) if since is not None else None,
        )

    @property
    def binding(self) -> LaneBinding:
        """What this lane was mapped for: its rendered registration, generation and round."""
        return LaneBinding(
            registration=_bound(self.registration),
            generation=_bound_number(self.generation),
            round=_bound_number(self.round),
        )

    def _run(
        self, counters: dict[str, int], slices: int, deferred_since: float | None
    ) -> dict[str, Any]:
        slices += 1
        self._cancel = CancelToken()
        binding = self.binding
        try:
            result = self.kit.background.run_slice(
                self.migration, slice_ms=self.slice_ms, cancel=self._cancel, binding=binding
            )
        except MigronautError as exc:
            raise fail_fast(exc) from exc
        if result.outcome == "superseded":
            self.log.warning(
                "%s lane %d: superseded (its %s changed since the lane was mapped for "
                "registration %s, generation %s, round %s); ending without claiming",
                self.migration,
                self.slot,
                result.reason,
                binding.registration,
                binding.generation,
                binding.round,
            )
            return {
                "outcome": result.outcome,
                "reason": result.reason,
                "counters": counters,
                "slot": self.slot,
                "slices": slices,
            }
        for key, value in result.counters.items():
            counters[key] = counters.get(key, 0) + value
        self.log.info(
            "%s lane %d: slice %s (%s)", self.migration, self.slot, result.outcome, result.counters
        )
        if result.outcome == "failed":
            raise AirflowFailException(
                f"background migration {self.migration} failed: {result.error}"
            )
        if result.outcome == "deferred":
            # Wall-clock time: the wait spans deferrals, which may resume on other workers.
            now = time.time()
            since = deferred_since if deferred_since is not None else now
            if now - since > self.max_deploy_wait_seconds:
                raise fail_fast(result.deferred_too_long(self.migration, now - since))
            self._defer_slice(
                (result.retry_after_ms or 1000) / 1000,
                {"counters": counters, "slices": slices, "deferred_since": since},
            )
        out_of_slices = self.max_slices is not None and slices >= self.max_slices
        if result.outcome in ("yielded", "busy", "held") and not out_of_slices:
            wait = self.pause_between_slices
            if result.outcome in ("busy", "held"):
                wait = max(wait, (result.retry_after_ms or 1000) / 1000)
            self._defer_slice(wait, {"counters": counters, "slices": slices})
        return {
            "outcome": result.outcome,
            "counters": counters,
            "slot": self.slot,
            "slices": slices,
        }

    def on_kill(self) -> None:
        """Stop the slice at its next batch boundary: it checkpoints and releases its lease.

        Airflow calls this when the task is cleared or marked failed, or its worker
        shuts down warmly (SIGTERM). The partition is given back at once, so the next
        lane claims it now instead of after the lease's TTL. The client stays open:
        the slice needs it to checkpoint and release; the task's process ends after.
        """
        cancel = self._cancel
        if cancel is None:
            return
        # on_kill runs in a signal handler on the very thread working the slice: cancel
        # from another one, so the handler never waits on a lock that thread holds.
        threading.Thread(
            target=cancel.cancel, args=("the Airflow task was killed",), daemon=True
        ).start()

    def _defer_slice(self, seconds: float, payload: dict[str, Any]) -> None:
        """Free the worker slot until the next slice (raises ``TaskDeferred``)."""
        self.hook.close()
        self.defer(
            trigger=DelayTrigger(seconds=max(seconds, self.pause_between_slices), payload=payload),
            method_name="execute_complete",
        )


class ContinueBackgroundOperator(MigronautOperator, TriggerDagRunOperator):
    """Close this round: one more coordinator step, and a new DAG run if work is left.

    The new run takes the next round as this one ends (a round that is not the
    latest bows out, so an overlap is harmless). Takes :class:`MigronautOperator`'s
    connection arguments.
    """

    template_fields: Sequence[str] = (*TriggerDagRunOperator.template_fields, "migration")

    def __init__(
        self, *, migration: str, coordinate_task_id: str = "coordinate", **kwargs: Any
    ) -> None:
        kwargs.setdefault(
            "trigger_dag_id", dag_id_for(migration, kwargs.get("target", DEFAULT_TARGET))
        )
        kwargs.setdefault("conf", {"reason": "continue"})
        super().__init__(**kwargs)
        self.migration = migration
        self.coordinate_task_id = coordinate_task_id

    def execute(self, context: Context) -> Any:
        round_ = context["ti"].xcom_pull(task_ids=self.coordinate_task_id, key="round")
        try:
            answer = self.coordinate(self.migration, context, round_)
        finally:
            self.hook.close()
        if answer.ends_driving:
            self.log.info("%s; no new run", end_round(self.migration, answer))
            return answer.to_dict()
        self.log.info("%s: %s; starting the next round", self.migration, answer.next)
        return super().execute(context)


class AnnounceCompletedOperator(MigronautOperator):
    """Emit the migration's ``completed`` asset event in the run that saw it complete.

    Its outlet is :func:`~migronaut_airflow.dags.assets.completed_asset`; a task that
    skips emits no event, so it skips unless the migration is ``completed`` going
    forward (a revert's completion, by ``down`` or an undo, is no milestone) and
    completed after this DAG run started (a later run, e.g. one a drift reopen
    started and that found nothing to do, does not announce it twice). The event's
    ``extra`` carries the migration's name, its completion time and its totals.
    Takes :class:`MigronautOperator`'s connection arguments.
    """

    template_fields: Sequence[str] = ("migration",)

    def __init__(self, *, migration: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.migration = migration

    def execute(self, context: Context) -> dict[str, Any]:
        try:
            view = self.kit.background.status(self.migration)
        finally:
            self.hook.close()
        if view is None or view.status != "completed" or view.completed_at is None:
            raise AirflowSkipException(f"{self.migration} is not completed")
        if view.direction != "forward":  # a revert's (down's, an undo's) completion
            raise AirflowSkipException(f"{self.migration} was reverted, not completed")
        completed_at = pendulum.instance(view.completed_at)  # stored times are naive UTC
        started = context["dag_run"].start_date
        if started is not None and completed_at < started:
            raise AirflowSkipException(f"{self.migration} completed before this run")
        extra: dict[str, Any] = {
            "migration": self.migration,
            "completed_at": completed_at.isoformat(),
            "totals": dict(view.totals),
        }
        for asset in self.outlets:
            context["outlet_events"][asset].extra = extra
        self.log.info("%s completed: announced", self.migration)
        return extra


class ResumeUpOperator(MigronautOperator, TriggerDagRunOperator):
    """Start the target's ``migronaut_up`` again once the migrations it stopped for completed.

    ``migronaut_up`` stops before a regular migration that ``requires`` background
    migrations that have not completed (``on_background_pending="stop"``). This
    task, the last of a background migration's DAG run, starts ``migronaut_up``
    (``migronaut_<target>__up``) when the migration is ``completed`` and the core's
    plan of ``up`` has a pending regular migration that requires it and now waits
    for nothing: the run goes on where it stopped. Otherwise it starts nothing and
    returns why. Takes :class:`MigronautOperator`'s connection arguments.
    """

    template_fields: Sequence[str] = (*TriggerDagRunOperator.template_fields, "migration")

    def __init__(self, *, migration: str, **kwargs: Any) -> None:
        target = kwargs.get("target", DEFAULT_TARGET)
        kwargs.setdefault("trigger_dag_id", f"{dag_prefix(target)}up")
        kwargs.setdefault("conf", {"reason": f"{migration} completed"})
        super().__init__(**kwargs)
        self.migration = migration

    def execute(self, context: Context) -> Any:
        try:
            ready = self._ready_behind()
        except MigronautError as exc:
            raise fail_fast(exc) from exc
        finally:
            self.hook.close()
        if not ready:
            return {"resumed": False, "migration": self.migration}
        self.log.info(
            "%s completed; %s waited for it and can run now: starting %s",
            self.migration,
            ", ".join(ready),
            self.trigger_dag_id,
        )
        return super().execute(context)

    def _ready_behind(self) -> list[str]:
        """The pending regular migrations that require this completed one and wait for nothing."""
        view = self.kit.background.status(self.migration)
        if view is None or view.status != "completed":
            return []
        return [
            planned.name
            for planned in self.kit.runs.plan_up().migrations
            if planned.kind == "regular"
            and self.migration in planned.requires
            and not planned.waits_for
        ]


class BackgroundControlOperator(MigronautOperator):
    """Apply a control action; ``requested_by`` defaults to the user who triggered the run.

    Acts only when the run's triggering user may edit the migration's DAG
    (:mod:`migronaut_airflow.authorization`, under ``authorize_runs``); otherwise
    fails, changing nothing. Returns the DAG ids to start (the migration's DAG when
    the core says it may run now: ``ControlResult.may_run``) and pushes the
    control's result as ``result``.

    ``brake`` and ``release`` (:data:`~migronaut_core.BRAKE_ACTIONS`) act on the
    whole target instead: ``migration`` is ignored, ``reason`` is required for a
    brake, ``until`` (ISO 8601 with a time zone, blank: none) ends it by itself,
    and the triggering user must be allowed to edit this DAG (the target's
    control DAG). They start no DAG; ``result`` is the brake (``BrakeView``).

    :param failed_only: with ``retry``: only the documents the migration could not
        rewrite (``True``/``False``, or a boolean param's rendered template).
    :param authorize_runs: ``auth_manager``, ``off`` or ``module.path:callable``.
    """

    template_fields: Sequence[str] = (
        "migration",
        "action",
        "reason",
        "requested_by",
        "failed_only",
        "until",
    )

    def __init__(
        self,
        *,
        migration: str,
        action: str,
        reason: str | None = None,
        requested_by: str | None = None,
        until: str | None = None,
        failed_only: bool | str = False,
        authorize_runs: str = AUTH_MANAGER,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.migration = migration
        self.action = action
        self.reason = reason
        self.requested_by = requested_by
        self.until = until
        self.failed_only = failed_only
        self.authorize_runs = check_policy(authorize_runs)

    def execute(self, context: Context) -> list[str]:
        who = requester(self.requested_by, context)
        dag_run = context.get("dag_run")
        if self.action in BRAKE_ACTIONS:
            return self._brake(context, who, getattr(dag_run, "triggering_user_name", None))
        try:
            failed_only = _flag("failed_only", self.failed_only)
            action = check_control(self.action, failed_only=failed_only)
        except MigronautError as exc:
            raise AirflowFailException(f"{exc.code}: {exc.message}") from exc
        authorize_run(
            getattr(dag_run, "triggering_user_name", None),
            self.dag_id_for(self.migration),
            self.authorize_runs,
            f"{action} of {self.migration}",
        )
        try:
            result = self.kit.background.control(
                self.migration,
                action,
                requested_by=who,
                reason=self.reason or None,
                failed_only=failed_only,
            )
        except MigronautError as exc:
            raise AirflowFailException(f"{exc.code}: {exc.message}") from exc
        context["ti"].xcom_push(key="result", value=result.to_dict())
        self.log.info("%s: %s by %s: %s", self.migration, action, who, result.to_dict())
        return [self.dag_id_for(self.migration)] if result.may_run else []

    def _brake(self, context: Context, who: str | None, user: str | None) -> list[str]:
        """Set or release the target's brake (after the same permission check, on this DAG)."""
        authorize_run(user, self.dag_id, self.authorize_runs, f"{self.action} of the target")
        try:
            if self.action == "brake":
                view = self.kit.background.brake(
                    self.reason or "", until=parse_until(self.until), requested_by=who
                )
            else:
                view = self.kit.background.release(requested_by=who, reason=self.reason or None)
        except MigronautError as exc:
            raise AirflowFailException(f"{exc.code}: {exc.message}") from exc
        context["ti"].xcom_push(key="result", value=view.to_dict())
        self.log.info("the target's %s by %s: %s", self.action, who, view.to_dict())
        return []


def _flag(key: str, value: bool | str) -> bool:
    """A boolean option, or its rendered template (``True``/``False``).

    :raises ConfigInvalidError: anything else.
    """
    if isinstance(value, bool):
        return value
    if value in ("True", "False"):
        return value == "True"
    raise ConfigInvalidError(f"{key} must be true or false", {"key": key})


class MigrationsUpOperator(MigronautOperator):
    """Apply regular migrations and register background ones; name the DAGs to start.

    Returns the DAG ids to start (one per background migration with work) and
    pushes the run's result as ``result``. The admin DAG's ``up`` (with ``to``,
    ``only`` and a permission check) is
    :class:`~migronaut_airflow.operators.runs.MigrateUpOperator`.
    """

    template_fields: Sequence[str] = ("reason", "requested_by")

    def __init__(
        self, *, reason: str | None = None, requested_by: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.reason = reason
        self.requested_by = requested_by

    def execute(self, context: Context) -> list[str]:
        who = requester(self.requested_by, context)
        try:
            result = migrate_up(self.kit, requested_by=who, reason=self.reason or None)
            dag_ids = self.runnable_dag_ids()
        except MigronautError as exc:
            raise fail_fast(exc) from exc
        context["ti"].xcom_push(key="result", value=result.to_dict())
        return dag_ids


def migrate_up(
    kit: Migronaut,
    *,
    to: str | None = None,
    only: str | None = None,
    requested_by: str | None = None,
    reason: str | None = None,
) -> RunResult:
    """``up`` as Airflow runs it: it stops before a migration that waits for background
    ones (their DAGs run first; a later ``up`` goes on) and waits for a held run lock.
    """
    return kit.runs.up(
        to=to,
        only=only,
        requested_by=requested_by,
        reason=reason,
        on_background_pending="stop",
        wait_for_lock_seconds=RUN_LOCK_WAIT_SECONDS,
    )


class VerifyDriftOperator(MigronautOperator):
    """Probe completed migrations for old-shape documents; reopen or report.

    :param on_drift: ``reopen`` or ``report``; default: the ``background_on_drift`` config.
    """

    template_fields: Sequence[str] = ("on_drift",)

    def __init__(self, *, on_drift: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.on_drift = on_drift

    def execute(self, context: Context) -> dict[str, Any]:
        try:
            report = self.kit.drift.verify(on_drift=self.on_drift)
        except MigronautError as exc:
            raise fail_fast(exc) from exc
        return report.to_dict()


class HealBackgroundOperator(MigronautOperator):
    """Name the DAGs to start: migrations with work and no active run, and stuck ones.

    A migration with work and no queued or running DAG run gets one. So does a
    running one nothing has moved for ``stall_seconds`` (the core's
    :meth:`Background.stalled <migronaut_core.Background.stalled>`) whose one active run is
    stuck (a lane task frozen, its worker gone without Airflow noticing): the
    takeover run starts beside it (the DAG allows two active runs), takes a new
    round, and the stuck run's later steps bow out as ``superseded``. A stall
    Airflow itself holds is not taken over (:mod:`~migronaut_airflow.operators.takeover`):
    a paused DAG, a queued run, or tasks waiting for a pool slot. Those are pushed
    as the XCom ``held`` (migration → reason, waiting tasks, pools) and warned
    about once per held episode. Returns the DAG ids; a mapped
    TriggerDagRunOperator starts them.

    :param stall_seconds: how long nothing may move before a run is taken over.
    :param pools: the pool of each task of a migration's DAG, named in the report
        of tasks waiting for a slot (default: Airflow's ``default_pool``).
    """

    def __init__(
        self,
        *,
        stall_seconds: float = STALL_SECONDS,
        pools: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.stall_seconds = stall_seconds
        self.pools = dict(pools or {})

    def execute(self, context: Context) -> list[str]:
        try:
            runnable = self.kit.background.runnable()
            stalled = set(self.kit.background.stalled(stall_seconds=self.stall_seconds))
        except MigronautError as exc:
            raise fail_fast(exc) from exc
        ti = context["ti"]
        decisions = [
            decide(
                ti,
                row.name,
                self.dag_id_for(row.name),
                stalled=row.name in stalled,
                pools=self.pools,
            )
            for row in runnable
        ]
        self._report_held(ti, decisions)
        for decision in decisions:
            if decision.verdict == "take_over":
                self.log.warning(
                    "heal: %s made no progress for %.0f s; taking its run over",
                    decision.migration,
                    self.stall_seconds,
                )
        dag_ids = [d.dag_id for d in decisions if d.verdict in ("start", "take_over")]
        self.log.info(
            "heal: %d migration(s) with work, %d to start (%d stalled, %d held)",
            len(runnable),
            len(dag_ids),
            len(stalled),
            sum(d.verdict == "held" for d in decisions),
        )
        return dag_ids

    def _report_held(self, ti: Any, decisions: list[Decision]) -> None:
        """Push the held migrations as ``held``; warn about those newly held."""
        held = {d.migration: report for d in decisions if (report := d.report()) is not None}
        # The latest heal's report (one value: map index -1, newest run first).
        before = ti.xcom_pull(
            task_ids=self.task_id, key="held", include_prior_dates=True, map_indexes=-1
        )
        fresh = set(new_holds(held, before if isinstance(before, dict) else None))
        for decision in decisions:
            if decision.hold is None:
                continue
            log = self.log.warning if decision.migration in fresh else self.log.info
            log(
                "heal: %s stood still for %.0f s, held by Airflow, not stalled: %s; "
                "no takeover run",
                decision.migration,
                self.stall_seconds,
                decision.hold.describe(),
            )
        ti.xcom_push(key="held", value=held)
