"""The ``migronaut`` command: a thin shell over :class:`~migronaut_core.kit.Migronaut`.

Exit status: 0 on success; a :class:`MigronautError`'s ``exit_code`` on a known
failure (2 for bad config or arguments, 8 when the lock is held, …); 1 for
anything unexpected. ``--json`` makes every command print one JSON document on
stdout (errors too, as ``{"error": {code, message, context}}``).

``migronaut background …`` inspects and controls background migrations
(``status``, ``partitions``, ``history``, ``runnable``, ``pause``, ``resume``,
``cancel``, ``retry``, ``repin``, ``unlock``) and drives one from this process
(``run``). ``background run`` exits 0 when the migration completed (or, with
``--once``, when it is still pending or running after its round);
:data:`NOT_COMPLETED_EXIT` (12) when it stopped paused, cancelled or blocked;
BackgroundFailedError's code when it failed; RunAbortedError's code after Ctrl-C
(lanes stop at their next batch; it resumes from its checkpoints next time).

``background dry-run`` previews one on a few documents and writes nothing; it
exits 0 whatever the documents would do (the report says).

``background audit`` prints findings (changed or missing files, stalled runs,
missing version indexes, dead watchers) and exits 0 whatever it found.

``migronaut converge`` creates the version index of every declared collection
(``collections`` / ``collections_dir``) and reports what it created; it never drops.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Any

from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.control.actions import (
    CONTROL_ACTIONS,
    DONE,
    RETRYING,
    STOPPING,
    SUMMARIES,
    ControlAction,
    ControlResult,
    check_control,
)
from migronaut_core.background.dry_run import StepDryRunReport
from migronaut_core.background.indexes import ConvergeReport
from migronaut_core.config import load_config
from migronaut_core.errors import MigronautError, NotAppliedError, RunAbortedError
from migronaut_core.kit import Migronaut
from migronaut_core.runner import RunResult, StatusRow

#: ``background run``'s exit status when it stopped without completing
#: (paused, cancelled or blocked): nothing failed, but the work is not done.
NOT_COMPLETED_EXIT = 12
#: Without a live bar, ``background run`` prints a progress line this often.
PLAIN_PROGRESS_SECONDS = 2.0

Handler = Callable[[Migronaut, argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="migronaut", description="Online, resumable MongoDB schema migrations."
    )
    parser.add_argument("--uri", help="MongoDB URI (default: config / MIGRONAUT_MONGODB_URI)")
    parser.add_argument("--database", help="database name (default: config / the URI's)")
    parser.add_argument("--migrations-dir", help="directory of migration files")
    parser.add_argument("--config", help="a migronaut.toml to read instead of the cwd's")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = commands.add_parser("up", help="apply pending migrations")
    target = up.add_mutually_exclusive_group()
    target.add_argument("--to", metavar="NAME", help="apply pending ones up to NAME included")
    target.add_argument("--only", metavar="NAME", help="apply just NAME")
    up.add_argument("--allow-checksum-mismatch", action="store_true")
    up.add_argument(
        "--stop-on-background-pending",
        action="store_true",
        help="end cleanly (exit 0) before a migration that waits for a background one",
    )
    _add_run_options(up)

    down = commands.add_parser("down", help="revert the last migration, or all after --to")
    down.add_argument("--to", metavar="NAME", help="revert every migration applied after NAME")
    _add_run_options(down)

    status = commands.add_parser("status", help="list migrations and whether they are applied")
    status.add_argument("--json", action="store_true", help="print JSON")

    converge = commands.add_parser(
        "converge", help="create the version index of every declared collection"
    )
    converge.add_argument("--json", action="store_true", help="print JSON")

    create = commands.add_parser("create", help="create a migration file from a template")
    create.add_argument("title", help='e.g. "split user names"')
    create.add_argument("--background", action="store_true", help="a background migration")
    create.add_argument("--json", action="store_true", help="print JSON")

    background = commands.add_parser(
        "background", help="inspect, control and run background migrations"
    )
    _add_background_commands(
        background.add_subparsers(dest="background_command", required=True, metavar="ACTION")
    )
    return parser


def _add_run_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--requested-by", help="who asks for this run (default: OS user)")
    command.add_argument("--reason", help="why; recorded in the changelog")
    command.add_argument(
        "--wait", type=float, default=0, metavar="SECONDS", help="wait for another run's lock"
    )
    command.add_argument("--json", action="store_true", help="print JSON")


def _add_background_commands(actions: Any) -> None:
    """Add ``migronaut background ACTION``; each sets ``handler`` to its function."""

    def action(
        name: str, handler: Handler, help_text: str, *, named: bool = True
    ) -> argparse.ArgumentParser:
        command: argparse.ArgumentParser = actions.add_parser(name, help=help_text)
        if named:
            command.add_argument("name", metavar="NAME", help="the background migration")
        command.add_argument("--json", action="store_true", help="print JSON")
        command.set_defaults(handler=handler)
        return command

    status = action("status", _bg_status, "status of one background migration or all", named=False)
    status.add_argument("name", metavar="NAME", nargs="?", help="one background migration")
    action("partitions", _bg_partitions, "partitions of the current pass")
    action("history", _bg_history, "control history: who did what, when and why")
    action("runnable", _bg_runnable, "background migrations with work to do", named=False)
    audit = action("audit", _bg_audit, "findings that need a look (read-only)", named=False)
    audit.add_argument(
        "--stale-minutes",
        type=float,
        default=15.0,
        metavar="M",
        help="a running one without progress this long is stalled (default 15)",
    )

    verify = action(
        "verify", _bg_verify, "probe completed ones for old-shape documents", named=False
    )
    verify.add_argument(
        "--on-drift", choices=("reopen", "report"), help="default: background_on_drift"
    )
    verify.add_argument("--collection", action="append", help="only these collections")

    run = action("run", _bg_run, "drive one from this process until it stops")
    run.add_argument("--concurrency", type=int, default=1, metavar="N", help="lanes (default 1)")
    run.add_argument("--slice-ms", type=int, metavar="MS", help="time per lane slice")
    run.add_argument("--once", action="store_true", help="one coordinator round, then stop")

    dry_run = action("dry-run", _bg_dry_run, "preview one on a few documents; write nothing")
    picked = dry_run.add_mutually_exclusive_group()
    picked.add_argument("--sample", type=int, metavar="N", help="N random documents (default 20)")
    picked.add_argument("--first", type=int, metavar="N", help="the first N documents by _id")
    dry_run.add_argument(
        "--validate",
        action="store_true",
        help="also run the write path in a transaction that is always aborted",
    )
    picked.add_argument("--steps", type=int, metavar="N", help="(step mode) run N steps")
    dry_run.add_argument("--from-start", action="store_true", help="(step mode) from no checkpoint")

    for name in CONTROL_ACTIONS:
        if name == "retry_from_start":
            continue  # ``retry --from-start``
        control = action(name, _bg_control, SUMMARIES[name])
        control.add_argument("--reason", help="why; recorded in its history")
        control.add_argument("--requested-by", help="who asks (default: OS user)")
        if name in STOPPING:
            control.add_argument("--wait", action="store_true", help="until lanes have stopped")
        if name in RETRYING:
            control.add_argument("--from-start", action="store_true", help="drop all progress")
            control.add_argument("--repin", action="store_true", help="repin the file first")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit status."""
    args = build_parser().parse_args(argv)
    if args.verbose:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    else:
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    try:
        return _dispatch(args)
    except MigronautError as exc:
        _print_error(exc, as_json=getattr(args, "json", False))
        return exc.exit_code


def _dispatch(args: argparse.Namespace) -> int:
    config = load_config(
        {"uri": args.uri, "database": args.database, "migrations_dir": args.migrations_dir},
        config_file=args.config,
    )
    with Migronaut(config) as kit:
        if args.command == "background":
            handler: Handler = args.handler
            return handler(kit, args)
        if args.command == "up":
            result = kit.up(
                to=args.to,
                only=args.only,
                requested_by=args.requested_by,
                reason=args.reason,
                wait_for_lock_seconds=args.wait,
                allow_checksum_mismatch=args.allow_checksum_mismatch,
                on_background_pending="stop" if args.stop_on_background_pending else "error",
            )
            _print_run(result, as_json=args.json)
        elif args.command == "down":
            result = kit.down(
                to=args.to,
                requested_by=args.requested_by,
                reason=args.reason,
                wait_for_lock_seconds=args.wait,
            )
            _print_run(result, as_json=args.json)
        elif args.command == "status":
            _print_status(kit.status(), as_json=args.json)
        elif args.command == "converge":
            _print_converge(kit.converge(), as_json=args.json)
        elif args.command == "create":
            path = kit.create(args.title, background=args.background)
            _emit({"path": str(path), "name": path.stem} if args.json else f"created {path}")
    return 0


def _emit(payload: Any) -> None:
    if isinstance(payload, str):
        print(payload)
    else:
        print(json.dumps(payload, indent=2, default=str))


def _print_run(result: RunResult, *, as_json: bool) -> None:
    if as_json:
        _emit(result.to_dict())
        return
    if not result.migrations and result.stopped_at is None:
        print("nothing to do")
    for item in result.migrations:
        print(f"{item.status:<10} {item.name}  ({item.duration_ms} ms)")
    if result.stopped_at is not None:
        print(f"stopped    {result.stopped_at} waits for background migrations")


def _print_converge(report: ConvergeReport, *, as_json: bool) -> None:
    if as_json:
        _emit(report.to_dict())
        return
    if not report.collections:
        print("no declared collections")
        return
    for item in report.collections:
        if item.action == "skipped":
            print(f"skipped  {item.collection}  (no versioning declared)")
            continue
        pattern = ", ".join(f"{name}: {kind}" for name, kind in (item.index or {}).items())
        shard = "  [shard key]" if item.sharding == "shard" and item.note is None else ""
        print(f"{item.action:<8} {item.collection}  {item.name}  {{{pattern}}}{shard}")
        if item.note:
            print(f"         {item.note}")
    print(f"{len(report.created)} index(es) created")


def _print_status(rows: list[StatusRow], *, as_json: bool) -> None:
    if as_json:
        _emit([row.to_dict() for row in rows])
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
        when = row.applied_at or "-"
        kind = row.kind or "?"
        extra = f"  [{'; '.join(flags)}]" if flags else ""
        print(f"{row.status:<8} {row.name}  {kind:<10} {when}{extra}")


# -- background ---------------------------------------------------------------------------


def _bg_view(kit: Migronaut, name: str) -> dict[str, Any]:
    view: dict[str, Any] | None = kit.background_status(name)
    if view is None:
        raise NotAppliedError(
            f"background migration {name} is not registered; run `migronaut up` first",
            {"migration": name},
        )
    return view


def _bg_status(kit: Migronaut, args: argparse.Namespace) -> int:
    views = [_bg_view(kit, args.name)] if args.name else kit.background_status()
    if args.json:
        _emit(views[0] if args.name else views)
    else:
        _print_views(views)
    return 0


def _bg_partitions(kit: Migronaut, args: argparse.Namespace) -> int:
    rows = kit.background_partitions(args.name)
    if args.json:
        _emit(rows)
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


def _bg_history(kit: Migronaut, args: argparse.Namespace) -> int:
    entries = kit.background_history(args.name)
    if args.json:
        _emit(entries)
        return 0
    for entry in entries:
        moved = f"{entry.get('from') or '-'} -> {entry['to']}" if entry.get("to") else ""
        who = f"by {entry['by']}" if entry.get("by") else ""
        why = f"({entry['reason']})" if entry.get("reason") else ""
        line = " ".join(part for part in (moved, who, why) if part)
        print(f"{entry.get('at') or '-'}  {entry.get('action', '?'):<8} {line}")
    return 0


def _bg_runnable(kit: Migronaut, args: argparse.Namespace) -> int:
    rows = kit.runnable_background()
    if args.json:
        _emit(rows)
        return 0
    if not rows:
        print("nothing to run")
    for row in rows:
        print(f"{row['status']:<8} {row['migration']}")
    return 0


def _bg_audit(kit: Migronaut, args: argparse.Namespace) -> int:
    findings = kit.audit_background(stale_after_seconds=args.stale_minutes * 60)
    if args.json:
        _emit([finding.to_dict() for finding in findings])
        return 0
    if not findings:
        print("no findings")
    for finding in findings:
        subject = finding.migration or finding.collection or "-"
        print(f"{finding.severity:<8} {finding.kind:<22} {subject}: {finding.message}")
    return 0


def _bg_verify(kit: Migronaut, args: argparse.Namespace) -> int:
    result = kit.verify_background(on_drift=args.on_drift, collections=args.collection)
    if args.json:
        _emit(result)
        return 0
    print(f"checked {result['checked']}, skipped {result['skipped']}")
    for entry in result["drifted"]:
        print(f"drifted  {entry['migration']} on {entry['collection']}: {entry['action']}")
    return 0


def _bg_run(kit: Migronaut, args: argparse.Namespace) -> int:
    token = CancelToken()
    progress = _RunProgress(args.name, _bg_view(kit, args.name))
    unsubscribe = [kit.on(event, progress) for event in _RunProgress.EVENTS]
    try:
        with progress, _cancel_on_interrupt(token, args.name):
            view = kit.run_background(
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
    if args.json:
        _emit(view)
    else:
        _print_views([view])
    return _run_exit(view, once=args.once)


def _bg_dry_run(kit: Migronaut, args: argparse.Namespace) -> int:
    report = kit.dry_run_background(
        args.name,
        sample=args.sample,
        first=args.first,
        validate=args.validate,
        steps=args.steps,
        from_start=args.from_start,
    )
    data = report.to_dict()
    if args.json:
        _emit(data)
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
    return 0


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


def _bg_control(kit: Migronaut, args: argparse.Namespace) -> int:
    command, name = args.background_command, args.name
    action = check_control("retry_from_start" if getattr(args, "from_start", False) else command)
    before = _bg_view(kit, name).get("status")
    result = kit.control_background(
        name,
        action,
        actor=args.requested_by,
        reason=args.reason,
        wait=getattr(args, "wait", False),
        repin=getattr(args, "repin", False),
    )
    if args.json:
        _emit({"name": name, "action": command, "previous": before, **result.to_dict()})
    else:
        print(_control_line(name, action, before, result))
    return 0


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
    if result.stopped is not None:
        line += "; lanes stopped" if result.stopped else "; lanes still running (timed out)"
    return line


def _print_views(views: list[dict[str, Any]]) -> None:
    if not views:
        print("no background migrations")
        return
    width = max(len("NAME"), *(len(str(view.get("name"))) for view in views))
    print(
        f"{'NAME':<{width}}  {'STATUS':<9} {'PHASE':<9} {'PASS':>4} {'PROGRESS':>8} "
        f"{'MIGRATED':>9} {'FAILED':>7}  LAST ERROR"
    )
    for view in views:
        percent = (view.get("progress") or {}).get("percent")
        print(
            f"{view.get('name'):<{width}}  {view.get('status') or '-':<9} "
            f"{view.get('phase') or '-':<9} {view.get('pass', 0):>4} "
            f"{'-' if percent is None else f'{percent:.1f}%':>8} "
            f"{(view.get('totals') or {}).get('migrated', 0):>9} "
            f"{view.get('failed_documents', 0):>7}  {view.get('last_error') or ''}"
        )


@contextlib.contextmanager
def _cancel_on_interrupt(token: CancelToken, name: str) -> Iterator[None]:
    """Turn a first Ctrl-C into ``token.cancel()``; a second one raises KeyboardInterrupt."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupted(signum: int, frame: FrameType | None) -> None:
        if token.cancelled:
            raise KeyboardInterrupt
        token.cancel("interrupted")
        # os.write, not print: a signal handler must not re-enter buffered stderr.
        os.write(
            sys.stderr.fileno(),
            f"\ninterrupted: {name}'s lanes stop at their next batch "
            "(Ctrl-C again to abort at once)\n".encode(),
        )

    previous = signal.signal(signal.SIGINT, interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class _RunProgress:
    """Progress of ``background run`` on stderr, fed by engine events from any thread.

    A live ``rich`` bar when stderr is a terminal and ``rich`` is installed; plain
    lines every :data:`PLAIN_PROGRESS_SECONDS` otherwise.
    """

    EVENTS = ("background:partitioned", "background:batch")

    def __init__(self, name: str, view: dict[str, Any]) -> None:
        shown = view.get("progress") or {}
        self.name = name
        self.estimate = int(shown.get("estimate") or 0)
        self.done = int(shown.get("done") or 0)
        self.migrated = 0
        self._lock = threading.Lock()
        self._printed_at = time.monotonic()
        self._moved = False  # any event seen: worth a last plain line
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> _RunProgress:
        self._bar = _rich_progress() if sys.stderr.isatty() else None
        if self._bar is not None:
            self._bar.start()
            self._task = self._bar.add_task(self.name, total=self.estimate or None)
            self._bar.update(self._task, completed=self.done)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
        elif self._moved:
            self._print_line()

    def __call__(self, event: str, payload: dict[str, Any]) -> None:
        if payload.get("migration") != self.name:
            return
        with self._lock:
            self._moved = True
            if event == "background:partitioned":
                self.estimate, self.done = int(payload.get("estimate") or 0), 0
            else:
                counters = payload.get("counters") or {}
                self.migrated += int(counters.get("migrated", 0))
                self.done += int(counters.get("migrated", 0)) + int(counters.get("skipped", 0))
            self._show(force=event == "background:partitioned")

    def _show(self, *, force: bool) -> None:
        if self._bar is not None:
            self._bar.update(self._task, total=self.estimate or None, completed=self.done)
        elif force or time.monotonic() - self._printed_at >= PLAIN_PROGRESS_SECONDS:
            self._print_line()

    def _print_line(self) -> None:
        self._printed_at = time.monotonic()
        percent = f" ({min(100.0, 100 * self.done / self.estimate):.1f}%)" if self.estimate else ""
        print(
            f"{self.name}: {self.done}/{self.estimate or '?'} documents{percent}, "
            f"{self.migrated} migrated by this run",
            file=sys.stderr,
            flush=True,
        )


def _rich_progress() -> Any:
    """A rich progress bar on stderr, or None without ``rich`` (an optional dependency)."""
    try:
        from rich.console import Console  # noqa: PLC0415 - optional, so imported late
        from rich.progress import (  # noqa: PLC0415
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TaskProgressColumn,
            TextColumn,
            TimeRemainingColumn,
        )
    except ImportError:
        return None
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
    )


def _print_error(exc: MigronautError, *, as_json: bool) -> None:
    if as_json:
        _emit({"error": exc.to_dict()})
    print(f"{type(exc).__name__}: {exc.message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
