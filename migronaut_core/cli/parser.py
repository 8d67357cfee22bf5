"""The ``migronaut`` argument parser: every command, its arguments and its handler.

Each command sets ``handler`` on the parsed namespace to a :data:`Handler`, which
:func:`~migronaut_core.cli.entry_point.main` calls with the open kit.
:func:`parse_arguments` also refuses combinations argparse cannot express (a usage
error, exit status 2) so no option is ever silently ignored.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from migronaut_core import BACKGROUND_MILESTONES, CONTROL_ACTIONS, Migronaut
from migronaut_core.background.control.actions import RETRYING, STOPPING, SUMMARIES
from migronaut_core.background.failed import DEFAULT_FAILED_LIMIT
from migronaut_core.cli import background_commands as background
from migronaut_core.cli import runner_commands as runner

#: A command: runs on the open kit with the parsed arguments, returns the exit status.
Handler = Callable[[Migronaut, argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``migronaut [OPTIONS] COMMAND …``."""
    parser = argparse.ArgumentParser(
        prog="migronaut", description="Online, resumable MongoDB schema migrations."
    )
    parser.add_argument("--uri", help="MongoDB URI (default: config / MIGRONAUT_MONGODB_URI)")
    parser.add_argument("--database", help="database name (default: config / the URI's)")
    parser.add_argument("--migrations-dir", help="directory of migration files")
    parser.add_argument("--config", help="a migronaut.toml to read instead of the cwd's")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_runner_commands(commands)
    background_parser = commands.add_parser(
        "background", help="inspect, control and run background migrations"
    )
    _add_background_commands(
        background_parser.add_subparsers(dest="background_command", required=True, metavar="ACTION")
    )
    return parser


#: converge's options that only make sense without ``--log`` (it changes nothing).
_CONVERGE_ONLY = (("prune", "--prune"), ("reason", "--reason"), ("requested_by", "--requested-by"))


def parse_arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse ``argv``; exit with a usage error (status 2) on options that cannot go together."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "converge":
        problem = _converge_conflict(args)
        if problem is not None:
            parser.error(f"converge: {problem}")
    return args


def _converge_conflict(args: argparse.Namespace) -> str | None:
    if not args.log:
        return None if args.collection is None else "--collection needs --log"
    given = [flag for attribute, flag in _CONVERGE_ONLY if getattr(args, attribute)]
    return f"{', '.join(given)} cannot go with --log (it changes nothing)" if given else None


def _add_runner_commands(commands: Any) -> None:
    """Add ``up``, ``down``, ``baseline``, ``status``, ``audit``, ``converge`` and ``create``."""
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
    _add_run_options(up, runner.up)

    down = commands.add_parser("down", help="revert the last migration, or all after --to")
    down.add_argument("--to", metavar="NAME", help="revert every migration applied after NAME")
    _add_run_options(down, runner.down)
    for command in (up, down):
        command.add_argument("--plan", action="store_true", help="preview; write nothing")
    up.add_argument(
        "--estimate",
        action="store_true",
        help="with --plan: estimate each background migration it would register",
    )

    baseline = commands.add_parser(
        "baseline", help="record migrations up to NAME as applied without running them"
    )
    baseline.add_argument("--to", metavar="NAME", required=True, help="the last one to adopt")
    _add_run_options(baseline, runner.baseline)

    status = commands.add_parser("status", help="list migrations and whether they are applied")
    status.add_argument("--json", action="store_true", help="print JSON")
    status.set_defaults(handler=runner.status)

    audit = commands.add_parser("audit", help="everything that needs a look (read-only)")
    _add_stale_minutes(audit)
    audit.add_argument("--json", action="store_true", help="print JSON")
    audit.set_defaults(handler=runner.audit)

    converge = commands.add_parser(
        "converge", help="create the version index of every declared collection"
    )
    converge.add_argument(
        "--prune", action="store_true", help="drop version indexes converge made, now undeclared"
    )
    converge.add_argument("--requested-by", help="who asks (default: OS user); in the log")
    converge.add_argument("--reason", help="why; recorded in the converge log")
    converge.add_argument("--log", action="store_true", help="print the converge log instead")
    converge.add_argument("--collection", help="(with --log) only this collection's entries")
    converge.add_argument("--json", action="store_true", help="print JSON")
    converge.set_defaults(handler=runner.converge)

    create = commands.add_parser("create", help="create a migration file from a template")
    create.add_argument("title", help='e.g. "split user names"')
    create.add_argument("--background", action="store_true", help="a background migration")
    create.add_argument(
        "--update",
        action="store_true",
        help="a background migration written as a server-side update pipeline (implies "
        "--background)",
    )
    create.add_argument("--json", action="store_true", help="print JSON")
    create.set_defaults(handler=runner.create)


def _add_stale_minutes(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--stale-minutes",
        type=float,
        default=15.0,
        metavar="M",
        help="a running background migration without progress this long is stalled (default 15)",
    )


def _add_run_options(command: argparse.ArgumentParser, handler: Handler) -> None:
    command.add_argument("--requested-by", help="who asks for this run (default: OS user)")
    command.add_argument("--reason", help="why; recorded in the changelog")
    command.add_argument(
        "--wait", type=float, default=0, metavar="SECONDS", help="wait for another run's lock"
    )
    command.add_argument("--json", action="store_true", help="print JSON")
    command.set_defaults(handler=handler)


def _add_dry_run(action: Callable[..., argparse.ArgumentParser]) -> None:
    """Add ``migronaut background dry-run NAME``."""
    dry_run = action("dry-run", background.dry_run, "preview one on a few documents; write nothing")
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
    dry_run.add_argument(
        "--estimate",
        action="store_true",
        help="also estimate the whole pass (background estimate: a sample of 1000)",
    )


def _add_estimate(action: Callable[..., argparse.ArgumentParser]) -> None:
    """Add ``migronaut background estimate NAME``."""
    estimate = action(
        "estimate",
        background.estimate,
        "documents, per-document cost, oplog volume and duration under windows and budget "
        "(a sample; writes nothing)",
    )
    estimate.add_argument(
        "--sample", type=int, metavar="N", help="documents to sample (default 1000, 10-10000)"
    )
    estimate.add_argument(
        "--lanes", type=int, metavar="N", help="lanes to count (default: its max_parallel)"
    )


def _add_background_commands(actions: Any) -> None:
    """Add ``migronaut background ACTION``."""

    def action(
        name: str, handler: Handler, help_text: str, *, named: bool = True
    ) -> argparse.ArgumentParser:
        command: argparse.ArgumentParser = actions.add_parser(name, help=help_text)
        if named:
            command.add_argument("name", metavar="NAME", help="the background migration")
        command.add_argument("--json", action="store_true", help="print JSON")
        command.set_defaults(handler=handler)
        return command

    status = action(
        "status",
        background.status,
        "status of one background migration or all, and what holds its lanes "
        "(waiting for a maintenance window, a health signal)",
        named=False,
    )
    status.add_argument("name", metavar="NAME", nargs="?", help="one background migration")
    action("partitions", background.partitions, "partitions of the current pass")
    action("history", background.history, "control history: who did what, when and why")
    failed = action(
        "failed", background.failed, "documents it could not rewrite: _id, why (never values)"
    )
    failed.add_argument(
        "--limit", type=int, default=DEFAULT_FAILED_LIMIT, metavar="N", help="at most N (100)"
    )
    failed.add_argument("--offset", type=int, default=0, metavar="N", help="skip the first N")
    action("runnable", background.runnable, "background migrations with work to do", named=False)
    audit = action("audit", background.audit, "findings that need a look (read-only)", named=False)
    _add_stale_minutes(audit)

    verify = action(
        "verify", background.verify, "probe completed ones for old-shape documents", named=False
    )
    verify.add_argument(
        "--on-drift", choices=("reopen", "report"), help="default: background_on_drift"
    )
    verify.add_argument("--collection", action="append", help="only these collections")

    watch = action(
        "watch", background.watch, "host the live drift watcher until Ctrl-C/SIGTERM", named=False
    )
    watch.add_argument("--collection", action="append", help="only these collections")
    watch_status = action(
        "watch-status", background.watch_status, "what the drift watchers recorded", named=False
    )
    watch_status.add_argument("--collection", help="only this collection")

    run = action("run", background.run, "drive one from this process until it stops")
    run.add_argument("--concurrency", type=int, default=1, metavar="N", help="lanes (default 1)")
    run.add_argument("--slice-ms", type=int, metavar="MS", help="time per lane slice")
    run.add_argument("--once", action="store_true", help="one coordinator round, then stop")

    _add_wait(action)

    _add_dry_run(action)
    _add_estimate(action)

    _add_brake_commands(action)

    for name in CONTROL_ACTIONS:
        if name == "retry_from_start":
            continue  # ``retry --from-start``
        control = action(name, background.control, SUMMARIES[name])
        required = name == "reject"
        control.add_argument(
            "--reason",
            required=required,
            help="why; recorded in its history" + (" (required)" if required else ""),
        )
        control.add_argument("--requested-by", help="who asks (default: OS user)")
        if name in STOPPING:
            control.add_argument("--wait", action="store_true", help="until lanes have stopped")
        if name in RETRYING:
            which = control.add_mutually_exclusive_group()
            which.add_argument("--from-start", action="store_true", help="drop all progress")
            which.add_argument(
                "--failed-only",
                action="store_true",
                help="only the documents it could not rewrite (see `background failed`)",
            )
            control.add_argument("--repin", action="store_true", help="repin the file first")


def _add_brake_commands(action: Callable[..., argparse.ArgumentParser]) -> None:
    """Add ``migronaut background brake``, ``release`` and ``brake-status``."""
    brake = action(
        "brake",
        background.brake,
        "stop every background lane of the target at its next batch, until released",
        named=False,
    )
    brake.add_argument("--reason", required=True, help="why; kept in the brake's log")
    brake.add_argument(
        "--until", metavar="TIME", help="end it by itself then (ISO 8601 with a time zone)"
    )
    brake.add_argument("--requested-by", help="who asks (default: OS user)")
    release = action("release", background.release, "release the brake", named=False)
    release.add_argument("--reason", help="why; kept in the brake's log")
    release.add_argument("--requested-by", help="who asks (default: OS user)")
    action(
        "brake-status",
        background.brake_status,
        "the brake and its log (who, when, why)",
        named=False,
    )


def _add_wait(action: Callable[..., argparse.ArgumentParser]) -> None:
    """Add ``migronaut background wait``, the deploy gate."""
    wait = action("wait", background.wait, "wait for a milestone: a deploy gate")
    wait.add_argument(
        "--until",
        choices=BACKGROUND_MILESTONES,
        default="completed",
        help="migrated (every document: ship the new writers), completed (default), "
        "finalized (its validator enforced)",
    )
    wait.add_argument("--timeout", type=float, metavar="SECONDS", help="default: no limit")
    wait.add_argument(
        "--interval", type=float, default=2.0, metavar="SECONDS", help="between reads (default 2)"
    )
