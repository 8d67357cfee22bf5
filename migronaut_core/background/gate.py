"""The deploy gate: has a background migration reached a milestone, and can it still?

A deploy pipeline ships the code that needs the new shape only once the migration
got far enough. It asks one question, again and again: :func:`judge_gate` answers it
from a :class:`GateSnapshot` (status, phase, validator phase), so the CLI's
``background wait``, the kit's :meth:`~migronaut_core.kit.background.Background.wait`
and Airflow's deferrable ``BackgroundMigrationSensor`` (whose trigger reads through
:func:`~migronaut_core.background.store.gate.read_gate_async`) open and close the gate
alike. The milestones, in order:

``migrated``
    every document has the new shape: ``completed``, or ``running`` in its finalize
    phase (a validator soaking at ``warn``). The gate for shipping the code that
    writes the new shape when a ``validator`` is declared: the soak restarts on
    every old-shape write, so it can only pass once that code is out.
``completed``
    the status is ``completed`` (with a ``validator``, after its soak).
``finalized``
    ``completed`` and its declared validator enforced (``validationAction:
    error``); without a validator, the same as ``completed``.

Whatever the milestone, ``failed``, ``cancelled``, no longer registered and reverted
(``down`` or an undo registered it as a revert, whatever the revert's own status) end
the wait (``ended``): only a person (a retry, a new ``up``) moves it on. ``pending``,
``blocked``, ``running`` and ``paused`` keep it waiting (a pause is a person's, and so
is its resume).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias

from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.lanes.waiting import UNREGISTERED
from migronaut_core.background.states import TERMINAL
from migronaut_core.background.store.gate import GateSnapshot
from migronaut_core.checks import choices
from migronaut_core.clock import elapsed_ms, monotonic
from migronaut_core.json_shape import json_field, to_json_dict

__all__ = [
    "MILESTONES",
    "GateSnapshot",
    "GateVerdict",
    "Milestone",
    "WaitOutcome",
    "WaitResult",
    "judge_gate",
    "wait_for_milestone",
]

#: What a deploy can wait for, in the order a migration reaches them.
Milestone: TypeAlias = Literal["migrated", "completed", "finalized"]
MILESTONES: Final[tuple[str, ...]] = choices(Milestone)
#: How a wait ended: the milestone reached, the migration ended short of it, or time up.
WaitOutcome: TypeAlias = Literal["reached", "ended", "timed-out"]

_ENDED: Final = TERMINAL - {"completed"}
#: The verdict's ``status`` for a migration being (or done being) reverted.
REVERTED: Final = "reverted"


@dataclass(frozen=True, slots=True)
class GateVerdict:
    """The gate's answer: ``reached``, or ``ended`` short of it; ``status`` says where it is.

    ``status`` is the migration's status, or ``"unregistered"``.
    """

    outcome: Literal["reached", "ended"]
    status: str


def judge_gate(snapshot: GateSnapshot, until: Milestone) -> GateVerdict | None:
    """The verdict for a migration as ``snapshot`` shows it; None: keep waiting."""
    status = snapshot.status
    if status is None:
        return GateVerdict("ended", UNREGISTERED)
    if status in _ENDED:
        return GateVerdict("ended", status)
    if snapshot.direction == "revert":
        return GateVerdict("ended", REVERTED)
    if _reached(snapshot, until):
        return GateVerdict("reached", status)
    return None


def _reached(snapshot: GateSnapshot, until: Milestone) -> bool:
    completed = snapshot.status == "completed"
    if until == "migrated":
        soaking = snapshot.phase == "finalize" and snapshot.validator_phase == "warn"
        return completed or (snapshot.status == "running" and soaking)
    if until == "finalized":
        return completed and snapshot.validator_phase in (None, "error")
    return completed


@dataclass(frozen=True, slots=True)
class WaitResult:
    """How waiting for ``until`` ended; ``status`` is the last one read."""

    name: str
    until: str
    outcome: WaitOutcome
    status: str
    waited_seconds: float = field(metadata=json_field(name="waited_s"))

    @property
    def reached(self) -> bool:
        return self.outcome == "reached"

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


def wait_for_milestone(
    name: str,
    read_gate: Callable[[], GateSnapshot],
    *,
    until: Milestone,
    timeout: float | None,
    poll_interval: float,
    cancel: CancelToken | None = None,
    on_status: Callable[[str], None] | None = None,
) -> WaitResult:
    """Read the gate every ``poll_interval`` seconds until it answers or time is up.

    :param on_status: called with each status that differs from the last one seen
        (the first included), e.g. to print progress.
    :param cancel: ends the wait early, as a ``timed-out`` one.
    """
    token = cancel or CancelToken()
    started = monotonic()
    seen: str | None = None
    while True:
        snapshot = read_gate()
        shown = snapshot.status or UNREGISTERED
        if on_status is not None and shown != seen:
            on_status(shown)
        seen = shown
        verdict = judge_gate(snapshot, until)
        waited = elapsed_ms(started) / 1000
        if verdict is not None:
            return WaitResult(name, until, verdict.outcome, verdict.status, round(waited, 3))
        left = None if timeout is None else timeout - waited
        if (left is not None and left <= 0) or token.sleep(
            poll_interval if left is None else min(poll_interval, left)
        ):
            return WaitResult(name, until, "timed-out", shown, round(elapsed_ms(started) / 1000, 3))
