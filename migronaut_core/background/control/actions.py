"""Operators' controls: pause, resume, cancel, retry (reopen), repin, unlock, undo, wait,
and a canary's approve and reject.

:data:`CONTROL_ACTIONS` is the one list of what an operator may ask for; the
CLI, the Airflow operators and the UI take it from here, and
:meth:`Background.control <migronaut_core.kit.background.Background.control>`
(``kit.background.control``) applies any of them.
Each status control is a compare-and-set on the state's status, recorded in its
``history`` with who asked and why. An action that does not fit the current
status raises :class:`~migronaut_core.errors.BackgroundConflictError`; one that is
already in effect answers ``unchanged``. Every control answers a
:class:`ControlResult`.

``retry`` with ``failed_only`` retries just the documents the migration could not
rewrite (:func:`~migronaut_core.background.failed.failed_ids`): it asks for one
pass over exactly those (the state's ``replay``), which the coordinator starts and
plans and lanes work like any pass — leased, fenced, resumable, through the
guarded write and within the document error budget. It is refused
(:func:`check_failed_only`) unless the migration is completed, failed or
cancelled and has failed documents.

``cancel`` of a migration finalizing with a validator restores the collection's
validation as it was first (:func:`~migronaut_core.background.validator.released`):
a refused ``collMod`` raises ``PrivilegeMissingError`` and nothing is cancelled.

``approve`` promotes a canary that passed its checks and awaits approval
(``background.canary.approval``); ``reject`` pauses a soaking or awaiting canary and
needs a reason (:func:`canary_control`, :mod:`~migronaut_core.background.canary`).
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Final, Literal, get_args

from migronaut_core.background import canary
from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.failed import failed_ids
from migronaut_core.background.gauges import publish_status
from migronaut_core.background.lifecycle import waiting_for
from migronaut_core.background.runtime import Runtime
from migronaut_core.background.spec import Direction, match_hash, read_stored
from migronaut_core.background.states import TERMINAL, transition
from migronaut_core.background.store import StateDocument
from migronaut_core.background.undo import start_undo
from migronaut_core.background.validator import released
from migronaut_core.changelog import Actor
from migronaut_core.clock import monotonic, utc_now
from migronaut_core.errors import BackgroundConflictError, ConfigInvalidError, NotAppliedError
from migronaut_core.json_shape import json_field, to_json_dict

log = logging.getLogger("migronaut_core.background")

#: What an operator may ask of a background migration.
ControlAction = Literal[
    "pause",
    "resume",
    "cancel",
    "retry",
    "retry_from_start",
    "repin",
    "unlock",
    "undo",
    "approve",
    "reject",
]
#: Every control action, in the order they are offered.
CONTROL_ACTIONS: Final[tuple[ControlAction, ...]] = get_args(ControlAction)
#: What each action does, in one line (the CLI's help).
SUMMARIES: Final[Mapping[ControlAction, str]] = MappingProxyType(
    {
        "pause": "pause; lanes stop before their next batch",
        "resume": "resume a paused one",
        "cancel": "cancel; lanes stop before their next batch",
        "retry": "retry a failed or cancelled one (reopen a completed one)",
        "retry_from_start": "retry, dropping all progress",
        "repin": "pin the file on disk as its version",
        "unlock": "clear the coordinator lock and every lease of a stuck one",
        "undo": 'put back the before-images its undo journal kept (undo = "journal")',
        "approve": "promote a canary that passed its checks and awaits approval",
        "reject": "pause a soaking or awaiting canary, with the reason (--reason)",
    }
)
#: Each action's name on a button (the UI's).
LABELS: Final[Mapping[ControlAction, str]] = MappingProxyType(
    {
        "pause": "Pause",
        "resume": "Resume",
        "cancel": "Cancel",
        "retry": "Retry",
        "retry_from_start": "Retry from start",
        "repin": "Repin",
        "unlock": "Unlock",
        "undo": "Undo",
        "approve": "Approve canary",
        "reject": "Reject canary",
    }
)
#: What each action does, for someone about to press it (the UI's help).
EXPLANATIONS: Final[Mapping[ControlAction, str]] = MappingProxyType(
    {
        "pause": "Lanes stop before their next batch; resume continues.",
        "resume": "Run again from the checkpoints; its driver (a DAG run) is started.",
        "cancel": "Stop for good: open partitions are cancelled (retry picks them up again).",
        "retry": "Retry a failed or cancelled migration from its checkpoints.",
        "retry_from_start": "Throw this pass's progress and failed documents away and plan again.",
        "repin": "Pin the migration file on disk as its version.",
        "unlock": (
            "Clear the coordinator lock and every lease; "
            "live lanes are cut off at their next write."
        ),
        "undo": (
            "Restore every document still as the migration wrote it from its undo journal; "
            "documents changed since are left and listed by _id."
        ),
        "approve": (
            "Promote the canary: the rest of the collection is migrated by ordinary passes."
        ),
        "reject": "Pause the migration with your reason; resume soaks the canary again.",
    }
)
#: How a report says that an action was done.
DONE: Final[Mapping[ControlAction, str]] = MappingProxyType(
    {
        "pause": "paused",
        "resume": "resumed",
        "cancel": "cancelled",
        "retry": "retried",
        "retry_from_start": "retried",
        "repin": "repinned",
        "unlock": "unlocked",
        "undo": "undoing",
        "approve": "approved",
        "reject": "rejected",
    }
)
#: Actions after which the migration may have work again (its driver should run).
RESTARTING: Final[frozenset[ControlAction]] = frozenset(
    {"resume", "retry", "retry_from_start", "repin", "undo", "approve"}
)
#: Statuses in which a migration's driver has work to take up (``may_run``).
RUNNABLE: Final[frozenset[str]] = frozenset({"pending", "running"})
#: Actions that throw work away or cut live lanes off (worth a confirmation).
DESTRUCTIVE: Final[frozenset[ControlAction]] = frozenset(
    {"cancel", "retry_from_start", "unlock", "undo", "reject"}
)
#: Actions whose lanes stop before their next batch (``wait`` for them).
STOPPING: Final[frozenset[ControlAction]] = frozenset({"pause", "cancel"})
#: Actions that may pin the file on disk first (``repin``).
RETRYING: Final[frozenset[ControlAction]] = frozenset({"retry", "retry_from_start"})


@dataclass(frozen=True)
class ControlGuide:
    """One action as a front end offers it: its words and whether to confirm first."""

    action: ControlAction
    label: str
    summary: str
    explanation: str
    destructive: bool


#: Every action's guide, in the order they are offered (the UI's buttons).
CONTROL_GUIDES: Final[tuple[ControlGuide, ...]] = tuple(
    ControlGuide(
        action,
        LABELS[action],
        SUMMARIES[action],
        EXPLANATIONS[action],
        destructive=action in DESTRUCTIVE,
    )
    for action in CONTROL_ACTIONS
)

#: The status moves of the state machine (see :func:`control`).
Move = Literal["pause", "resume", "cancel", "retry"]


@dataclass(frozen=True, slots=True)
class ControlResult:
    """What a control did: ``changed`` or ``unchanged``, and the status it left.

    ``replan``: a repin changed what the migration matches (its partitions are
    planned again); ``checksum``: the file checksum a repin pinned (what the
    changelog records, so a deploy script can check it pinned the file it
    shipped). ``stopped``: with ``wait``, the lanes stopped in time.
    ``lock`` and ``leases``: an unlock cleared the coordinator lock / dropped
    this many leases. ``failed``: the documents a failed-only retry takes.
    ``may_run``: the action may have given the migration work and it is pending
    or running, so its driver should run now (a driver started otherwise would
    only find it done or failed). Not part of :meth:`to_dict`.
    """

    applied: Literal["changed", "unchanged"]
    status: str
    replan: bool | None = field(default=None, metadata=json_field(omit="none"))
    stopped: bool | None = field(default=None, metadata=json_field(omit="none"))
    lock: bool | None = field(default=None, metadata=json_field(omit="none"))
    leases: int | None = field(default=None, metadata=json_field(omit="none"))
    checksum: str | None = field(default=None, metadata=json_field(omit="none"))
    failed: int | None = field(default=None, metadata=json_field(omit="none"))
    may_run: bool = field(default=False, metadata=json_field(omit="always"))

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


def settled(action: ControlAction, result: ControlResult) -> ControlResult:
    """``result`` with ``may_run`` decided: a restarting action that left it runnable."""
    return replace(result, may_run=action in RESTARTING and result.status in RUNNABLE)


def check_control(
    action: str, *, wait: bool = False, repin: bool = False, failed_only: bool = False
) -> ControlAction:
    """``action`` as a :data:`ControlAction`, with options that fit it.

    :raises ConfigInvalidError: an unknown action, ``wait`` with an action that
        stops no lane, ``repin`` with one that is not a retry, or ``failed_only``
        with one that is not ``retry``.
    """
    known = next((listed for listed in CONTROL_ACTIONS if listed == action), None)
    if known is None:
        raise ConfigInvalidError(
            f"unknown action {action!r}; expected one of {', '.join(CONTROL_ACTIONS)}",
            {"key": "action"},
        )
    if wait and known not in STOPPING:
        raise ConfigInvalidError(
            "wait goes with pause and cancel only", {"key": "wait", "action": known}
        )
    if repin and known not in RETRYING:
        raise ConfigInvalidError(
            "repin goes with retry and retry_from_start only", {"key": "repin", "action": known}
        )
    if failed_only and known != "retry":
        raise ConfigInvalidError(
            "failed_only goes with retry only", {"key": "failed_only", "action": known}
        )
    return known


def check_failed_only(rt: Runtime, state: StateDocument) -> list[Any]:
    """The documents a failed-only retry of ``state`` would take (never empty).

    :raises BackgroundConflictError: the migration is not completed, failed or
        cancelled (lanes may still be writing, or another retry is under way), or it
        has no failed documents; ``context["reason"]`` says which (``status``,
        ``no-failed-documents``). Nothing was written.
    """
    name, status = state["_id"], state["status"]
    context: dict[str, Any] = {"migration": name, "action": "retry", "failed_only": True}
    if status not in TERMINAL:
        raise BackgroundConflictError(
            f"cannot retry the failed documents of background migration {name}: it is "
            f"{status}; a failed-only retry needs it completed, failed or cancelled",
            {**context, "status": status, "reason": "status"},
        )
    ids = failed_ids(rt.store, state)
    if not ids:
        raise BackgroundConflictError(
            f"cannot retry the failed documents of background migration {name}: it has none",
            {**context, "status": status, "reason": "no-failed-documents"},
        )
    return ids


def _registered(rt: Runtime, name: str, action: str) -> StateDocument:
    """The state a control acts on: every control's one registration check.

    :raises NotAppliedError: it is not registered (as the kit's reads say).
    """
    state = rt.store.states.get(name)
    if state is None:
        raise NotAppliedError(
            f"background migration {name} is not registered; run `migronaut up` first",
            {"migration": name, "action": action},
        )
    return state


def control(
    rt: Runtime,
    name: str,
    action: Move,
    *,
    actor: Actor | None = None,
    from_start: bool = False,
    failed_only: bool = False,
) -> ControlResult:
    """Move a background migration's status by ``action``; see the module docstring.

    :raises BackgroundConflictError: the action does not fit its status (with
        ``failed_only``: see :func:`check_failed_only`).
    """
    who = actor or Actor()
    for _ in range(10):
        state = _registered(rt, name, action)
        retrying = check_failed_only(rt, state) if failed_only else None
        effective = "reopen" if action == "retry" and state["status"] == "completed" else action
        move = transition(state["status"], effective, migration=name)
        if move.applied == "unchanged":
            return ControlResult("unchanged", state["status"])
        target, fields = _plan_move(rt, state, action, effective, move.to, from_start, who)
        if retrying is not None:
            fields.update(_replay_fields(retrying))
        # A cancel of a finalizing migration takes its validator back first (under the
        # coordinator's lock): a cancelled migration enforces nothing on the collection.
        with released(rt, state) if action == "cancel" else contextlib.nullcontext():
            moved = rt.store.states.move(
                name,
                from_statuses=[state["status"]],
                to=target,
                action=action if effective != "reopen" else "reopen",
                fields=fields,
                by=who.requested_by,
                reason=who.reason,
                note=None if retrying is None else {"failed_only": True, "failed": len(retrying)},
            )
        if moved is None:
            continue  # someone moved it first: judge again from what it is now
        if retrying is None:
            _adjust_partitions(rt, state, action, effective, from_start)
        rt.emit(
            "background:control",
            {
                "migration": name,
                "action": action,
                "from": state["status"],
                "to": target,
                "requested_by": who.requested_by,
                **({} if retrying is None else {"failed_only": True, "failed": len(retrying)}),
            },
        )
        log.info("%s: %s (%s -> %s)", name, action, state["status"], target)
        publish_status(rt, name)
        failed = None if retrying is None else len(retrying)
        return ControlResult("changed", target, failed=failed)
    raise BackgroundConflictError(
        f"background migration {name} kept changing while {action} was applied; try again",
        {"migration": name, "action": action},
    )


def _plan_move(
    rt: Runtime,
    state: StateDocument,
    action: str,
    effective: str,
    target: str,
    from_start: bool,
    actor: Actor,
) -> tuple[str, dict[str, Any]]:
    fields: dict[str, Any] = {"control": {**actor.fields(), "action": action, "at": utc_now()}}
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
                "replay": None,
            }
        )
    elif action == "retry":
        fields["failed_partitions"] = 0
        if _pass_closed(state):
            fields["phase"] = "partition"
    return target, fields


def _replay_fields(ids: list[Any]) -> dict[str, Any]:
    """A failed-only retry's request, which a coordinator step starts (a new pass).

    ``ids``, every failed document, are written back to ``bad_ids`` so the step that
    starts the request takes each one: also those of an earlier failed-only retry a
    failure cut short, and those still on the partitions of a pass a failure cut
    short (the step rolls that pass up first; merging keeps each id once). Those
    partitions are left as they are, not reopened.
    """
    return {
        "replay": {"token": uuid.uuid4().hex, "requested_at": utc_now()},
        "bad_ids": ids,
        "phase": "partition",
        "failed_partitions": 0,
    }


def _pass_closed(state: StateDocument) -> bool:
    """A pass whose counters were rolled up is not resumed: a new pass takes what is left."""
    return state.get("plan") is not None and int(state.get("rolled_generation", 0)) >= int(
        state.get("generation", 0)
    )


def _adjust_partitions(
    rt: Runtime, state: StateDocument, action: str, effective: str, from_start: bool
) -> None:
    plan = state.get("plan")
    if plan is None:
        return
    name, generation, token = state["_id"], int(state["generation"]), plan["token"]
    if action == "cancel":
        rt.store.partitions.set_open_partitions(
            name, generation=generation, plan=token, status="cancelled"
        )
    elif action == "retry" and from_start:
        rt.store.partitions.drop_generations(name, generation)
    elif action == "retry" and effective != "reopen" and not _pass_closed(state):
        rt.store.partitions.set_open_partitions(
            name,
            generation=generation,
            plan=token,
            status="pending",
            from_statuses=["failed", "cancelled"],
        )


def repin(rt: Runtime, name: str, *, actor: Actor | None = None) -> ControlResult:
    """Pin the file on disk as the migration's version; replan when what it matches changed.

    The result's ``checksum`` is the one pinned (the changelog records it too).
    """
    who = actor or Actor()
    state = _registered(rt, name, "repin")
    loaded = rt.load(name)
    before = read_stored(state["spec"]) if state.get("spec") else loaded.spec
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
        "control": {**who.fields(), "action": "repin", "at": utc_now()},
    }
    if replan and state["status"] not in TERMINAL and state.get("plan") is not None:
        fields["phase"] = "replan"
    rt.store.states.set(name, fields)
    rt.store.states.note(name, {"action": "repin", **who.fields(), "replan": replan})
    rt.emit("background:control", {"migration": name, "action": "repin", "replan": replan})
    return ControlResult("changed", state["status"], replan=replan, checksum=loaded.checksum)


#: The status an unlock answers for a name with no state document.
UNREGISTERED: Final = "unregistered"


def unlock(rt: Runtime, name: str, *, actor: Actor | None = None) -> ControlResult:
    """Clear the coordinator lock and every lease; live lanes are fenced at their next write.

    ``changed`` when a lock or a lease was cleared; the status is left as it was.
    Works on any name, registered or not: a lock or leases left behind by a
    migration whose state was withdrawn or deleted would otherwise stay until
    they expire, with no control to clear them. Recorded in the state's history
    when there is a state (status ``unregistered`` when there is none).
    """
    who = actor or Actor()
    state = rt.store.states.get(name, projection={"status": 1})
    lock = rt.lock_for(name).force_release() is not None
    leases = rt.store.leases.unlock_all(name)
    if state is not None:
        rt.store.states.note(
            name, {"action": "unlock", "lock": lock, "leases": leases, **who.fields()}
        )
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
    applied: Literal["changed", "unchanged"] = "changed" if lock or leases else "unchanged"
    status = UNREGISTERED if state is None else state["status"]
    return ControlResult(applied, status, lock=lock, leases=leases)


def undo(rt: Runtime, name: str, *, actor: Actor | None = None) -> ControlResult:
    """Start the undo of ``name`` from its journal (:func:`~..undo.start_undo`).

    ``unchanged`` when its undo is registered already (whatever its status).
    Recorded in its history as ``undo``.

    :raises NotAppliedError: it is not registered.
    :raises UndoUnavailableError: it keeps no journal, is a revert, or still runs;
        nothing was written.
    """
    state = _registered(rt, name, "undo")
    if state.get("undo") == "journal":
        return ControlResult("unchanged", state["status"])
    undone = start_undo(rt, name, actor=actor)
    rt.emit("background:control", {"migration": name, "action": "undo"})
    log.warning("%s: undo from its journal registered", name)
    return ControlResult("changed", undone["status"])


def canary_control(
    rt: Runtime, name: str, action: ControlAction, *, actor: Actor | None = None
) -> ControlResult:
    """Approve (promote) or reject (pause, with the reason) a migration's canary.

    ``approve`` of a promoted canary answers ``unchanged``. Recorded in its history
    with who asked and why.

    :raises ConfigInvalidError: ``reject`` without a reason; nothing was written.
    :raises NotAppliedError: it is not registered.
    :raises BackgroundConflictError: it has no canary, or its canary is not where the
        action fits (approve: awaiting approval; reject: soaking or awaiting).
    """
    who = actor or Actor()
    if action == "reject" and not (who.reason or "").strip():
        raise ConfigInvalidError(
            "reject needs a reason (--reason): it is what the paused migration shows",
            {"key": "reason", "action": "reject", "migration": name},
        )
    for _ in range(10):
        state = _registered(rt, name, action)
        if action == "approve":
            moved = canary.approve(rt, state, who)
            if moved is None:
                return ControlResult("unchanged", state["status"])
        else:
            moved = canary.reject(rt, state, who)
            if moved is None:
                continue  # its status moved meanwhile: judge again
        rt.emit(
            "background:control",
            {
                "migration": name,
                "action": action,
                "from": state["status"],
                "to": moved["status"],
                "requested_by": who.requested_by,
            },
        )
        publish_status(rt, name)
        return ControlResult("changed", moved["status"])
    raise BackgroundConflictError(
        f"background migration {name} kept changing while {action} was applied; try again",
        {"migration": name, "action": action},
    )


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
    until = monotonic() + timeout_seconds
    while True:
        if rt.store.leases.live_leases(name) == 0:
            return True
        if monotonic() >= until or token.sleep(poll_seconds):
            return False
