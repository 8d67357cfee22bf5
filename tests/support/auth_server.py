"""A standalone ``mongod`` with access control on, for tests of missing privileges.

The suite's replica set runs without authentication, where every user may do
everything; a privilege can only be missing on a server that enforces them.
:func:`auth_mongod` starts one on a free loopback port (a standalone: a replica
set with ``--auth`` needs a key file), creates its ``admin`` root user through
the localhost exception, and stops it afterwards.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pymongo import MongoClient
from pymongo.errors import PyMongoError

from migronaut_dev.mongod import find_mongod
from migronaut_dev.mongod.plumbing import die_with_parent_preexec

ADMIN = ("admin", "admin-secret")


@dataclass(frozen=True, slots=True)
class AuthServer:
    """A running access-controlled ``mongod``: its port and a root client."""

    port: int
    admin: MongoClient[dict[str, Any]]

    def uri(self, user: str, password: str, *, source: str) -> str:
        return f"mongodb://{user}:{password}@127.0.0.1:{self.port}/?authSource={source}"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def auth_mongod(directory: Path, *, timeout: float = 60.0) -> Iterator[AuthServer]:
    """Run ``mongod --auth`` with its data in ``directory``; stopped on exit."""
    port = _free_port()
    directory.mkdir(parents=True, exist_ok=True)
    args = [
        str(find_mongod()),
        "--auth",
        "--port",
        str(port),
        "--bind_ip",
        "127.0.0.1",
        "--dbpath",
        str(directory),
        "--wiredTigerCacheSizeGB",
        "0.25",
        "--nounixsocket",
        "--setParameter",
        "diagnosticDataCollectionEnabled=false",
        "--logpath",
        str(directory / "mongod.log"),
    ]
    process = subprocess.Popen(
        args,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=die_with_parent_preexec(),  # noqa: PLW1509
    )
    admin: MongoClient[dict[str, Any]] | None = None
    try:
        _create_admin(port, process, time.monotonic() + timeout)
        admin = MongoClient(
            f"mongodb://{ADMIN[0]}:{ADMIN[1]}@127.0.0.1:{port}/?authSource=admin",
            tz_aware=True,
        )
        yield AuthServer(port, admin)
    finally:
        if admin is not None:
            admin.close()
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _create_admin(port: int, process: subprocess.Popen[bytes], deadline: float) -> None:
    """The first user, through the localhost exception, once the server answers."""
    while True:
        assert process.poll() is None, f"mongod --auth exited with status {process.returncode}"
        client: MongoClient[dict[str, Any]] = MongoClient(
            "127.0.0.1", port, serverSelectionTimeoutMS=500, directConnection=True
        )
        try:
            client.admin.command("createUser", ADMIN[0], pwd=ADMIN[1], roles=["root"])
            return
        except PyMongoError:
            assert time.monotonic() < deadline, "mongod --auth did not come up"
            time.sleep(0.2)
        finally:
            client.close()
