"""Server-side fault and topology helpers: fail points and a standalone ``mongod``.

:func:`standalone_mongod` backs the ``standalone_uri`` fixture (``tests/conftest.py``)
for tests that check what happens without a replica set.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pymongo import MongoClient

from migronaut_dev.endpoints import free_port
from migronaut_dev.mongod import find_mongod


@contextlib.contextmanager
def fail_point(
    client: MongoClient[dict[str, Any]], data: dict[str, Any], mode: Any
) -> Iterator[None]:
    """Turn the ``failCommand`` fail point on with ``data`` and ``mode``, off on exit."""
    client.admin.command("configureFailPoint", "failCommand", mode=mode, data=data)
    try:
        yield
    finally:
        client.admin.command("configureFailPoint", "failCommand", mode="off")


@contextlib.contextmanager
def standalone_mongod(dbpath: Path) -> Iterator[str]:
    """Run a ``mongod`` that is not a replica set on a free loopback port; its URI."""
    port = free_port()
    dbpath.mkdir()
    process = subprocess.Popen(
        [
            str(find_mongod()),
            "--port",
            str(port),
            "--bind_ip",
            "127.0.0.1",
            "--dbpath",
            str(dbpath),
            "--wiredTigerCacheSizeGB",
            "0.25",
            "--nounixsocket",
            "--logpath",
            str(dbpath / "log"),
        ],
        stdout=subprocess.DEVNULL,
    )
    uri = f"mongodb://127.0.0.1:{port}/?directConnection=true"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with MongoClient(uri, serverSelectionTimeoutMS=500) as client:
                    client.admin.command("ping")
                break
            except Exception:
                assert time.monotonic() < deadline, "standalone mongod did not start"
                time.sleep(0.2)
        yield uri
    finally:
        process.terminate()
        process.wait(timeout=30)
