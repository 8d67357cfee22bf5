"""Fixtures shared by every test folder: one real MongoDB per run, one database per test.

The server comes from :func:`migronaut_dev.mongod.resolve_server` (an explicit
``MIGRONAUT_TEST_MONGODB_URI``, Docker, or the bundled ``mongod``) and is stopped
when the session ends, whatever the outcome. A missing server fails the tests that
need one instead of skipping them: a skipped integration suite must not pass.
"""

from __future__ import annotations

import os
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


#: Folders whose tests share one expensive set-up per worker process (an ``airflow
#: standalone``, the Celery cluster): under pytest-xdist each runs whole on one worker,
#: and first, since each is a long chain of the run.
_SHARED_SETUP_GROUPS = {
    "tests/airflow/e2e/": "airflow-standalone",
    "tests/airflow_cluster/": "cluster",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark tests by folder (``-m integration``, ``-m chaos``); shared set-ups go first."""
    for item in items:
        try:
            folder = item.path.resolve().relative_to(_TESTS_DIR).parts[0]
        except ValueError:
            continue
        marker = _FOLDER_MARKERS.get(folder)
        if marker is not None:
            item.add_marker(marker)
    items.sort(key=lambda item: work_unit(item.nodeid) not in _SHARED_SETUP_GROUPS.values())


def work_unit(nodeid: str) -> str:
    """What one worker runs whole: a shared set-up's folder, else the test's module."""
    module = nodeid.split("::", 1)[0]
    for prefix, group in _SHARED_SETUP_GROUPS.items():
        if module.startswith(prefix):
            return group
    return module


#: A file the scheduler creates once every work unit is handed out and at most one
#: worker still runs: the run's tail, which ``scripts/test.sh`` fills with the
#: compatibility run instead of leaving the other workers' cores idle.
TAIL_FLAG_ENV = "MIGRONAUT_TEST_TAIL_FLAG"


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, absent without it
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Spread whole work units (:func:`work_unit`) over the workers, in collection order.

    ``scripts/test.sh`` runs ``-n N``: most of the suite waits on mongod, Airflow and
    subprocesses. A module's tests stay on one worker (its module fixtures start once),
    a shared set-up's folder too, so its Airflow deployments never overlap.
    """
    from xdist.scheduler import LoadScopeScheduling

    tail_flag = os.environ.get(TAIL_FLAG_ENV)

    class WorkUnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

        def mark_test_complete(self, node: Any, item_index: int, duration: float = 0) -> None:
            super().mark_test_complete(node, item_index, duration)
            if tail_flag is not None and self._in_the_tail():
                Path(tail_flag).touch()

        def _in_the_tail(self) -> bool:
            busy = [work for work in self.assigned_work.values() if self._pending_of(work)]
            return not self.workqueue and len(busy) <= 1

    return WorkUnitScheduling(config, log)


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
