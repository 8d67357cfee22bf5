"""What several commands print: JSON documents, the background status table, errors.

Tables and lines go to stdout, errors to stderr; with ``--json`` a command prints one
JSON document on stdout (non-JSON values such as datetimes as their ``str``).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from migronaut_core import Finding, MigrationEstimate, MigronautError


def emit(payload: Any) -> None:
    """Print a line as it is, or anything else as one indented JSON document."""
    if isinstance(payload, str):
        print(payload)
    else:
        print(json.dumps(payload, indent=2, default=str))


def print_error(exc: MigronautError, *, as_json: bool) -> None:
    """Print ``Type: message`` on stderr; with ``as_json`` also ``{"error": …}`` on stdout."""
    if as_json:
        emit({"error": exc.to_dict()})
    print(f"{type(exc).__name__}: {exc.message}", file=sys.stderr)


def print_views(views: list[dict[str, Any]]) -> None:
    """Print background status views as a table, one row each.

    ``MODE`` is how each rewrites (the view's ``runs_as``): ``python``, ``step`` or
    ``update`` (a server-side update pipeline). ``ETA`` is the expected time left and
    ``ETA RANGE`` its low-high range (the view's ``eta_range``), both ``-`` when untold.
    """
    if not views:
        print("no background migrations")
        return
    width = max(len("NAME"), *(len(str(view.get("name"))) for view in views))
    print(
        f"{'NAME':<{width}}  {'STATUS':<9} {'MODE':<6} {'PHASE':<9} {'PASS':>4} {'DONE':>15} "
        f"{'PROGRESS':>8} {'ETA':>7} {'ETA RANGE':>11} {'MIGRATED':>9} {'FAILED':>7}  LAST ERROR"
    )
    for view in views:
        shown = view.get("progress") or {}
        percent = shown.get("percent")
        print(
            f"{view.get('name'):<{width}}  {view.get('status') or '-':<9} "
            f"{view.get('runs_as') or '-':<6} "
            f"{view.get('phase') or '-':<9} {view.get('pass', 0):>4} "
            f"{_done_of(shown):>15} "
            f"{'-' if percent is None else f'{percent:.1f}%':>8} "
            f"{_eta_text(view.get('eta_seconds')):>7} "
            f"{_eta_range_text(view.get('eta_range')):>11} "
            f"{(view.get('totals') or {}).get('migrated', 0):>9} "
            f"{view.get('failed_documents', 0):>7}  "
            f"{_note_of(view)}"
        )


def _note_of(view: dict[str, Any]) -> str:
    """The table's last column: the last error, a hold, a canary or a validator's soak."""
    return (
        view.get("last_error")
        or _held_text(view.get("held_by"))
        or _canary_text(view)
        or _validator_text(view)
    )


def _canary_text(view: dict[str, Any]) -> str:
    """A canary's note until it is promoted: its phase, or the check that paused it."""
    canary = view.get("canary")
    if not isinstance(canary, dict) or canary.get("phase") == "promoted":
        return ""
    failed = canary.get("failed")
    if isinstance(failed, dict):
        return f"canary: check {failed.get('check')} failed: {failed.get('reason')}"
    if canary.get("phase") == "soaking":
        return f"canary: soaking, {canary.get('clean_passes', 0)} clean check(s)"
    return f"canary: {str(canary.get('phase')).replace('_', ' ')}"


def _held_text(held: Any) -> str:
    """A held migration's note where the last error would be (``HoldView.text``)."""
    return str(held.get("text") or "") if isinstance(held, dict) else ""


def _validator_text(view: dict[str, Any]) -> str:
    """A finalizing migration's note: its validator's phase and what the soak saw."""
    validator = view.get("validator")
    if not isinstance(validator, dict) or view.get("status") == "completed":
        return ""
    text = f"validator: {validator.get('phase')}, {validator.get('clean_passes', 0)} clean check(s)"
    seen = validator.get("old_shape_seen", 0)
    return f"{text}, {seen} old-shape document(s) seen" if seen else text


def _done_of(progress: dict[str, Any]) -> str:
    """``done/estimate`` of a pass (``?`` while nothing is estimated)."""
    return f"{progress.get('done', 0)}/{progress.get('estimate') or '?'}"


def _eta_text(seconds: Any) -> str:
    """Seconds left as ``42s``, ``7m`` or ``3h``; ``-`` when not known."""
    if not isinstance(seconds, int | float) or seconds < 0:
        return "-"
    if seconds < 120:
        return f"{round(seconds)}s"
    if seconds < 7200:
        return f"{round(seconds / 60)}m"
    return f"{round(seconds / 3600)}h"


def _eta_range_text(eta_range: Any) -> str:
    """``low-high`` of a running pass's ``eta_range`` (``?`` for an unbounded end)."""
    if not isinstance(eta_range, dict):
        return "-"
    low, high = eta_range.get("low_seconds"), eta_range.get("high_seconds")
    if low is None and high is None:
        return "-"
    return f"{_bound_text(low)}-{_bound_text(high)}"


def _bound_text(seconds: Any) -> str:
    return "?" if seconds is None else _eta_text(seconds)


def print_estimate(result: MigrationEstimate) -> None:
    """Print an estimate as a two-column table (``background estimate``, ``--estimate``)."""
    costs, eta = result.costs, result.eta
    documents = "?" if result.documents is None else f"{result.documents:,}"
    rows = [
        ("documents to migrate", f"{'at least ' if result.at_least else ''}{documents}"),
        ("sampled", f"{costs.documents} ({costs.failed} would fail)"),
        ("transform per document", f"{costs.transform_ms:.3f} ms"),
        ("write per document", f"{costs.write_ms:.3f} ms (in an aborted transaction)"),
        ("document size", f"{costs.before_bytes:,.0f} -> {costs.after_bytes:,.0f} bytes"),
        ("oplog", _oplog_text(result.oplog_bytes, costs.oplog_bytes)),
        ("lanes", str(result.lanes)),
        ("rate at full speed", f"{result.docs_per_s:,.0f} docs/s"),
    ]
    if result.budget is not None:
        budget = result.budget
        rows.append(
            (
                "budget",
                f"{budget.share:,.0f} of {budget.docs_per_s:,} docs/s (priority "
                f"{budget.priority}, {len(budget.others)} other running migration(s))",
            )
        )
    if result.windows is not None:
        rows.append(("windows", f"the {result.windows}'s: closed time does no work"))
    rows.append(("duration", _range_text(eta.seconds, eta.low_seconds, eta.high_seconds)))
    if result.finishes_at is not None:
        rows.append(("finishes at", result.finishes_at.strftime("%Y-%m-%d %H:%M UTC")))
    for label, value in rows:
        print(f"  {label:<24} {value}")


def _oplog_text(total: int | None, per_document: float) -> str:
    shown = "?" if total is None else f"{total / 2**20:,.1f} MiB"
    return f"{shown} ({per_document:,.0f} bytes per document)"


def _range_text(seconds: float | None, low: float | None, high: float | None) -> str:
    if seconds is None:
        return "unknown (no count, nothing timed, or beyond a year of windows)"
    return f"{duration_text(seconds)} ({duration_text(low)} to {duration_text(high)})"


def duration_text(seconds: float | None) -> str:
    """A duration as ``45s``, ``12m``, ``3.5h`` or ``2.1d``; ``?`` when not known."""
    if seconds is None:
        return "?"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172_800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86_400:.1f}d"


def print_findings(findings: list[Finding], *, as_json: bool) -> None:
    """Print audit findings, one line each (``severity kind subject: message``), or as JSON."""
    if as_json:
        emit([finding.to_dict() for finding in findings])
        return
    if not findings:
        print("no findings")
    for finding in findings:
        subject = finding.migration or finding.collection or "-"
        print(f"{finding.severity:<8} {finding.kind:<22} {subject}: {finding.message}")
