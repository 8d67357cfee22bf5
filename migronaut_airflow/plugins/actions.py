"""The controls: each of the UI's actions as one kit call, recorded with the user and a reason."""

from __future__ import annotations

from typing import Any, Final, get_args

from migronaut_airflow.plugins.models import ActionName
from migronaut_core import Migronaut
from migronaut_core.errors import ConfigInvalidError

ACTIONS: Final[tuple[str, ...]] = get_args(ActionName)
#: Actions after which the migration's DAG should run again (as the control DAG starts it).
RESTARTING: Final = frozenset({"resume", "retry", "retry_from_start", "repin"})
#: Actions that throw work away or cut live lanes off: the page asks to confirm them.
DESTRUCTIVE: Final = frozenset({"cancel", "retry_from_start", "unlock"})


def clean_reason(reason: str) -> str:
    """The reason as recorded: whitespace runs (line breaks too) become one space.

    :raises ConfigInvalidError: it is blank.
    """
    text = " ".join(reason.split())
    if not text:
        raise ConfigInvalidError("a reason is required", {"key": "reason"})
    return text


def apply(
    kit: Migronaut,
    migration: str,
    action: ActionName,
    *,
    requested_by: str,
    reason: str,
    repin: bool = False,
) -> dict[str, Any]:
    """Apply ``action``; returns ``applied``, ``status`` and what the action reports.

    :raises ConfigInvalidError: ``repin`` with an action other than a retry.
    :raises NotAppliedError: no such migration.
    :raises BackgroundConflictError: the action does not fit its status.
    """
    if repin and action not in ("retry", "retry_from_start"):
        raise ConfigInvalidError(
            "repin goes with retry and retry_from_start only", {"key": "repin", "action": action}
        )
    who = {"requested_by": requested_by, "reason": reason}
    if action == "unlock":
        released = kit.unlock_background(migration, **who)
        changed = bool(released.get("lock")) or bool(released.get("leases"))
        return {
            "applied": "changed" if changed else "unchanged",
            "status": _status(kit, migration),
            **released,
        }
    if action == "repin":
        return kit.repin_background(migration, **who).to_dict()
    if action in ("retry", "retry_from_start"):
        from_start = action == "retry_from_start"
        return kit.retry_background(migration, **who, from_start=from_start, repin=repin).to_dict()
    control = {
        "pause": kit.pause_background,
        "resume": kit.resume_background,
        "cancel": kit.cancel_background,
    }[action]
    return control(migration, **who).to_dict()


def _status(kit: Migronaut, migration: str) -> str:
    state = kit.background.store.get(migration, projection={"status": 1}) or {}
    return str(state.get("status"))
