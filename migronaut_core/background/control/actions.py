"""Operators' controls: pause, resume, cancel, retry (reopen), repin, unlock, wait.

Each control is a compare-and-set on the state's status, recorded in its
``history`` with who asked and why. An action that does not fit the current
status raises :class:`~migronaut_core.errors.BackgroundConflictError`; one that is
already in effect answers ``unchanged``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Literal

import pendulum

from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.control.states import TERMINAL, transition
from migronaut_core.background.lifecycle import waiting_for
from migronaut_core.background.runtime import Runtime
from migronaut_core.background.spec import BackgroundSpec, Direction, match_hash
from migronaut_core.changelog import Actor
from migronaut_core.errors import BackgroundConflictError

log = logging.getLogger("migronaut_core.background")

Action = Literal["pause", "resume", "cancel", "retry"]


@dataclass(frozen=True, slots=True)
class ControlResult:
    applied: Literal["changed", "unchanged"]
    status: str
    replan: bool | None = None
    stopped: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"applied": self.applied, "status": self.status}
        if self.replan is not None:
            data["replan"] = self.replan
        if self.stopped is not None:
            data["stopped"] = self.stopped
        return data


def _registered(rt: Runtime, name: str, action: str) -> dict[str, Any]:
    state = rt.store.get(name)
    if state is None:
        raise BackgroundConflictError(
            f"background migration {name} is not registered; run `migronaut up` first",
            {"migration": name, "action": action, "status": "unregistered"},
        )
    return state


def control(
    rt: Runtime,
    name: str,
    action: Action,
    *,
    actor: Actor | None = None,
    from_start: bool = False,
) -> ControlResult:
    """Apply ``action`` to a background migration; see the module docstring."""
    who = actor or Actor()
    for _ in range(10):
        state = _registered(rt, name, action)
        effective = "reopen" if action == "retry" and state["status"] == "completed" else action
        move = transition(state["status"], effective, migration=name)
        if move.applied == "unchanged":
            return ControlResult("unchanged", state["status"])
        target, fields = _plan_move(rt, state, action, effective, move.to, from_start, who)
        moved = rt.store.move(
            name,
            from_statuses=[state["status"]],
            to=target,
            action=action if effective != "reopen" else "reopen",
            fields=fields,
            by=who.requested_by,
            reason=who.reason,
        )
        if moved is None:
            continue  # someone moved it first: judge again from what it is now
        _adjust_partitions(rt, state, action, effective, from_start)
        rt.emit(
            "background:control",
            {
                "migration": name,
                "action": action,
                "from": state["status"],
                "to": target,
                "requested_by": who.requested_by,
            },
        )
        log.info("%s: %s (%s -> %s)", name, action, state["status"], target)
        return ControlResult("changed", target)
    raise BackgroundConflictError(
        f"background migration {name} kept changing while {action} was applied; try again",
        {"migration": name, "action": action},
    )


def _plan_move(
    rt: Runtime,
    state: dict[str, Any],
    action: str,
    effective: str,
    target: str,
    from_start: bool,
    actor: Actor,
) -> tuple[str, dict[str, Any]]:
    fields: dict[str, Any] = {
        "control": {**actor.fields(), "action": action, "at": pendulum.now("UTC")}
    }
    if action == "resume":
        waits = waiting_for(rt, list(state.get("requires") or []))
        if waits:
            target = "blocked"
            fields["waits_for"] = waits
        elif state.get("plan") is not None and state.get("phase") == "process":
            target = "running"
    if effective == "reopen":
        fields["phase"] = "partition"
        fields["reopened"] = int(state.get("reopened", 0)) + 1
    if action == "retry" and from_start:
        fields.update(
            {
                "phase": "partition",
                "pass": 0,
                "bad_ids": [],
                "failed_partitions": 0,
                "doc_errors": [],
                "last_error": None,
            }
        )
    elif action == "retry":
        fields["failed_partitions"] = 0
        if _pass_closed(state):
            fields["phase"] = "partition"
    return target, fields


def _pass_closed(state: dict[str, Any]) -> bool:
    """A pass whose counters were rolled up is not resumed: a new pass takes what is left."""
    return state.get("plan") is not None and int(state.get("rolled_generation", 0)) >= int(
        state.get("generation", 0)
    )


def _adjust_partitions(
    rt: Runtime, state: dict[str, Any], action: str, effective: str, from_start: bool
) -> None:
    plan = state.get("plan")
    if plan is None:
        return
    name, generation, token = state["_id"], int(state["generation"]), plan["token"]
    if action == "cancel":
        rt.store.set_open_partitions(name, generation=generation, plan=token, status="cancelled")
    elif action == "retry" and from_start:
        rt.store.drop_generations(name, generation)
    elif action == "retry" and effective != "reopen" and not _pass_closed(state):
        rt.store.set_open_partitions(
            name,
            generation=generation,
            plan=token,
            status="pending",
            from_statuses=["failed", "cancelled"],
        )


def repin(rt: Runtime, name: str, *, actor: Actor | None = None) -> tuple[ControlResult, str]:
    """Pin the file on disk as the migration's version; replan when what it matches changed.

    Returns the result and the new checksum (for the changelog).
    """
    who = actor or Actor()
    state = _registered(rt, name, "repin")
    loaded = rt.load(name)
    before = BackgroundSpec.from_document(state["spec"]) if state.get("spec") else loaded.spec
    after = loaded.spec
    direction: Direction = "revert" if state.get("direction") == "revert" else "forward"
    replan = (
        match_hash(before, direction) != match_hash(after, direction)
        or before.max_parallel != after.max_parallel
        or before.partitions != after.partitions
    )
    fields: dict[str, Any] = {
        "checksum": loaded.checksum,
        "spec": after.to_document(),
        "control": {**who.fields(), "action": "repin", "at": pendulum.now("UTC")},
    }
    if replan and state["status"] not in TERMINAL and state.get("plan") is not None:
        fields["phase"] = "replan"
    rt.store.set(name, fields)
    rt.store.note(name, {"action": "repin", **who.fields(), "replan": replan})
    rt.emit("background:control", {"migration": name, "action": "repin", "replan": replan})
    return ControlResult("changed", state["status"], replan=replan), loaded.checksum


def unlock(rt: Runtime, name: str, *, actor: Actor | None = None) -> dict[str, Any]:
    """Clear the coordinator lock and every lease; live lanes are fenced at their next write."""
    who = actor or Actor()
    _registered(rt, name, "unlock")
    lock = rt.lock_for(name).force_release() is not None
    leases = rt.store.unlock_all(name)
    rt.store.note(name, {"action": "unlock", "lock": lock, "leases": leases, **who.fields()})
    rt.emit(
        "background:control",
        {"migration": name, "action": "unlock", "lock": lock, "leases": leases},
    )
    log.warning(
        "%s: unlocked (coordinator lock %s, %d lease(s) dropped)",
        name,
        "cleared" if lock else "not held",
        leases,
    )
    return {"lock": lock, "leases": leases}


def wait_for_lanes(
    rt: Runtime,
    name: str,
    *,
    timeout_seconds: float = 120.0,
    poll_seconds: float = 0.25,
    cancel: CancelToken | None = None,
) -> bool:
    """Wait until no lane holds a lease; False when the timeout came first."""
    token = cancel or CancelToken()
    until = time.monotonic() + timeout_seconds
    while True:
        if rt.store.live_leases(name) == 0:
            return True
        if time.monotonic() >= until or token.sleep(poll_seconds):
            return False
