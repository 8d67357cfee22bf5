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
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

from migronaut_core.config import load_config
from migronaut_core.errors import MigronautError
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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit status."""
    args = build_parser().parse_args(argv)
    if args.verbose:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
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


def _print_error(exc: MigronautError, *, as_json: bool) -> None:
    if as_json:
        _emit({"error": exc.to_dict()})
    print(f"{type(exc).__name__}: {exc.message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
