"""Loopback ports, direct clients, process ids and state files.

The small pieces :mod:`~migronaut_dev.mongod.replica_set`, :mod:`~migronaut_dev.mongod.resolve`
and :mod:`~migronaut_dev.mongod.cli` share; nothing here starts a server.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pymongo import MongoClient
from pymongo.errors import PyMongoError

from migronaut_dev.endpoints import LOOPBACK

_PR_SET_PDEATHSIG = 1


@functools.cache
def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return prctl


def die_with_parent_preexec() -> Callable[[], None] | None:
    """Return a ``preexec_fn`` that ties the child's life to this thread's."""
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # mongod sets SO_REUSEADDR too, so a port in TIME_WAIT counts as free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def direct_client(
    host: str, port: int, *, timeout_ms: int = 1000
) -> Iterator[MongoClient[dict[str, Any]]]:
    client: MongoClient[dict[str, Any]] = MongoClient(
        host,
        port,
        directConnection=True,
        serverSelectionTimeoutMS=timeout_ms,
        connectTimeoutMS=timeout_ms,
        socketTimeoutMS=max(timeout_ms, 10_000),
        appname="migronaut-dev-mongod",
    )
    try:
        yield client
    finally:
        client.close()


def answers(host: str, port: int) -> bool:
    try:
        with direct_client(host, port, timeout_ms=500) as client:
            client.admin.command("ping")
    except PyMongoError:
        return False
    return True


def is_writable_primary(host: str, port: int) -> bool:
    try:
        with direct_client(host, port, timeout_ms=500) as client:
            return bool(client.admin.command("hello").get("isWritablePrimary"))
    except PyMongoError:
        return False


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_json(path: Path, data: dict[str, Any]) -> None:
    scratch = path.with_suffix(".tmp")
    scratch.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(scratch, path)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # an unreaped zombie still "exists" but is gone for our purposes
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"
