"""The status state machine of a background migration: the controls' moves and the engine's.

:data:`STATUSES` and :data:`TERMINAL` name where a migration can be;
:func:`transition` says where an action (a control: pause, resume, cancel,
retry, reopen; or the engine's own: plan, complete, fail, unblock) takes it, or
refuses it; :func:`sources` says what the engine's moves leave. Pure: the caller writes
the move with a compare-and-set on ``status``.

A migration that finalizes with a validator (``background.validator``) has a second,
smaller machine on its ``validator.phase`` while it stays ``running``:
:func:`validator_move` says where each finalize move (record, warn, enforce, restore)
takes it from, and to. A migration with a canary (``background.canary``) has a third,
on its ``canary.phase``: :func:`canary_move`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias, cast, get_args

from migronaut_core.errors import BackgroundConflictError, ConfigInvalidError

Status: TypeAlias = Literal[
    "pending", "blocked", "running", "paused", "completed", "failed", "cancelled"
]
#: The moves of the state machine: what controls ask for (see
#: :data:`~migronaut_core.background.control.actions.CONTROL_ACTIONS`) and what the engine does.
Action: TypeAlias = Literal[
    "pause", "resume", "cancel", "retry", "reopen", "plan", "complete", "fail", "unblock"
]
Applied: TypeAlias = Literal["changed", "unchanged"]

STATUSES: Final[tuple[Status, ...]] = get_args(Status)
#: Statuses nothing moves out of on its own; only a control action does.
TERMINAL: Final[frozenset[Status]] = frozenset({"completed", "failed", "cancelled"})


@dataclass(frozen=True, slots=True)
class Transition:
    """Where an action takes a background migration.

    ``applied == "unchanged"`` means the migration already is where the
    action leads (``to`` is its current status): nothing to write.
    """

    to: Status
    applied: Applied


_ACTIVE: Final[tuple[Status, ...]] = ("pending", "blocked", "running")

#: action -> status -> the status it moves to, or None: already there.
#: A status that is not listed is a conflict.
_MOVES: Final[Mapping[str, Mapping[str, Status | None]]] = {
    "pause": {**dict.fromkeys(_ACTIVE, "paused"), "paused": None},
    "resume": {"paused": "pending", **dict.fromkeys(_ACTIVE, None)},
    "cancel": {
        **dict.fromkeys((*_ACTIVE, "paused", "failed"), "cancelled"),
        "cancelled": None,
    },
    "retry": {"failed": "pending", "cancelled": "pending", **dict.fromkeys(_ACTIVE, None)},
    "reopen": {"completed": "pending"},
    "plan": {"pending": "running", "running": None},
    "complete": {"pending": "completed", "running": "completed", "completed": None},
    "fail": {**dict.fromkeys(_ACTIVE, "failed"), "failed": None},
    "unblock": {"blocked": "pending", "pending": None, "running": None},
}

#: What a refused move tells the person who asked for it.
_HINTS: Final[Mapping[tuple[str, str], str]] = {
    ("retry", "paused"): "resume it instead",
    ("retry", "completed"): "reopen it to run it again",
    ("resume", "failed"): "retry it instead",
    ("resume", "cancelled"): "retry it instead",
    ("resume", "completed"): "reopen it to run it again",
    ("pause", "completed"): "it has finished",
    ("cancel", "completed"): "it has finished; roll it back with down instead",
}


def sources(action: Action) -> tuple[Status, ...]:
    """The statuses ``action`` moves a migration out of (in :data:`STATUSES` order).

    What the engine's compare-and-set moves (plan, complete, fail, unblock) match
    on, so each is written from this table and nowhere else.
    """
    moves = _MOVES[action]
    return tuple(status for status in STATUSES if moves.get(status) is not None)


def transition(status: str, action: str, *, migration: str) -> Transition:
    """Return where ``action`` takes a migration that is ``status``.

    Control actions: ``pause``, ``resume`` (to ``pending``; the caller
    refines it to ``running`` or ``blocked``), ``cancel``, ``retry`` (the
    caller turns a retry of a completed migration into ``reopen``),
    ``reopen``. The engine's moves: ``plan`` (pending → running),
    ``complete``, ``fail``, ``unblock`` (blocked → pending). Pure: the
    caller writes the move with a compare-and-set on ``status``.

    :raises BackgroundConflictError: the action does not fit the status;
        ``context`` is ``{"migration", "action", "status"}``.
    :raises ConfigInvalidError: ``action`` is not an action.
    """
    moves = _MOVES.get(action)
    if moves is None:
        raise ConfigInvalidError(
            f"background migration {migration}: unknown action {str(action)[:40]!r}, "
            f"expected one of {', '.join(_MOVES)}",
            {"migration": migration, "key": "action"},
        )
    if status not in moves:
        hint = _HINTS.get((action, status))
        raise BackgroundConflictError(
            f"cannot {action} background migration {migration}: it is {status}"
            + (f" ({hint})" if hint else ""),
            {"migration": migration, "action": action, "status": status},
        )
    target = moves[status]
    if target is None:
        return Transition(to=cast(Status, status), applied="unchanged")
    return Transition(to=target, applied="changed")


#: Where a finalizing migration's validator is (``validator.phase``): the collection's
#: previous validation ``recorded`` in the state, the new validator set to ``warn``
#: (the soak), or enforced (``error``).
ValidatorPhase: TypeAlias = Literal["recorded", "warn", "error"]
#: The finalize moves: remember the previous validation, set the new validator to
#: warn, enforce it, restore the previous one (``down``; the phase is removed).
ValidatorAction: TypeAlias = Literal["record", "warn", "enforce", "restore"]
VALIDATOR_PHASES: Final[tuple[ValidatorPhase, ...]] = get_args(ValidatorPhase)


@dataclass(frozen=True, slots=True)
class ValidatorMove:
    """A finalize move: the phases it leaves (``None``: no validator phase yet) and where
    it leads (``None``: the phase is removed)."""

    sources: tuple[ValidatorPhase | None, ...]
    to: ValidatorPhase | None


#: Every finalize move, once. ``warn`` also leaves ``warn``: a soak that saw old-shape
#: documents starts again once a pass healed them.
_VALIDATOR_MOVES: Final[Mapping[ValidatorAction, ValidatorMove]] = {
    "record": ValidatorMove((None,), "recorded"),
    "warn": ValidatorMove(("recorded", "warn"), "warn"),
    "enforce": ValidatorMove(("warn",), "error"),
    "restore": ValidatorMove(("recorded", "warn", "error"), None),
}


def validator_move(action: ValidatorAction) -> ValidatorMove:
    """Where the finalize move ``action`` takes a validator phase from, and to."""
    return _VALIDATOR_MOVES[action]


#: Where a canary is (``canary.phase``): its subset being ``migrating`` (no phase yet:
#: its first pass), its checks ``soaking``, ``awaiting_approval`` (``approval = true``),
#: or ``promoted`` (the rest of the collection is migrated by the ordinary passes).
CanaryPhase: TypeAlias = Literal["migrating", "soaking", "awaiting_approval", "promoted"]
#: The canary moves: start the soak once the subset is migrated, ``heal`` old-shape
#: documents written in the subset meanwhile (another canary pass), ``await`` an
#: approval, ``promote`` (its checks passed), ``approve`` (an operator's promote) and
#: ``reject`` (an operator's no: back to soaking, the migration paused).
CanaryAction: TypeAlias = Literal["soak", "heal", "await", "promote", "approve", "reject"]
CANARY_PHASES: Final[tuple[CanaryPhase, ...]] = get_args(CanaryPhase)


@dataclass(frozen=True, slots=True)
class CanaryMove:
    """A canary move: the phases it leaves (``None``: no canary phase yet, the first
    pass) and where it leads."""

    sources: tuple[CanaryPhase | None, ...]
    to: CanaryPhase


#: Every canary move, once. ``soak`` also leaves ``soaking``: a soak a failed check
#: paused starts again on resume; ``approve`` is the operator's ``promote``, only from
#: ``awaiting_approval``.
_CANARY_MOVES: Final[Mapping[CanaryAction, CanaryMove]] = {
    "soak": CanaryMove((None, "migrating", "soaking"), "soaking"),
    "heal": CanaryMove(("soaking",), "migrating"),
    "await": CanaryMove(("soaking",), "awaiting_approval"),
    "promote": CanaryMove(("soaking",), "promoted"),
    "approve": CanaryMove(("awaiting_approval",), "promoted"),
    "reject": CanaryMove(("soaking", "awaiting_approval"), "soaking"),
}


def canary_move(action: CanaryAction) -> CanaryMove:
    """Where the canary move ``action`` takes a canary phase from, and to."""
    return _CANARY_MOVES[action]
