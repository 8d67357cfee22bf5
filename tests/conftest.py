"""Fixtures shared by every test folder: one real MongoDB per run, one database per test.

The server comes from :func:`migronaut_dev.mongod.resolve_server` (an explicit
``MIGRONAUT_TEST_MONGODB_URI``, Docker, or the bundled ``mongod``) and is stopped
when the session ends, whatever the outcome. A missing server fails the tests that
need one instead of skipping them: a skipped integration suite must not pass.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.database import Database

from migronaut_dev.errors import ServerUnavailableError
from migronaut_dev.mongod import (
    LocalReplicaSet,
    ServerHandle,
    find_mongod,
    resolve_server,
    start_replica_set,
)
from tests.support.servers import standalone_mongod

_TESTS_DIR = Path(__file__).resolve().parent
#: Top-level test folder -> marker every test in it gets.
_FOLDER_MARKERS = {"integration": "integration", "chaos": "chaos"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark tests by folder, so ``-m integration`` and ``-m chaos`` select them."""
    for item in items:
        try:
            folder = item.path.resolve().relative_to(_TESTS_DIR).parts[0]
        except ValueError:
            continue
        marker = _FOLDER_MARKERS.get(folder)
        if marker is not None:
            item.add_marker(marker)


@pytest.fixture(scope="session")
def mongo_server(request: pytest.FixtureRequest) -> ServerHandle:
    """The MongoDB replica set of this test run, stopped when the session ends."""
    try:
        server = resolve_server("test")
    except ServerUnavailableError as exc:
        pytest.fail(f"ServerUnavailableError: {exc.message}", pytrace=False)
    request.addfinalizer(server.stop)
    return server


@pytest.fixture(scope="session")
def mongo_uri(mongo_server: ServerHandle) -> str:
    """URI of the session's server (may carry credentials: never print it)."""
    return mongo_server.uri


@pytest.fixture(scope="session")
def mongo_client(mongo_uri: str) -> Iterator[MongoClient[dict[str, Any]]]:
    """One client for the whole run, closed at the end."""
    client: MongoClient[dict[str, Any]] = MongoClient(
        mongo_uri, tz_aware=True, appname="migronaut-tests"
    )
    yield client
    client.close()


@pytest.fixture
def db(mongo_client: MongoClient[dict[str, Any]]) -> Iterator[Database[dict[str, Any]]]:
    """A fresh database for one test, dropped afterwards."""
    database = mongo_client[f"t_{uuid.uuid4().hex[:12]}"]
    yield database
    mongo_client.drop_database(database.name)


@pytest.fixture
def replica_set_3() -> Iterator[Callable[..., LocalReplicaSet]]:
    """Factory of local three-member replica sets for failover tests.

    Each call starts a set (keyword arguments go to ``start_replica_set``); all are
    stopped after the test. Needs a local ``mongod``; without one the test fails.
    """
    started: list[LocalReplicaSet] = []

    def start(**kwargs: Any) -> LocalReplicaSet:
        try:
            find_mongod()
        except ServerUnavailableError as exc:
            pytest.fail(f"ServerUnavailableError: {exc.message}", pytrace=False)
        replica_set = start_replica_set(3, **kwargs)
        started.append(replica_set)
        return replica_set

    yield start
    for replica_set in started:
        replica_set.stop()


@pytest.fixture
def standalone_uri(tmp_path: Path) -> Iterator[str]:
    """URI of a standalone ``mongod`` (no replica set: no transactions, no change streams)."""
    with standalone_mongod(tmp_path / "standalone") as uri:
        yield uri
