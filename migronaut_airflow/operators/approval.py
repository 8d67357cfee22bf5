"""A canary's approval as a human-in-the-loop task of its migration's DAG.

A migration whose spec sets ``"canary": {..., "approval": True}`` gets an
``approve_canary`` task (:func:`~migronaut_airflow.dags.builders.background_dag`). When
its canary passed its checks, the ``coordinate`` task hands over to it (it skips
instead of waiting), and :class:`CanaryApprovalOperator` asks in Airflow's
*Required actions* (``Approve`` / ``Reject``): the answer calls the core's public
control (``approve``, or ``reject`` with the responder's name as the reason), and
the ``continue_after_approval`` task then starts the rest's run. A decision taken
elsewhere (the CLI, the UI's button, the control DAG) is noticed at the next
``recheck``: the question times out, the task looks at the canary again, and asks
again only while it still awaits approval. Built on the standard provider's
``HITLOperator`` (there in every supported Airflow: 3.2 with provider 1.13.1 defers to
its trigger; 3.3 parks the task in ``awaiting_input``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

from airflow.providers.standard.operators.hitl import HITLOperator
from airflow.sdk.exceptions import AirflowSkipException

from migronaut_airflow.operators.background import MigronautOperator, fail_fast
from migronaut_core import BackgroundConflictError, ControlAction, MigronautError

if TYPE_CHECKING:
    from airflow.sdk import Context

APPROVE: Final = "Approve"
REJECT: Final = "Reject"
#: How often a waiting question looks whether the canary was decided elsewhere.
RECHECK: Final = timedelta(minutes=5)
#: Who a decision is recorded as when Airflow names no responder.
SOMEONE: Final = "airflow"


def canary_phase(operator: MigronautOperator, migration: str) -> str | None:
    """The canary's phase as the core's status says (None: no canary, or unregistered)."""
    try:
        view = operator.kit.background.status(migration)
    except MigronautError as exc:
        raise fail_fast(exc) from exc
    return None if view is None or view.canary is None else view.canary.phase


def decide(
    operator: MigronautOperator, migration: str, chosen: str, responder: str | None
) -> dict[str, Any]:
    """Apply a person's answer through the core's public control; a canary decided
    elsewhere meanwhile is reported, not an error."""
    who = responder or SOMEONE
    action: ControlAction = "approve" if chosen == APPROVE else "reject"
    reason = f"{'approved' if action == 'approve' else 'rejected'} in Airflow by {who}"
    try:
        result = operator.kit.background.control(migration, action, requested_by=who, reason=reason)
    except BackgroundConflictError as exc:
        operator.log.warning("%s: %s; decided elsewhere", migration, exc.message)
        return {"action": action, "applied": "elsewhere", "by": who}
    except MigronautError as exc:
        raise fail_fast(exc) from exc
    operator.log.info("%s: canary %s by %s (%s)", migration, action, who, result.applied)
    return {"action": action, "applied": result.applied, "status": result.status, "by": who}


def responder_of(event: Mapping[str, Any]) -> str | None:
    """The name of who answered, as a HITL event carries it."""
    user = event.get("responded_by_user")
    if isinstance(user, Mapping):
        name = user.get("name") or user.get("id")
        return None if name is None else str(name)
    return None if user is None else str(user)


class CanaryApprovalOperator(MigronautOperator, HITLOperator):
    """Ask a person to approve a canary that passed its checks; apply the answer.

    Skips when the canary does not await approval as it starts. ``recheck``: how long
    one question waits before the task looks at the canary again (the HITL
    ``response_timeout``): still awaiting, it asks again; decided elsewhere, it
    succeeds (so ``continue_after_approval`` starts the rest's round, or finds it
    paused).
    """

    template_fields = (*HITLOperator.template_fields, "migration")

    def __init__(self, *, migration: str, recheck: timedelta = RECHECK, **kwargs: Any) -> None:
        kwargs.setdefault("subject", f"Promote the canary of {migration}?")
        super().__init__(options=[APPROVE, REJECT], response_timeout=recheck, **kwargs)
        self.migration = migration

    def execute(self, context: Context) -> Any:
        self._awaiting()
        self.body = (
            f"The canary of `{self.migration}` passed its checks. Approve to migrate the "
            "rest of the collection; reject to pause it (resume soaks it again)."
        )
        return super().execute(context)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        if event.get("error_type") == "timeout":
            return self._recheck(context)
        answered = super().execute_complete(context, event)
        chosen = answered["chosen_options"][0]
        return decide(self, self.migration, chosen, responder_of(answered))

    def _recheck(self, context: Context) -> Any:
        """No answer in time: ask again while the canary awaits approval; else it was
        decided elsewhere (approved: the next task starts the rest's round)."""
        phase = self._phase()
        if phase == "awaiting_approval":
            self.log.info("%s: its canary still awaits approval; asking again", self.migration)
            return super().execute(context)
        self.log.info("%s: its canary was decided elsewhere (%s)", self.migration, phase)
        return {"action": None, "applied": "elsewhere", "canary": phase}

    def _awaiting(self) -> None:
        """Go on only while the canary awaits approval; skip otherwise."""
        phase = self._phase()
        if phase != "awaiting_approval":
            raise AirflowSkipException(
                f"{self.migration}: its canary is {phase or 'absent'}; nothing to approve"
            )

    def _phase(self) -> str | None:
        try:
            return canary_phase(self, self.migration)
        finally:
            self.hook.close()
