"""The runner's commands: ``up``, ``down``, ``baseline``, ``status``, ``audit``, ``converge``,
``create``.

Each handler calls one method of the kit and prints its result as text, or as one
JSON document with ``--json``; each returns 0 (failures raise :class:`MigronautError`),
except a ``--plan`` that shows a refusal: it exits with that error's code; and
``audit``, which returns :data:`AUDIT_ERRORS_EXIT` when a finding is an error.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from migronaut_core import (
    ConvergeReport,
    MigrationEstimate,
    Migronaut,
    MigronautError,
    RunPlan,
    RunResult,
    StatusRow,
)
from migronaut_core.cli.output import emit, print_estimate, print_findings
from migronaut_core.runner import MigrationResult

#: ``audit``'s exit status when a finding is an error (warnings alone exit 0).
AUDIT_ERRORS_EXIT = 20


def up(kit: Migronaut, args: argparse.Namespace) -> int:
    """Apply pending migrations (all, up to ``--to``, or ``--only`` one)."""
    if args.plan:
        plan = kit.runs.plan_up(
            to=args.to, only=args.only, allow_checksum_mismatch=args.allow_checksum_mismatch
        )
        estimates = _estimates(kit, plan) if args.estimate else None
        return _print_plan(plan, as_json=args.json, estimates=estimates)
    result = kit.runs.up(
        to=args.to,
        only=args.only,
        requested_by=args.requested_by,
        reason=args.reason,
        wait_for_lock_seconds=args.wait,
        allow_checksum_mismatch=args.allow_checksum_mismatch,
        on_background_pending="stop" if args.stop_on_background_pending else "error",
    )
    _print_run(result, as_json=args.json)
    return 0


def down(kit: Migronaut, args: argparse.Namespace) -> int:
    """Revert the last migration, or every one applied after ``--to``."""
    if args.plan:
        return _print_plan(kit.runs.plan_down(to=args.to), as_json=args.json)
    result = kit.runs.down(
        to=args.to,
        requested_by=args.requested_by,
        reason=args.reason,
        wait_for_lock_seconds=args.wait,
    )
    _print_run(result, as_json=args.json)
    return 0


def baseline(kit: Migronaut, args: argparse.Namespace) -> int:
    """Record every migration up to ``--to`` as applied (adopted) without running it."""
    result = kit.runs.baseline(
        to=args.to,
        requested_by=args.requested_by,
        reason=args.reason,
        wait_for_lock_seconds=args.wait,
    )
    if args.json:
        emit(result.to_dict())
        return 0
    for name in result.adopted:
        print(f"adopted    {name}")
    print(f"{len(result.adopted)} adopted, {len(result.already_applied)} already applied")
    return 0


def status(kit: Migronaut, args: argparse.Namespace) -> int:
    """List migrations and whether they are applied."""
    _print_status(kit.runs.status(), as_json=args.json)
    return 0


def audit(kit: Migronaut, args: argparse.Namespace) -> int:
    """Print every finding (general and background); non-zero when one is an error."""
    findings = kit.runs.audit(stale_after_seconds=args.stale_minutes * 60)
    print_findings(findings, as_json=args.json)
    errors = sum(1 for finding in findings if finding.severity == "error")
    if not args.json and findings:
        print(f"{errors} error(s), {len(findings) - errors} warning(s)")
    return AUDIT_ERRORS_EXIT if errors else 0


def converge(kit: Migronaut, args: argparse.Namespace) -> int:
    """Create the version index of every declared collection (``--prune``: drop undeclared ones).

    With ``--log``, print the converge log instead and change nothing.
    """
    if args.log:
        entries = kit.runs.converge_log(collection=args.collection)
        _print_converge_log([entry.to_dict() for entry in entries], as_json=args.json)
        return 0
    report = kit.runs.converge(prune=args.prune, requested_by=args.requested_by, reason=args.reason)
    _print_converge(report, as_json=args.json)
    return 0


def create(kit: Migronaut, args: argparse.Namespace) -> int:
    """Create a migration file from a template."""
    path = kit.runs.create(args.title, background=args.background, update=args.update)
    emit({"path": str(path), "name": path.stem} if args.json else f"created {path}")
    return 0


def _run_label(item: MigrationResult) -> str:
    """What a person reads for a migration a run ran: an applied background migration
    was registered (its documents are rewritten later by its lanes)."""
    if item.kind == "background" and item.status == "applied":
        return "registered"
    return item.status


def _print_run(result: RunResult, *, as_json: bool) -> None:
    if as_json:
        emit(result.to_dict())
        return
    if not result.migrations and result.stopped_at is None:
        print("nothing to do")
    for item in result.migrations:
        print(f"{_run_label(item):<10} {item.name}  ({item.duration_ms} ms)")
    if result.stopped_at is not None:
        print(f"stopped    {result.stopped_at} waits for background migrations")


def _estimates(kit: Migronaut, plan: RunPlan) -> dict[str, MigrationEstimate | MigronautError]:
    """The estimate of each background migration the plan would register, or why none."""
    found: dict[str, MigrationEstimate | MigronautError] = {}
    for item in plan.migrations:
        if item.action != "register" or item.refusal is not None:
            continue
        try:
            found[item.name] = kit.background.estimate(item.name)
        except MigronautError as exc:
            found[item.name] = exc
    return found


def _print_plan(
    plan: RunPlan,
    *,
    as_json: bool,
    estimates: Mapping[str, MigrationEstimate | MigronautError] | None = None,
) -> int:
    """Print a plan; the exit status is its refusal's code (0 when the run would go).

    ``estimates`` (``up --plan --estimate``): each is printed under its migration;
    the JSON gains ``estimates`` by name (an error's ``{code, message}`` where
    there is none).
    """
    if as_json:
        data = plan.to_dict()
        if estimates is not None:
            data["estimates"] = {name: _estimate_json(found) for name, found in estimates.items()}
        emit(data)
    else:
        if not plan.migrations:
            print("nothing to do")
        for item in plan.migrations:
            line = f"{item.action:<9} {item.name}  {item.kind}"
            if item.requires:
                line += f"  requires {', '.join(item.requires)}"
            if item.waits_for:
                waits = ", ".join(f"{e['migration']} ({e['status']})" for e in item.waits_for)
                line += f"  waits for {waits}"
            if item.refusal is not None:
                line += f"  REFUSED: {item.refusal.code}"
            print(line)
            found = (estimates or {}).get(item.name)
            if isinstance(found, MigrationEstimate):
                print_estimate(found)
            elif found is not None:
                print(f"  not estimated: {found.code}: {found.message}")
        if plan.refusal is not None:
            refusal = plan.refusal
            print(f"the run would be refused: {type(refusal).__name__}: {refusal.message}")
    return 0 if plan.refusal is None else plan.refusal.exit_code


def _estimate_json(found: MigrationEstimate | MigronautError) -> dict[str, Any]:
    if isinstance(found, MigrationEstimate):
        return found.to_dict()
    return {"code": found.code, "message": found.message}


def _print_converge(report: ConvergeReport, *, as_json: bool) -> None:
    if as_json:
        emit(report.to_dict())
        return
    if not report.collections:
        print("no declared collections")
    for item in report.collections:
        if item.action == "skipped":
            print(f"skipped  {item.collection}  (no versioning declared)")
            continue
        shard = "  [shard key]" if item.sharding == "shard" and item.note is None else ""
        print(
            f"{item.action:<8} {item.collection}  {item.name}  {_pattern(item.index or {})}{shard}"
        )
        if item.note:
            print(f"         {item.note}")
    for pruned in report.pruned:
        print(f"{pruned.action:<8} {pruned.collection}  {pruned.name}  {_pattern(pruned.index)}")
        if pruned.note:
            print(f"         {pruned.note}")
    dropped = f", {len(report.dropped)} dropped" if report.pruned else ""
    print(f"{len(report.created)} index(es) created{dropped}")


def _print_converge_log(entries: list[dict[str, Any]], *, as_json: bool) -> None:
    if as_json:
        emit(entries)
        return
    if not entries:
        print("converge has created no index yet")
    for entry in entries:
        by = entry["by"]
        who = f"{by.get('requested_by') or '?'} on {by.get('host') or '?'} pid {by.get('pid')}"
        why = f" ({by['reason']})" if by.get("reason") else ""
        print(
            f"{entry['at']}  {entry['action']:<8} {entry['collection']}  {entry['index']}  "
            f"{_pattern(entry['key'])}  by {who}{why}"
        )


def _pattern(index: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{name}: {kind}" for name, kind in index.items()) + "}"


def _print_status(rows: list[StatusRow], *, as_json: bool) -> None:
    if as_json:
        emit([row.to_dict() for row in rows])
        return
    if not rows:
        print("no migrations")
        return
    for row in rows:
        flags = []
        if row.checksum_ok is False:
            flags.append("CHANGED since applied")
        if row.file_missing:
            flags.append("file missing")
        if row.last_error:
            flags.append(f"last attempt failed: {row.last_error.get('code')}")
        if row.adopted:
            flags.append("adopted")
        when = row.applied_at or "-"
        kind = row.kind or "?"
        extra = f"  [{'; '.join(flags)}]" if flags else ""
        print(f"{row.status:<8} {row.name}  {kind:<10} {when}{extra}")
