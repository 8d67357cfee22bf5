"""``python -m migronaut_dev.mongod start|stop|uri|status``: the demo's detached server.

A single-node replica set that outlives the command that started it, with its state
(``devserver.json``), its lock and its data under a state directory (default
``.migronaut``); data survives a stop, and ``start`` reuses a running server.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from pymongo.errors import PyMongoError

from migronaut_core.errors import MigronautError
from migronaut_dev.endpoints import LOOPBACK
from migronaut_dev.errors import ServerUnavailableError
from migronaut_dev.mongod.plumbing import (
    direct_client,
    pid_alive,
    read_json,
    write_json,
)
from migronaut_dev.mongod.replica_set import start_replica_set

logger = logging.getLogger(__name__)

#: State directory of the CLI, relative to the working directory.
DEFAULT_STATE_DIR = Path(".migronaut")
# The state and lock files keep the name of the module's former incarnation (the dev
# server): renamed, a ``stop`` or ``start`` of this release would not see a server an
# earlier one started and would orphan it (or start a second one on the same data).
_STATE_FILE = "devserver.json"
_LOCK_FILE = "devserver.lock"
_CLI_SET_NAME = "migronaut"


def _state_path(state_dir: Path) -> Path:
    return state_dir / _STATE_FILE


def _verified_pid(state: dict[str, Any]) -> int | None:
    """Return the pid of the mongod serving ``state``'s dbpath, if it answers."""
    try:
        with direct_client(LOOPBACK, int(state["port"]), timeout_ms=1000) as client:
            opts = client.admin.command("getCmdLineOpts")
            dbpath = opts.get("parsed", {}).get("storage", {}).get("dbPath")
            if dbpath is None or Path(dbpath).resolve() != Path(state["dbpath"]).resolve():
                return None
            return int(client.admin.command("serverStatus")["pid"])
    except (PyMongoError, KeyError, TypeError, ValueError):
        return None


def _pid_runs_dbpath(pid: int, dbpath: str) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return bool(argv) and argv[0].endswith(b"mongod") and os.fsencode(dbpath) in argv


def _wait_pid_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def _terminate_pid(pid: int, timeout: float) -> bool:
    """SIGTERM ``pid``, SIGKILL it after ``timeout`` s; True once it is gone."""
    for sig in (signal.SIGCONT, signal.SIGTERM):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    if _wait_pid_gone(pid, timeout):
        return True
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    return _wait_pid_gone(pid, 10.0)


@contextlib.contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    state_dir.mkdir(parents=True, exist_ok=True)
    with (state_dir / _LOCK_FILE).open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _cli_start(state_dir: Path) -> int:
    with _locked(state_dir):
        state = read_json(_state_path(state_dir))
        if state is not None and _verified_pid(state) is not None:
            print(state["uri"])
            return 0
        replica_set = start_replica_set(
            1, data_dir=state_dir / "mongod", die_with_parent=False, name=_CLI_SET_NAME
        )
        member = replica_set.members[0]
        state = {
            "pid": member.pid,
            "port": member.port,
            "uri": replica_set.uri,
            "dbpath": str(member.dbpath),
            "log_path": str(member.log_path),
            "name": replica_set.name,
        }
        write_json(_state_path(state_dir), state)
        print(replica_set.uri)
        return 0


def _cli_stop(state_dir: Path, timeout: float = 30.0) -> int:
    with _locked(state_dir):
        state = read_json(_state_path(state_dir))
        if state is None:
            print(f"no mongod recorded in {state_dir}", file=sys.stderr)
            return 0
        pid = _verified_pid(state)
        if pid is None:
            recorded = state.get("pid")
            if isinstance(recorded, int) and _pid_runs_dbpath(recorded, str(state["dbpath"])):
                pid = recorded
        if pid is not None:
            started = time.monotonic()
            if not _terminate_pid(pid, timeout):
                raise ServerUnavailableError(
                    f"mongod pid {pid} survived SIGKILL; state kept in {state_dir}",
                    {"pid": pid},
                )
            logger.info("stopped mongod pid=%s in %.1fs", pid, time.monotonic() - started)
        _state_path(state_dir).unlink(missing_ok=True)
        print(f"stopped mongod (data kept in {state_dir / 'mongod'})", file=sys.stderr)
        return 0


def _cli_uri(state_dir: Path) -> int:
    state = read_json(_state_path(state_dir))
    if state is None or _verified_pid(state) is None:
        print(
            f"no mongod running in {state_dir}; "
            "start one with `python -m migronaut_dev.mongod start`",
            file=sys.stderr,
        )
        return 1
    print(state["uri"])
    return 0


def _cli_status(state_dir: Path) -> int:
    state = read_json(_state_path(state_dir)) or {}
    running = bool(state) and _verified_pid(state) is not None
    print(json.dumps({"running": running, "state_dir": str(state_dir), **state}, indent=2))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``python -m migronaut_dev.mongod``; return its exit status."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--state-dir",
        type=Path,
        default=DEFAULT_STATE_DIR,
        help="where state and data live (default: .migronaut)",
    )
    parser = argparse.ArgumentParser(
        prog="python -m migronaut_dev.mongod",
        description="A local single-node MongoDB replica set for the demo.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("start", parents=[common], help="start it, or print the running URI")
    commands.add_parser("stop", parents=[common], help="shut it down; data is kept")
    commands.add_parser("uri", parents=[common], help="print the URI of the running server")
    commands.add_parser("status", parents=[common], help="print the state as JSON")
    args = parser.parse_args(argv)
    state_dir: Path = args.state_dir.resolve()
    handlers: dict[str, Callable[[Path], int]] = {
        "start": _cli_start,
        "stop": _cli_stop,
        "uri": _cli_uri,
        "status": _cli_status,
    }
    try:
        return handlers[args.command](state_dir)
    except MigronautError as exc:
        print(f"{type(exc).__name__}: {exc.message}", file=sys.stderr)
        return exc.exit_code
