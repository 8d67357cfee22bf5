"""Operators for the CLI's operations: up, down, their plans, baseline, converge, dry runs, audit.

Every operation the ``migronaut`` CLI has for a target, as a task: each operator
converts its arguments, calls the kit once and hands back what the CLI would
print with ``--json``, as the task's return value (XCom) and, indented, in its
log. Nothing crossing into XCom holds a document's values: names, counts, field
names and value-free messages only (a dry run's documents lose their ``_id``).

A :class:`~migronaut_core.MigronautError` fails the task with its code and its
message (``MIGRATION_FILE_NOT_FOUND: …``), at once unless the error is
retryable (a held run lock); a refused task changed nothing.

Who may act: the run's triggering user must be able to *edit* the DAG the
operation acts on (:func:`~migronaut_airflow.authorization.authorize_run`,
under ``authorize_runs``): the run's own DAG for a target-wide operation (up,
down, plan, baseline, converge, audit), the migration's DAG for a dry run. The
read-only ones ask for that right too: a plan and an audit read the changelog
and the run lock's holder, and a dry run with ``validate`` or ``steps`` runs
the migration's code in a transaction that is aborted. Outside the admin DAG,
an operator in a scheduled DAG has no triggering user: pass
``authorize_runs="off"``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, get_args

from airflow.sdk.exceptions import AirflowFailException

from migronaut_airflow.authorization import AUTH_MANAGER, authorize_run, check_policy
from migronaut_airflow.operators.background import (
    RUN_LOCK_WAIT_SECONDS,
    MigronautOperator,
    fail_fast,
    migrate_up,
    requester,
)
from migronaut_core import ConfigInvalidError, MigronautError

if TYPE_CHECKING:
    from airflow.sdk import Context

Operation = Literal["up", "down", "baseline", "converge", "dry_run", "audit"]
#: Every operation, in the admin DAG's form order.
OPERATIONS: Final[tuple[Operation, ...]] = get_args(Operation)
Direction = Literal["up", "down"]
#: What may be planned (``plan``): a run of ``up`` or ``down``.
PLANNED: Final[tuple[Direction, ...]] = get_args(Direction)
#: The XCom key of an operation's result (its return value is the DAG ids to start).
RESULT_KEY: Final = "result"
#: The failure of an audit with a finding of severity ``error`` (the CLI exits 20).
AUDIT_ERRORS: Final = "AUDIT_ERRORS"


def check_operation(operation: str) -> Operation:
    """Return ``operation`` when it is one of :data:`OPERATIONS`.

    :raises ConfigInvalidError: naming the key and the operations.
    """
    known = next((listed for listed in OPERATIONS if listed == operation), None)
    if known is None:
        raise ConfigInvalidError(
            f"unknown operation; expected one of {', '.join(OPERATIONS)}", {"key": "operation"}
        )
    return known


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one operation gives back: its JSON result, a summary line, what follows.

    :param start: start the DAGs of the background migrations with work afterwards.
    :param failure: fail the task with this (code and message) after reporting.
    """

    result: dict[str, Any]
    summary: str
    start: bool = False
    failure: str | None = field(default=None)


class RunOperationOperator(MigronautOperator):
    """Run one of the runner's operations on the target, as the ``migronaut`` CLI does.

    Pushes the operation's result as ``result`` (a JSON document: ``{"operation":
    …, …}`` and what ``migronaut … --json`` prints, value-free) and logs it, as
    :class:`~.background.MigrationsUpOperator` and the control operator do; returns
    the DAG ids to start: after an ``up`` or a ``down``, those of the background
    migrations with work (the admin DAG starts them), else none.

    A ``plan`` the run would be refused fails the task with the refusal's code,
    and an ``audit`` with a finding of severity ``error`` fails it with
    ``AUDIT_ERRORS`` unless ``fail_on_errors`` is false — where the CLI exits
    non-zero — after the result is pushed and logged.

    :param operation: ``up``, ``down``, ``baseline``, ``converge``, ``dry_run`` or ``audit``.
    :param plan: with ``up`` or ``down``: what the run would do, in order, and the
        refusal it would meet; changes nothing.
    :param to: ``up``/``down``/``baseline``: up to (down: back to) this migration;
        ``baseline`` needs it.
    :param only: ``up``: only this migration.
    :param prune: ``converge``: also drop the version indexes converge made that
        nothing declares any more.
    :param migration: ``dry_run``: the background migration (needed).
    :param sample, first, validate, steps, from_start: ``dry_run``'s options
        (:meth:`Background.dry_run <migronaut_core.Background.dry_run>`).
    :param fail_on_errors: ``audit``: fail on a finding of severity ``error``.
    :param reason: recorded with what the operation changes.
    :param requested_by: recorded as who asked; default: the run's triggering user.
    :param authorize_runs: ``auth_manager``, ``off`` or ``module.path:callable``.
    """

    template_fields: Sequence[str] = (
        "operation",
        "to",
        "only",
        "migration",
        "reason",
        "requested_by",
    )

    def __init__(
        self,
        *,
        operation: str,
        plan: bool = False,
        to: str | None = None,
        only: str | None = None,
        prune: bool = False,
        migration: str | None = None,
        sample: int | None = None,
        first: int | None = None,
        validate: bool = False,
        steps: int | None = None,
        from_start: bool = False,
        fail_on_errors: bool = True,
        reason: str | None = None,
        requested_by: str | None = None,
        authorize_runs: str = AUTH_MANAGER,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.operation = operation
        self.plan = plan
        self.to = to
        self.only = only
        self.prune = prune
        self.migration = migration
        self.sample = sample
        self.first = first
        self.validate = validate
        self.steps = steps
        self.from_start = from_start
        self.fail_on_errors = fail_on_errors
        self.reason = reason
        self.requested_by = requested_by
        self.authorize_runs = check_policy(authorize_runs)

    def execute(self, context: Context) -> list[str]:
        ti = context["ti"]
        try:
            operation = check_operation(self.operation)
            dag_id = self._dag_to_authorize(operation, context)
        except MigronautError as exc:
            raise fail_fast(exc) from exc
        dag_run = context.get("dag_run")
        authorize_run(
            getattr(dag_run, "triggering_user_name", None),
            dag_id,
            self.authorize_runs,
            self._title(operation),
        )
        try:
            outcome = self._run(operation, requester(self.requested_by, context))
            dag_ids = self.runnable_dag_ids() if outcome.start else []
        except MigronautError as exc:
            raise fail_fast(exc) from exc
        ti.xcom_push(key=RESULT_KEY, value=outcome.result)
        self.log.info("%s\n%s", outcome.summary, json.dumps(outcome.result, indent=2, default=str))
        if dag_ids:
            self.log.info("background migrations with work: %s", ", ".join(dag_ids))
        if outcome.failure is not None:
            raise AirflowFailException(outcome.failure)
        return dag_ids

    def _title(self, operation: Operation) -> str:
        what = f"{operation} --plan" if self.plan else operation
        subject = f"of {self.migration}" if operation == "dry_run" else f"on target {self.target}"
        return f"{what} {subject}"

    def _dag_to_authorize(self, operation: Operation, context: Context) -> str:
        if operation == "dry_run":
            return self.dag_id_for(self._needed(self.migration, "migration", operation))
        return str(context["dag"].dag_id)

    def _run(self, operation: Operation, who: str | None) -> Outcome:
        if self.plan:
            return self._plan(operation)
        reason = self.reason or None
        to, only = self.to or None, self.only or None
        kit = self.kit
        if operation == "up":
            run = migrate_up(kit, to=to, only=only, requested_by=who, reason=reason)
            return _run_outcome("up", run.to_dict())
        if operation == "down":
            run = kit.runs.down(
                to=to, requested_by=who, reason=reason, wait_for_lock_seconds=RUN_LOCK_WAIT_SECONDS
            )
            return _run_outcome("down", run.to_dict())
        if operation == "baseline":
            adopted = kit.runs.baseline(
                to=self._needed(to, "to", operation),
                requested_by=who,
                reason=reason,
                wait_for_lock_seconds=RUN_LOCK_WAIT_SECONDS,
            )
            return Outcome(
                {"operation": operation, **adopted.to_dict()},
                f"baseline: {len(adopted.adopted)} adopted, "
                f"{len(adopted.already_applied)} already applied",
            )
        if operation == "converge":
            report = kit.runs.converge(prune=self.prune, requested_by=who, reason=reason)
            data = report.to_dict()
            dropped = f", {data['dropped']} dropped" if self.prune else ""
            return Outcome(
                {"operation": operation, **data},
                f"converge: {data['created']} index(es) created{dropped}",
            )
        if operation == "dry_run":
            return self._dry_run()
        return self._audit()

    def _plan(self, operation: Operation) -> Outcome:
        if operation == "up":
            plan = self.kit.runs.plan_up(to=self.to or None, only=self.only or None)
        elif operation == "down":
            plan = self.kit.runs.plan_down(to=self.to or None)
        else:
            raise ConfigInvalidError(
                f"plan applies to {' and '.join(PLANNED)}, not {operation}", {"key": "plan"}
            )
        data = plan.to_dict()
        refusal = plan.refusal
        would = "would be refused" if refusal is not None else "would go"
        return Outcome(
            {"operation": "plan", **data},
            f"plan of {operation}: {len(plan.migrations)} migration(s); the run {would}",
            failure=None if refusal is None else f"{refusal.code}: {refusal.message}",
        )

    def _dry_run(self) -> Outcome:
        name = self._needed(self.migration, "migration", "dry_run")
        report = self.kit.background.dry_run(
            name,
            sample=self.sample,
            first=self.first,
            validate=self.validate,
            steps=self.steps,
            from_start=self.from_start,
        )
        data = report.to_dict()
        if "documents" in data:
            # An _id can be a natural key: the result says what would change, never of whom.
            data["documents"] = [
                {key: value for key, value in doc.items() if key != "id"}
                for doc in data["documents"]
            ]
            totals = data["totals"]
            summary = (
                f"dry run of {name}: {totals['documents']} document(s), "
                f"{totals['would_change']} would change, {totals['errors']} error(s); "
                "nothing was written"
            )
        else:
            summary = f"dry run of {name}: {len(data['steps'])} step(s); nothing was written"
        return Outcome({"operation": "dry_run", **data}, summary)

    def _audit(self) -> Outcome:
        findings = [finding.to_dict() for finding in self.kit.runs.audit()]
        errors = sum(1 for finding in findings if finding["severity"] == "error")
        summary = f"audit: {errors} error(s), {len(findings) - errors} warning(s)"
        return Outcome(
            {
                "operation": "audit",
                "findings": findings,
                "errors": errors,
                "warnings": len(findings) - errors,
            },
            summary,
            failure=f"{AUDIT_ERRORS}: {summary}" if errors and self.fail_on_errors else None,
        )

    @staticmethod
    def _needed(value: str | None, key: str, operation: str) -> str:
        if not value:
            raise ConfigInvalidError(f"{operation} needs {key}", {"key": key})
        return value


def _run_outcome(operation: Direction, result: dict[str, Any]) -> Outcome:
    summary = f"{operation}: {len(result['migrations'])} migration(s) run"
    if result.get("stopped_at"):
        summary += f"; stopped at {result['stopped_at']}, which waits for background migrations"
    return Outcome({"operation": operation, **result}, summary, start=True)


class AdminOperationOperator(RunOperationOperator):
    """:class:`RunOperationOperator` taking its arguments from the run's params (the admin form).

    The params are the form's, validated by Airflow against their schema, so
    numbers and flags arrive typed: ``operation``, ``plan``, ``to``, ``only``,
    ``prune``, ``migration``, ``sample``, ``first``, ``validate``, ``steps``,
    ``from_start``, ``reason``.
    """

    FROM_PARAMS: Final = (
        "operation",
        "plan",
        "to",
        "only",
        "prune",
        "migration",
        "sample",
        "first",
        "validate",
        "steps",
        "from_start",
        "reason",
    )

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("operation", "audit")
        super().__init__(**kwargs)

    def execute(self, context: Context) -> list[str]:
        params: Mapping[str, Any] = context.get("params") or {}
        for name in self.FROM_PARAMS:
            if name in params:
                setattr(self, name, params[name])
        return super().execute(context)


class MigrateUpOperator(RunOperationOperator):
    """``migronaut up``: apply pending migrations (all, up to ``to``, or ``only`` one).

    Stops before a migration that waits for background migrations, as
    ``migronaut_up`` does; returns the DAG ids of background migrations with work.
    See :class:`RunOperationOperator`.
    """

    def __init__(self, *, to: str | None = None, only: str | None = None, **kwargs: Any) -> None:
        super().__init__(operation="up", to=to, only=only, **kwargs)


class MigrateDownOperator(RunOperationOperator):
    """``migronaut down``: revert the last migration, or every one applied after ``to``.

    A background migration's way back is registered: its DAG is among the ids
    returned. See :class:`RunOperationOperator`.
    """

    def __init__(self, *, to: str | None = None, **kwargs: Any) -> None:
        super().__init__(operation="down", to=to, **kwargs)


class PlanOperator(RunOperationOperator):
    """``migronaut up --plan`` / ``down --plan``: what the run would do; changes nothing.

    Pushes the plan as ``result`` (``direction``, ``migrations``, ``refused``); fails with the
    refusal's code when the run would be refused.

    :param direction: ``up`` or ``down``.
    """

    def __init__(
        self,
        *,
        direction: Direction = "up",
        to: str | None = None,
        only: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(operation=direction, plan=True, to=to, only=only, **kwargs)


class BaselineOperator(RunOperationOperator):
    """``migronaut baseline --to``: record every migration up to ``to`` as applied, unrun."""

    def __init__(self, *, to: str, **kwargs: Any) -> None:
        super().__init__(operation="baseline", to=to, **kwargs)


class ConvergeOperator(RunOperationOperator):
    """``migronaut converge``: create the declared collections' version indexes.

    :param prune: also drop the ones converge made that nothing declares any more.
    """

    def __init__(self, *, prune: bool = False, **kwargs: Any) -> None:
        super().__init__(operation="converge", prune=prune, **kwargs)


class DryRunOperator(RunOperationOperator):
    """``migronaut background dry-run``: preview a background migration; write nothing.

    Pushes the report as ``result``, without the documents' ``_id``s. Needs edit rights on the
    migration's DAG: with ``validate`` or ``steps`` its code runs in an aborted
    transaction.
    """

    def __init__(
        self,
        *,
        migration: str,
        sample: int | None = None,
        first: int | None = None,
        validate: bool = False,
        steps: int | None = None,
        from_start: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            operation="dry_run",
            migration=migration,
            sample=sample,
            first=first,
            validate=validate,
            steps=steps,
            from_start=from_start,
            **kwargs,
        )


class AuditOperator(RunOperationOperator):
    """``migronaut audit``: every finding, general and background; changes nothing.

    Fails with ``AUDIT_ERRORS`` when a finding is an error (the CLI exits 20)
    unless ``fail_on_errors`` is false; warnings alone succeed.
    """

    def __init__(self, *, fail_on_errors: bool = True, **kwargs: Any) -> None:
        super().__init__(operation="audit", fail_on_errors=fail_on_errors, **kwargs)
