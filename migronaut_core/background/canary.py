"""A canary, then promotion: the first pass migrates a subset, which is checked while it soaks.

A forward migration whose spec has ``canary`` runs its first pass over the canary's
subset only (:func:`~migronaut_core.background.job.canary_active`). When that pass
leaves no old-shape document in the subset, the coordinator soaks it, one step at a
time (answering ``wait`` in between, as for a validator's soak). The moves of
``canary.phase`` are :func:`~migronaut_core.background.states.canary_move`'s:

1. ``soak``: the subset is migrated; every step then runs the checks (:func:`run_checks`):
   ``counts`` (the subset's documents by version; the subset must hold a migrated
   document while others still wait outside it), ``drift`` (the old-shape share of the
   subset, counted with the drift probe's rule, must stay within
   ``checks.max_drift``), ``idempotence`` (a sample of migrated documents run through
   the transform again, on copies, must not change; one the transform refuses in the
   new shape is counted as ``raised``, not against it) and ``check`` (the file's
   ``check(ctx)``);
2. a failing check pauses the migration with the check's name and its value-free
   reason (``canary.failed``, the history's reason); ``resume`` starts the soak again;
3. old-shape documents within the limit: ``heal`` (another pass over the subset), then
   the soak starts over; it passes after ``canary.soak.passes`` clean checks in a row
   once ``canary.soak.seconds`` have passed since it (re)started;
4. a passing canary is ``promote``\\ d (its state's phase back to ``partition``: the next
   pass is an ordinary one over the rest), or, with ``approval``, it ``await``\\ s an
   operator's ``approve`` (:func:`approve`) or ``reject`` (:func:`reject`: paused, with
   the reason).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Final, Literal

from pymongo.database import Database

from migronaut_core.background.dry_run.preview import transformed
from migronaut_core.background.indexes import probe_query
from migronaut_core.background.job import Job
from migronaut_core.background.runtime import Runtime
from migronaut_core.background.spec import CanarySettings, canary_subset, in_canary
from migronaut_core.background.states import CanaryAction, canary_move
from migronaut_core.background.store import CanaryDocument, StateDocument
from migronaut_core.bson_values import clone_document
from migronaut_core.changelog import Actor
from migronaut_core.clock import monotonic, utc_now
from migronaut_core.errors import BackgroundConflictError
from migronaut_core.scrub import error_text
from migronaut_core.versioning import version_filter

log = logging.getLogger("migronaut_core.background")

#: Documents of one version a check counts at most (the status says "at least").
COUNT_LIMIT: Final = 1_000_000
#: The ``wait`` reason of a canary that passed its checks and awaits an operator's approve.
AWAITING_APPROVAL: Final = "canary-approval"
#: How often a soaking canary is checked, and an awaiting one looked at (``wait``).
SOAK_POLL_MS: Final = 5_000
#: A soak check waits at least this many times as long as the last check took, so the
#: checks of a large subset (a fraction hashes every old-shape ``_id``) stay a small
#: share of the server's time.
CHECK_SPACING: Final = 10
#: The longest reason a failed check keeps.
MAX_REASON: Final = 300
#: The statuses a canary is rejected from (its coordinator may still be stepping).
_RUNNING: Final = ("pending", "running")
#: The ``done`` reason of a migration a failing check paused.
FAILED: Final = "canary-failed"
#: Who the history names when a check pauses a migration.
ENGINE: Final = "migronaut"

CanaryCheck = Literal["counts", "drift", "idempotence", "check"]
CanaryOutcome = Literal["soaking", "heal", "awaiting", "promoted", "paused"]


@dataclass(frozen=True, slots=True)
class CanaryContext:
    """What a canary's ``check(ctx)`` receives.

    ``subset``: the query of the canary's documents (the migration's filter ANDed with
    the canary's); ``counts``: ``{"old", "new"}`` in it at this check; ``db``: the
    target database, for reads (a check must not write).
    """

    migration: str
    collection: str
    subset: dict[str, Any]
    counts: dict[str, int]
    db: Database[dict[str, Any]]
    log: logging.Logger


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One soak check: the subset's ``counts``, its ``drift``, what the idempotence
    check's ``sample`` found (None: not run), and the failing check (``failed``, with
    its value-free ``reason``), if any."""

    counts: dict[str, int]
    drift: float
    sample: dict[str, int] | None = None
    failed: CanaryCheck | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class CanaryStep:
    """What a canary step did, the state after it, and when to step again (``soaking``,
    ``awaiting``)."""

    outcome: CanaryOutcome
    state: StateDocument
    retry_after_ms: int = 0
    reason: str | None = field(default=None)


def begin(rt: Runtime, job: Job, state: StateDocument) -> CanaryStep:
    """The subset is migrated: start (or, after a heal, restart) the soak and check once."""
    assert job.spec.canary is not None
    now = utc_now()
    moved = _moved(rt, state["_id"], "soak", _fresh_soak(job.spec.canary, now), {"phase": "canary"})
    log.info("%s: canary subset migrated; soaking", state["_id"])
    return soak(rt, job, moved)


def soak(rt: Runtime, job: Job, state: StateDocument) -> CanaryStep:
    """One canary step: promote an approved canary, wait for an approval, or check."""
    name, settings = state["_id"], job.spec.canary
    canary: CanaryDocument | None = state.get("canary")
    assert settings is not None
    if state["status"] not in _RUNNING:  # paused (a reject) or cancelled meanwhile
        return CanaryStep("paused", state)
    if canary is None:  # not soaking yet: a registration replaced the state mid-step
        return CanaryStep("soaking", state, SOAK_POLL_MS)
    if canary["phase"] == "promoted":
        return CanaryStep("promoted", _partition_again(rt, name, state))
    if canary["phase"] == "awaiting_approval":
        return CanaryStep("awaiting", state, SOAK_POLL_MS, AWAITING_APPROVAL)
    if canary.get("failed") is not None or canary.get("rejected") is not None:
        # Resumed after a failed check or a rejection: soak afresh.
        state = _moved(rt, name, "soak", _fresh_soak(settings, utc_now()))
        canary = state.get("canary") or canary
    started = monotonic()
    result = run_checks(rt, job, state)
    spacing_ms = int((monotonic() - started) * 1000 * CHECK_SPACING)
    now = utc_now()
    checked = {
        "counts": result.counts,
        "drift": result.drift,
        "checked_at": now,
        **({} if result.sample is None else {"sample": result.sample}),
    }
    if result.failed is not None:
        return _paused(rt, state, checked, result)
    step = _unless_stopped(_after_checks(rt, settings, state, canary, result, checked))
    if step.outcome != "soaking":
        return step
    return replace(step, retry_after_ms=max(step.retry_after_ms, spacing_ms))


def _after_checks(
    rt: Runtime,
    settings: CanarySettings,
    state: StateDocument,
    canary: CanaryDocument,
    result: CheckResult,
    checked: dict[str, Any],
) -> CanaryStep:
    """Checks passed: heal, soak on, await an approval, or promote."""
    name, now = state["_id"], checked["checked_at"]
    if result.counts["old"] > 0:
        log.warning(
            "%s: %d old-shape document(s) written to its canary subset during the soak; "
            "migrating them before the soak goes on",
            name,
            result.counts["old"],
        )
        healed = _moved(rt, name, "heal", {**checked, "clean_passes": 0}, {"phase": "partition"})
        return CanaryStep("heal", healed)
    clean = int(canary.get("clean_passes", 0)) + 1
    wait = settings.soak.wait_ms(clean, canary.get("until"), now, SOAK_POLL_MS)
    if wait is not None:
        moved = _moved(rt, name, "soak", {**checked, "clean_passes": clean})
        return CanaryStep("soaking", moved, wait, "canary-soak")
    if settings.approval:
        moved = _moved(rt, name, "await", {**checked, "clean_passes": clean})
        log.info("%s: canary passed its checks; awaiting approval", name)
        return CanaryStep("awaiting", moved, SOAK_POLL_MS, AWAITING_APPROVAL)
    moved = _moved(rt, name, "promote", {**checked, "clean_passes": clean}, {"phase": "partition"})
    log.info("%s: canary passed its checks; promoted", name)
    return CanaryStep("promoted", moved)


def _unless_stopped(step: CanaryStep) -> CanaryStep:
    """A move a control's pause (a reject) or cancel beat during the checks: stopped."""
    if step.state["status"] not in _RUNNING:
        return CanaryStep("paused", step.state)
    return step


def run_checks(rt: Runtime, job: Job, state: StateDocument) -> CheckResult:
    """Run the soak's checks in order; the first that fails is the result's ``failed``."""
    settings = job.spec.canary
    assert settings is not None
    counts = _counts(rt, job, state, settings)
    seen = counts["old"] + counts["new"]
    drift = counts["old"] / seen if seen else 0.0
    if counts["new"] == 0 and _waiting_outside(rt, job, settings):
        return CheckResult(
            counts,
            drift,
            None,
            "counts",
            "the canary subset holds no migrated document while others wait outside it; "
            "widen canary.fraction or canary.filter",
        )
    if drift > settings.max_drift:
        return CheckResult(
            counts,
            drift,
            None,
            "drift",
            f"{counts['old']} old-shape document(s) in the canary subset "
            f"({drift:.2%}, above canary.checks.max_drift {settings.max_drift:.2%}): "
            "is an old release still writing?",
        )
    problem, sample = _idempotence(rt, job, settings)
    if problem is not None:
        return CheckResult(counts, drift, sample, "idempotence", problem)
    problem = _user_check(rt, job, settings, counts)
    if problem is not None:
        return CheckResult(counts, drift, sample, "check", problem)
    return CheckResult(counts, drift, sample)


def approve(rt: Runtime, state: StateDocument, actor: Actor) -> StateDocument | None:
    """Promote a canary that awaits approval; None when it already is promoted.

    Recorded under ``canary.approved`` and in the history; the coordinator's next
    step plans the rest of the collection.

    :raises BackgroundConflictError: it has no canary, or its canary is not awaiting
        approval (still migrating or soaking); ``context["reason"]`` says which.
    """
    name = state["_id"]
    phase = _phase_for(state, "approve")
    if phase == "promoted":
        return None
    if phase != "awaiting_approval":
        raise _conflict(state, "approve", phase, "its checks have not passed yet")
    moved = rt.store.states.move_canary(
        name, canary_move("approve"), {"approved": {**actor.fields(), "at": utc_now()}}
    )
    if moved is None:
        current = rt.store.states.get(name) or state
        return approve(rt, current, actor)
    rt.store.states.note(name, {"action": "approve", **actor.fields()})
    log.info("%s: canary approved; promoting", name)
    return moved


def reject(rt: Runtime, state: StateDocument, actor: Actor) -> StateDocument | None:
    """Pause a migration whose canary is soaking or awaiting approval, with the reason.

    Recorded under ``canary.rejected`` and in the history; ``resume`` soaks it again.
    None when its status moved meanwhile (judge again).

    :raises BackgroundConflictError: no canary, or its canary is not soaking or
        awaiting approval, or the migration is not running.
    """
    name = state["_id"]
    phase = _phase_for(state, "reject")
    if phase not in ("soaking", "awaiting_approval") or state["status"] not in _RUNNING:
        raise _conflict(state, "reject", phase, "only a soaking or awaiting canary is rejected")
    rt.store.states.move_canary(
        name, canary_move("reject"), {"rejected": {**actor.fields(), "at": utc_now()}}
    )
    return rt.store.states.move(
        name,
        from_statuses=[state["status"]],
        to="paused",
        action="reject",
        fields={"control": {**actor.fields(), "action": "reject", "at": utc_now()}},
        by=actor.requested_by,
        reason=actor.reason,
    )


def subset_of(job: Job) -> dict[str, Any]:
    """The query of the canary's documents, in any shape (the spec's filter ANDed)."""
    assert job.spec.canary is not None
    return in_canary(clone_document(job.spec.filter), job.spec.canary)


def _counts(
    rt: Runtime, job: Job, state: StateDocument, settings: CanarySettings
) -> dict[str, int]:
    """The subset's documents by version: ``old`` as the drift probe counts them (the
    source version, known failed documents left out), ``new`` at the target version."""
    old_match, hint = probe_query(rt, job.spec, list(state.get("bad_ids") or []))
    options: dict[str, Any] = {"limit": COUNT_LIMIT}
    if hint is not None:
        options["hint"] = hint
    collection = rt.db[job.collection]
    old = collection.count_documents(in_canary(old_match, settings), **options)
    new = collection.count_documents(_migrated(job), **options)
    return {"old": old, "new": new}


def _migrated(job: Job) -> dict[str, Any]:
    new = clone_document(job.spec.filter)
    new.update(version_filter(job.spec.field, job.spec.to_version))
    assert job.spec.canary is not None
    return in_canary(new, job.spec.canary)


def _waiting_outside(rt: Runtime, job: Job, settings: CanarySettings) -> bool:
    """Whether old-shape documents wait outside the subset (a canary over none proves
    nothing while they do)."""
    old, _ = probe_query(rt, job.spec)
    outside = {"$and": [old, {"$nor": [canary_subset(settings)]}]}
    return rt.db[job.collection].count_documents(outside, limit=1) > 0


def _idempotence(
    rt: Runtime, job: Job, settings: CanarySettings
) -> tuple[str | None, dict[str, int]]:
    """Run the transform again on a sample of migrated documents (copies; nothing is
    written): a reason when one changes, and what the sample found (``sampled``,
    ``changed``, ``raised``: documents the transform refuses in the new shape, which
    the engine never gives it, so they are not counted against it)."""
    pipeline: list[dict[str, Any]] = [
        {"$match": _migrated(job)},
        {"$sample": {"size": settings.sample}},
    ]
    docs = list(rt.db[job.collection].aggregate(pipeline))
    previews = transformed(rt, job, docs) if docs else []
    changing = [preview for preview in previews if preview.error is None and preview.changed]
    raised = sum(1 for preview in previews if preview.error is not None)
    found = {"sampled": len(docs), "changed": len(changing), "raised": raised}
    if not changing:
        return None, found
    stamps = {job.spec.field, job.spec.revision_field}
    fields = sorted(
        {
            name
            for preview in changing
            for name in (*preview.set_fields, *preview.unset_fields)
            if name not in stamps
        }
    )
    reason = (
        f"{len(changing)} of {len(docs)} sampled migrated document(s) change when the "
        f"transform runs again (fields: {', '.join(fields)}): it is not idempotent"
    )
    return reason[:MAX_REASON], found


def _user_check(
    rt: Runtime, job: Job, settings: CanarySettings, counts: Mapping[str, int]
) -> str | None:
    """Run the file's ``check(ctx)``: ``True`` (or ``None``) passes; ``False`` or
    ``(False, reason)`` fails; an exception fails with its type (never its message)."""
    check: Callable[..., Any] | None = job.fns.check
    if check is None:
        return None
    ctx = CanaryContext(
        migration=job.name,
        collection=job.collection,
        subset=subset_of(job),
        counts=dict(counts),
        db=rt.db,
        log=job.log,
    )
    try:
        answer = check(ctx)
    except Exception as exc:
        return f"check() raised {error_text(exc)}"[:MAX_REASON]
    passed, reason = (answer[0], answer[1]) if isinstance(answer, tuple) else (answer, None)
    if passed is None or passed is True:
        return None
    return str(reason or "check() returned False")[:MAX_REASON]


def _fresh_soak(settings: CanarySettings, now: datetime) -> dict[str, Any]:
    return {**settings.soak.started(now), "failed": None, "rejected": None}


def _paused(
    rt: Runtime, state: StateDocument, checked: dict[str, Any], result: CheckResult
) -> CanaryStep:
    """Record the failing check, then pause the migration with it as the reason."""
    name = state["_id"]
    failed = {"check": result.failed, "reason": result.reason, "at": checked["checked_at"]}
    _moved(rt, name, "soak", {**checked, "clean_passes": 0, "failed": failed})
    reason = f"canary check {result.failed} failed: {result.reason}"
    log.warning("%s: %s; paused", name, reason)
    paused = rt.store.states.move(
        name,
        from_statuses=[state["status"]],
        to="paused",
        action="pause",
        fields={"control": {"requested_by": ENGINE, "action": "pause", "at": utc_now()}},
        by=ENGINE,
        reason=reason,
    )
    rt.emit(
        "background:control",
        {
            "migration": name,
            "action": "pause",
            "from": state["status"],
            "to": "paused",
            "requested_by": ENGINE,
            "canary": result.failed,
        },
    )
    return CanaryStep("paused", paused or rt.store.states.get(name) or state, reason=FAILED)


def _partition_again(rt: Runtime, name: str, state: StateDocument) -> StateDocument:
    """An approved canary: its state's phase back to ``partition`` (the rest's pass)."""
    moved = rt.store.states.cas(
        name, {"phase": "canary"}, {"$set": {"phase": "partition", "updated_at": utc_now()}}
    )
    return moved or rt.store.states.get(name) or state


def _moved(
    rt: Runtime,
    name: str,
    action: CanaryAction,
    fields: dict[str, Any],
    state_fields: dict[str, Any] | None = None,
) -> StateDocument:
    """Apply a coordinator's canary move while the migration runs; under the coordinator's
    lock only a control moves it too (approve, reject, a pause), and then the state as
    it is now is returned."""
    moved = rt.store.states.move_canary(
        name, canary_move(action), fields, state_fields, statuses=_RUNNING
    )
    if moved is None:
        current = rt.store.states.get(name)
        assert current is not None, name
        return current
    return moved


def _phase_for(state: StateDocument, action: str) -> str:
    spec = state.get("spec") or {}
    if not spec.get("canary"):
        raise _conflict(state, action, None, "its spec sets no background.canary")
    canary = state.get("canary")
    return "migrating" if canary is None else canary["phase"]


def _conflict(
    state: StateDocument, action: str, phase: str | None, why: str
) -> BackgroundConflictError:
    name = state["_id"]
    where = f"its canary is {phase}" if phase else "it has no canary"
    return BackgroundConflictError(
        f"cannot {action} background migration {name}: {where} ({why})",
        {"migration": name, "action": action, "status": state["status"], "canary": phase},
    )
