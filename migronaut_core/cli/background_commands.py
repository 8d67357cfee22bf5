"""``migronaut background ACTION``: inspect, control, dry-run and drive background migrations.

Every handler returns 0 except ``run``, which returns 0 when the migration completed
(or, with ``--once``, is still pending or running) and :data:`NOT_COMPLETED_EXIT`
when it stopped paused, cancelled or blocked. ``wait`` (the deploy gate) returns 0
when the migration reached its milestone, :data:`NOT_COMPLETED_EXIT` when it ended
short of it (failed, cancelled, no longer registered) and :data:`WAIT_TIMEOUT_EXIT`
when time ran out first. ``watch`` hosts the live drift
watcher until Ctrl-C or SIGTERM and returns 0 after a clean stop. A name that is
not registered raises :class:`NotAppliedError`.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from typing import Any

from migronaut_core import (
    CancelToken,
    ControlAction,
    ControlResult,
    Migronaut,
    NotAppliedError,
    RunAbortedError,
    StepDryRunReport,
    files,
    parse_until,
)
from migronaut_core.background.control.actions import DONE, check_control
from migronaut_core.cli.output import emit, print_estimate, print_findings, print_views
from migronaut_core.cli.run_progress import RunProgress, cancel_on_interrupt

#: ``background run``'s exit status when it stopped without completing
#: (paused, cancelled or blocked): nothing failed, but the work is not done.
NOT_COMPLETED_EXIT = 12
#: ``background wait``'s exit status when its ``--timeout`` passed first.
WAIT_TIMEOUT_EXIT = 19


def status(kit: Migronaut, args: argparse.Namespace) -> int:
    """Print the status of one background migration, or of all."""
    views = (
        [_registered_status(kit, args.name)]
        if args.name
        else [view.to_dict() for view in kit.background.statuses()]
    )
    if args.json:
        emit(views[0] if args.name else views)
        return 0
    braked = kit.background.brake_status().to_dict()
    if braked["on"]:
        print(_brake_line(braked))
    print_views(views)
    return 0


def partitions(kit: Migronaut, args: argparse.Namespace) -> int:
    """Print the partitions of one's current pass."""
    rows = [partition.to_dict() for partition in kit.background.partitions(args.name)]
    if args.json:
        emit(rows)
        return 0
    print(f"{'#':>3} {'STATUS':<10} {'MIGRATED':>9} {'SKIPPED':>8} {'FAILED':>7}  LEASE")
    for row in rows:
        counters, lease = row.get("counters") or {}, row.get("lease") or {}
        print(
            f"{row.get('index', '-'):>3} {row.get('status') or '-':<10} "
            f"{counters.get('migrated', 0):>9} {counters.get('skipped', 0):>8} "
            f"{row.get('failed_documents', 0):>7}  {lease.get('owner') or '-'}"
        )
    return 0


def history(kit: Migronaut, args: argparse.Namespace) -> int:
    """Print one's control history: who did what, when and why."""
    entries = [entry.to_dict() for entry in kit.background.history(args.name)]
    if args.json:
        emit(entries)
        return 0
    for entry in entries:
        moved = f"{entry.get('from') or '-'} -> {entry['to']}" if entry.get("to") else ""
        who = f"by {entry['by']}" if entry.get("by") else ""
        print(_log_line(entry.get("at"), entry.get("action", "?"), moved, who, _why(entry)))
    return 0


def failed(kit: Migronaut, args: argparse.Namespace) -> int:
    """Print the documents one could not rewrite: ``_id``, why and when, never values."""
    view = kit.background.failed(args.name, limit=args.limit, offset=args.offset)
    if args.json:
        emit(view.to_dict())
        return 0
    shown = len(view.documents)
    first = view.offset + 1 if shown else view.offset
    print(
        f"{view.name} ({view.status}): {view.total} failed document(s)"
        + (f", {first}-{view.offset + shown} shown" if shown < view.total else "")
        + ("; a failed-only retry is under way" if view.retrying else "")
    )
    for row in view.documents:
        why = row.reason or "?"
        text = row.error or "details no longer kept"
        generation = "-" if row.generation is None else row.generation
        retrying = "  (retrying)" if row.retrying else ""
        print(f"  {json.dumps(row.id)}  {why}: {text}  generation {generation}{retrying}")
    return 0


def runnable(kit: Migronaut, args: argparse.Namespace) -> int:
    """Print the background migrations with work to do."""
    rows = [row.to_dict() for row in kit.background.runnable()]
    if args.json:
        emit(rows)
        return 0
    if not rows:
        print("nothing to run")
    for row in rows:
        print(f"{row['status']:<8} {row['migration']}")
    return 0


def audit(kit: Migronaut, args: argparse.Namespace) -> int:
    """Print the findings that need a look; read-only."""
    findings = kit.background.audit(stale_after_seconds=args.stale_minutes * 60)
    print_findings(findings, as_json=args.json)
    return 0


def verify(kit: Migronaut, args: argparse.Namespace) -> int:
    """Probe completed ones for old-shape documents; print what drifted."""
    result = kit.drift.verify(on_drift=args.on_drift, collections=args.collection).to_dict()
    if args.json:
        emit(result)
        return 0
    print(f"checked {result['checked']}, skipped {result['skipped']}")
    for entry in result["drifted"]:
        print(f"drifted  {entry['migration']} on {entry['collection']}: {entry['action']}")
    return 0


def watch(kit: Migronaut, args: argparse.Namespace) -> int:
    """Host the live drift watcher until Ctrl-C or SIGTERM, then stop it cleanly (exit 0).

    Leads each collection whose lock is free and stands by on the others, taking
    over when their leader dies; state changes and upgrades go to stderr.
    """
    token = CancelToken()
    if kit.config.background_drift == "poll":
        print(
            "note: background_drift is 'poll': audit does not look for dead watchers "
            "(set 'stream' or 'both' where a watcher runs)",
            file=sys.stderr,
        )
    unsubscribe = [
        kit.background.on(event, _watch_line) for event in ("background:watch", "background:drift")
    ]
    try:
        with cancel_on_interrupt(
            token, "watch", notice="the watcher stops", signals=(signal.SIGINT, signal.SIGTERM)
        ):
            watcher = kit.drift.watch(collections=args.collection, cancel=token)
            print("watching for drift (Ctrl-C or SIGTERM stops)", file=sys.stderr, flush=True)
            while watcher.running:
                token.sleep(1.0)
            watcher.stop()
    except KeyboardInterrupt:  # a second signal: do not wait for the streams
        token.cancel("aborted")
        raise RunAbortedError(
            "the drift watcher was aborted; its leadership lapses once its locks expire", {}
        ) from None
    finally:
        for stop in unsubscribe:
            stop()
    rows = watcher.status()
    if args.json:
        emit(rows)
        return 0
    for row in rows:
        upgraded = row["counters"]["upgraded"]
        print(f"{row['collection']}: {row['state']}, {upgraded} upgraded by this process")
    return 0


def watch_status(kit: Migronaut, args: argparse.Namespace) -> int:
    """Print what the drift watchers recorded: leader, lag, resume state (never the token)."""
    if args.collection:
        view = kit.drift.watch_status(args.collection)
        views = [] if view is None else [view.to_dict()]
    else:
        views = [row.to_dict() for row in kit.drift.watch_status()]
    if args.json:
        emit(views)
        return 0
    if not views:
        print("no watcher has recorded anything")
    for view in views:
        print(_watch_status_line(view))
    return 0


def run(kit: Migronaut, args: argparse.Namespace) -> int:
    """Drive one from this process until it stops (one round with ``--once``)."""
    token = CancelToken()
    progress = RunProgress(args.name, _registered_status(kit, args.name))
    unsubscribe = [kit.background.on(event, progress) for event in RunProgress.EVENTS]
    try:
        with progress, cancel_on_interrupt(token, args.name):
            ran = kit.background.run(
                args.name,
                concurrency=args.concurrency,
                slice_ms=args.slice_ms,
                until_done=not args.once,
                cancel=token,
            )
    except KeyboardInterrupt:  # a second Ctrl-C: do not wait for the lanes
        token.cancel("aborted")
        raise RunAbortedError(
            f"driving {args.name} was aborted; it resumes from its checkpoints once the "
            "leases of its lanes expire",
            {"migration": args.name},
        ) from None
    finally:
        for stop in unsubscribe:
            stop()
    view = {"name": args.name, "status": "unregistered"} if ran is None else ran.to_dict()
    if args.json:
        emit(view)
    else:
        print_views([view])
    return _run_exit(view, once=args.once)


def wait(kit: Migronaut, args: argparse.Namespace) -> int:
    """Wait until one reaches ``--until`` (a deploy gate); the exit status says how it ended."""

    def show(status: str) -> None:
        if not args.json:
            print(f"{args.name} is {status}", file=sys.stderr, flush=True)

    try:
        result = kit.background.wait(
            args.name,
            until=args.until,
            timeout=args.timeout,
            poll_interval=args.interval,
            on_status=show,
        )
    except KeyboardInterrupt:
        print(f"stopped waiting for {args.name}", file=sys.stderr)
        return 130
    if args.json:
        emit(result.to_dict())
    elif result.reached:
        print(f"{args.name} {args.until} (waited {result.waited_seconds:.0f} s)")
    elif result.outcome == "ended":
        print(f"{args.name} is {result.status}: it will not be {args.until}", file=sys.stderr)
    else:
        print(f"{args.name} is {result.status}: not {args.until} in time", file=sys.stderr)
    return {"reached": 0, "ended": NOT_COMPLETED_EXIT}.get(result.outcome, WAIT_TIMEOUT_EXIT)


def estimate(kit: Migronaut, args: argparse.Namespace) -> int:
    """How long a pass would take from now: a sample's costs under windows and budget."""
    result = kit.background.estimate(args.name, sample=args.sample, lanes=args.lanes)
    if args.json:
        emit(result.to_dict())
        return 0
    print(f"estimate of {result.migration} on {result.collection} ({result.mode}); nothing written")
    print_estimate(result)
    return 0


def dry_run(kit: Migronaut, args: argparse.Namespace) -> int:
    """Preview one on a few documents (or steps); write nothing."""
    report = kit.background.dry_run(
        args.name,
        sample=args.sample,
        first=args.first,
        validate=args.validate,
        steps=args.steps,
        from_start=args.from_start,
    )
    data = report.to_dict()
    estimated = kit.background.estimate(args.name) if args.estimate else None
    if args.json:
        emit(data if estimated is None else {**data, "pass_estimate": estimated.to_dict()})
        return 0
    if isinstance(report, StepDryRunReport):
        _print_step_dry_run(data)
        return 0
    picked = f"first {report.size}" if report.method == "first" else f"sample of {report.size}"
    state = report.status or "not registered"
    print(
        f"{report.migration} ({state}, {report.direction}) on {report.collection}: {picked}"
        f"{', validated' if report.validate else ''}; nothing was written"
    )
    if report.file_changed:
        print("  the file changed since it was registered: its functions ran with the stored spec")
    for doc in data["documents"]:
        if "error" in doc:
            print(f"  {doc['id']}  FAILS ({doc['reason']}): {doc['error']}")
            continue
        changes = doc["changes"]
        parts = [f"set {', '.join(changes['set'])}"] if changes["set"] else []
        if changes["unset"]:
            parts.append(f"unset {', '.join(changes['unset'])}")
        print(f"  {doc['id']}  {'; '.join(parts)}")
    totals = data["totals"]
    matching = "?" if report.estimate is None else report.estimate
    print(
        f"{totals['documents']} document(s): {totals['would_change']} would change, "
        f"{totals['unchanged']} unchanged, {totals['errors']} error(s); "
        f"{'at least ' if report.at_least else ''}{matching} match in all"
    )
    if estimated is not None:
        print("estimate of the whole pass (a sample of its own):")
        print_estimate(estimated)
    return 0


def control(kit: Migronaut, args: argparse.Namespace) -> int:
    """Pause, resume, cancel, retry, repin or unlock one; print what changed."""
    command, name = args.background_command, args.name
    action = check_control("retry_from_start" if getattr(args, "from_start", False) else command)
    # An unlock clears what a withdrawn migration left behind too: no state needed.
    view = _view(kit, name) if action == "unlock" else _registered_status(kit, name)
    before = None if view is None else view.get("status")
    result = kit.background.control(
        name,
        action,
        requested_by=args.requested_by,
        reason=args.reason,
        wait=getattr(args, "wait", False),
        repin=getattr(args, "repin", False),
        failed_only=getattr(args, "failed_only", False),
    )
    if args.json:
        emit({"name": name, "action": action, "previous": before, **result.to_dict()})
    else:
        print(_control_line(name, action, before, result))
    return 0


def brake(kit: Migronaut, args: argparse.Namespace) -> int:
    """Set the target-wide brake; print it."""
    view = kit.background.brake(
        args.reason, until=parse_until(args.until), requested_by=args.requested_by
    )
    if args.json:
        emit(view.to_dict())
    else:
        print(_brake_line(view.to_dict()))
    return 0


def release(kit: Migronaut, args: argparse.Namespace) -> int:
    """Release the brake; print whether it was on."""
    view = kit.background.release(requested_by=args.requested_by, reason=args.reason)
    if args.json:
        emit(view.to_dict())
    else:
        print("brake released" if view.changed else "the brake was off")
    return 0


def brake_status(kit: Migronaut, args: argparse.Namespace) -> int:
    """Print the brake and its log."""
    view = kit.background.brake_status().to_dict()
    entries = [entry.to_dict() for entry in kit.background.brake_log()]
    if args.json:
        emit({"brake": view, "log": entries})
        return 0
    print(_brake_line(view))
    for entry in entries:
        who = f"by {entry['requested_by']}" if entry.get("requested_by") else ""
        until = f"until {entry['until']}" if entry.get("until") else ""
        print(_log_line(entry["at"], entry["action"], who, _why(entry), until))
    return 0


def _brake_line(view: dict[str, Any]) -> str:
    if not view.get("on"):
        return "brake: off"
    parts = [f"brake: ON ({view.get('reason')})", f"by {view.get('requested_by') or '-'}"]
    parts.append(f"since {view.get('at')}")
    if view.get("until"):
        parts.append(f"until {view['until']}")
    return " ".join(parts)


def _registered_status(kit: Migronaut, name: str) -> dict[str, Any]:
    view = _view(kit, name)
    if view is None:
        raise NotAppliedError(
            f"background migration {name} is not registered; run `migronaut up` first",
            {"migration": name},
        )
    return view


def _view(kit: Migronaut, name: str) -> dict[str, Any] | None:
    """Its status view as JSON, or None when it has no state."""
    files.validate_name(name)
    view = kit.background.status(name)
    return None if view is None else view.to_dict()


def _print_step_dry_run(data: dict[str, Any]) -> None:
    start = "its last checkpoint" if data["from_checkpoint"] else "the start"
    print(f"{data['migration']}: steps from {start} in an aborted transaction")
    for step in data["steps"]:
        if "error" in step:
            print(f"  step {step['step']}  FAILS: {step['error']}")
        else:
            print(
                f"  step {step['step']}  done={step['done']} counters={step['counters']} "
                f"checkpoint={step['checkpoint_bytes']} bytes"
            )


def _run_exit(view: dict[str, Any], *, once: bool) -> int:
    status = view.get("status")
    if status == "completed" or (once and status in ("pending", "running")):
        return 0
    print(f"{view.get('name')} is {status}: not completed", file=sys.stderr)
    return NOT_COMPLETED_EXIT


def _control_line(name: str, action: ControlAction, before: Any, result: ControlResult) -> str:
    if result.leases is not None:
        lock = "cleared" if result.lock else "not held"
        return f"{name}: unlocked (coordinator lock {lock}, {result.leases} lease(s) dropped)"
    if result.applied == "unchanged":
        return f"{name}: unchanged (already {result.status})"
    moved = result.status if before == result.status else f"{before} -> {result.status}"
    line = f"{name}: {DONE[action]} ({moved})"
    if result.replan is not None:
        line += "; replans its partitions" if result.replan else "; keeps its partitions"
    if result.failed is not None:
        line += f"; retries {result.failed} failed document(s) only"
    if result.stopped is not None:
        line += "; lanes stopped" if result.stopped else "; lanes still running (timed out)"
    return line


def _watch_line(event: str, payload: dict[str, Any]) -> None:
    """One line on stderr per watcher event (from any thread): names and counts only."""
    if event == "background:watch":
        line = f"{payload['collection']}: {payload['state']}"
    else:
        count = f"{payload['count']} " if payload.get("count") is not None else ""
        line = (
            f"{payload['collection']}: {count}{payload['action']} by {payload['migration']} "
            f"({payload['source']})"
        )
    print(line, file=sys.stderr, flush=True)


def _watch_status_line(view: dict[str, Any]) -> str:
    leader = view.get("leader") or {}
    who = f"{leader.get('host') or '?'} pid {leader.get('pid') or '?'}" if leader else "none"
    alive = "" if view["fresh"] else " (not written for a while)"
    resume = view["resume"]
    if resume["saved"]:
        lag = resume["lag_seconds"]
        behind = f", {lag} s behind" if lag is not None else ""
        position = f"resumes at {resume['at'] or '?'}{behind}"
    else:
        position = "no saved position (a fresh start probes the collection)"
    counters = view["counters"]
    line = (
        f"{view['collection']}: {view['state']}, leader {who}{alive}; {position}; "
        f"{counters['upgraded']} upgraded, {counters['errors']} error(s), "
        f"last event {view['last_event_at'] or '-'}"
    )
    if view.get("last_error"):
        line += f"; last error: {view['last_error']}"
    return line


def _why(entry: dict[str, Any]) -> str:
    return f"({entry['reason']})" if entry.get("reason") else ""


def _log_line(at: object, action: object, *parts: str) -> str:
    """One line of a log (a control history, the brake's): when, what, and what is said."""
    return f"{at or '-'}  {action!s:<8} " + " ".join(part for part in parts if part)
