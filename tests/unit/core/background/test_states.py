"""Background statuses and the transitions between them."""

from __future__ import annotations

from typing import get_args

import pytest

from migronaut_core.background.states import (
    CANARY_PHASES,
    STATUSES,
    TERMINAL,
    VALIDATOR_PHASES,
    CanaryAction,
    CanaryMove,
    Transition,
    ValidatorAction,
    ValidatorMove,
    canary_move,
    sources,
    transition,
    validator_move,
)
from migronaut_core.errors import BackgroundConflictError
from tests.support.spec import NAME, refused

# ─── States and transitions ───────────────────────────────────────────────────

CHANGED = "changed"
SAME = "unchanged"
CONFLICT = "conflict"

#: status -> action -> expected target (or SAME, or CONFLICT).
TABLE: dict[str, dict[str, str]] = {
    "pending": {
        "pause": "paused",
        "resume": SAME,
        "cancel": "cancelled",
        "retry": SAME,
        "reopen": CONFLICT,
        "plan": "running",
        "complete": "completed",
        "fail": "failed",
        "unblock": SAME,
    },
    "blocked": {
        "pause": "paused",
        "resume": SAME,
        "cancel": "cancelled",
        "retry": SAME,
        "reopen": CONFLICT,
        "plan": CONFLICT,
        "complete": CONFLICT,
        "fail": "failed",
        "unblock": "pending",
    },
    "running": {
        "pause": "paused",
        "resume": SAME,
        "cancel": "cancelled",
        "retry": SAME,
        "reopen": CONFLICT,
        "plan": SAME,
        "complete": "completed",
        "fail": "failed",
        "unblock": SAME,
    },
    "paused": {
        "pause": SAME,
        "resume": "pending",
        "cancel": "cancelled",
        "retry": CONFLICT,
        "reopen": CONFLICT,
        "plan": CONFLICT,
        "complete": CONFLICT,
        "fail": CONFLICT,
        "unblock": CONFLICT,
    },
    "completed": {
        "pause": CONFLICT,
        "resume": CONFLICT,
        "cancel": CONFLICT,
        "retry": CONFLICT,
        "reopen": "pending",
        "plan": CONFLICT,
        "complete": SAME,
        "fail": CONFLICT,
        "unblock": CONFLICT,
    },
    "failed": {
        "pause": CONFLICT,
        "resume": CONFLICT,
        "cancel": "cancelled",
        "retry": "pending",
        "reopen": CONFLICT,
        "plan": CONFLICT,
        "complete": CONFLICT,
        "fail": SAME,
        "unblock": CONFLICT,
    },
    "cancelled": {
        "pause": CONFLICT,
        "resume": CONFLICT,
        "cancel": SAME,
        "retry": "pending",
        "reopen": CONFLICT,
        "plan": CONFLICT,
        "complete": CONFLICT,
        "fail": CONFLICT,
        "unblock": CONFLICT,
    },
}

CASES = [(status, action, TABLE[status][action]) for status in STATUSES for action in TABLE[status]]


def test_table_covers_every_status() -> None:
    assert set(TABLE) == set(STATUSES)
    assert len(CASES) == 7 * 9


@pytest.mark.parametrize(("status", "action", "expected"), CASES)
def test_transition(status: str, action: str, expected: str) -> None:
    if expected == CONFLICT:
        with pytest.raises(BackgroundConflictError) as caught:
            transition(status, action, migration=NAME)
        error = caught.value
        assert error.context == {"migration": NAME, "action": action, "status": status}
        assert error.message.startswith(
            f"cannot {action} background migration {NAME}: it is {status}"
        )
    elif expected == SAME:
        assert transition(status, action, migration=NAME) == Transition(status, SAME)  # type: ignore[arg-type]
    else:
        assert transition(status, action, migration=NAME) == Transition(expected, CHANGED)  # type: ignore[arg-type]


def test_conflict_hints() -> None:
    with pytest.raises(BackgroundConflictError, match="resume it"):
        transition("paused", "retry", migration=NAME)
    with pytest.raises(BackgroundConflictError, match="reopen"):
        transition("completed", "retry", migration=NAME)


def test_unknown_action() -> None:
    refused(lambda: transition("pending", "explode", migration=NAME), "action")


def test_unknown_status_conflicts() -> None:
    with pytest.raises(BackgroundConflictError):
        transition("unregistered", "pause", migration=NAME)


def test_terminal() -> None:
    assert frozenset({"completed", "failed", "cancelled"}) == TERMINAL


def test_the_engines_moves_leave_only_the_statuses_the_state_machine_lists() -> None:
    assert sources("plan") == ("pending",)
    assert sources("complete") == ("pending", "running")
    assert sources("fail") == ("pending", "blocked", "running")
    assert sources("unblock") == ("blocked",)


def test_the_finalize_moves_go_record_warn_enforce_and_restore_removes_the_phase() -> None:
    assert validator_move("record") == ValidatorMove((None,), "recorded")
    assert validator_move("warn").sources == ("recorded", "warn")  # a healed soak restarts
    assert validator_move("enforce") == ValidatorMove(("warn",), "error")
    restore = validator_move("restore")
    assert restore.to is None and set(restore.sources) == set(VALIDATOR_PHASES)
    reached = {validator_move(action).to for action in get_args(ValidatorAction)}
    assert reached - {None} == set(VALIDATOR_PHASES)


def test_the_canary_moves_go_soak_heal_await_promote_and_approve_only_an_awaiting_one() -> None:
    assert canary_move("soak") == CanaryMove((None, "migrating", "soaking"), "soaking")
    assert canary_move("heal") == CanaryMove(("soaking",), "migrating")
    assert canary_move("await") == CanaryMove(("soaking",), "awaiting_approval")
    assert canary_move("promote") == CanaryMove(("soaking",), "promoted")
    assert canary_move("approve") == CanaryMove(("awaiting_approval",), "promoted")
    assert canary_move("reject") == CanaryMove(("soaking", "awaiting_approval"), "soaking")
    reached = {canary_move(action).to for action in get_args(CanaryAction)}
    assert reached == set(CANARY_PHASES)
    left = {phase for action in get_args(CanaryAction) for phase in canary_move(action).sources}
    assert "promoted" not in left  # nothing leaves a promoted canary
