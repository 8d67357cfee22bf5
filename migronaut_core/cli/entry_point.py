"""The ``migronaut`` console script: parse, run one command, map errors to exit codes.

Only :class:`MigronautError` is caught: it prints as ``Type: message`` on stderr (and
as ``{"error": …}`` on stdout with ``--json``) and exits with its ``exit_code``;
anything else propagates (exit status 1).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

from migronaut_core import Migronaut, MigronautError, load_config
from migronaut_core.cli.output import print_error
from migronaut_core.cli.parser import Handler, parse_arguments


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit status."""
    args = parse_arguments(argv)
    if args.verbose:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    else:
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    try:
        return _dispatch(args)
    except MigronautError as exc:
        print_error(exc, as_json=getattr(args, "json", False))
        return exc.exit_code


def _dispatch(args: argparse.Namespace) -> int:
    config = load_config(
        {"uri": args.uri, "database": args.database, "migrations_dir": args.migrations_dir},
        config_file=args.config,
    )
    with Migronaut(config) as kit:
        handler: Handler = args.handler
        return handler(kit, args)
