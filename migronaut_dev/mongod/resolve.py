"""Pick the MongoDB server of a test run or of the demo.

:func:`resolve_server` tries, in order (DESIGN.md §2), an explicit URI, a Docker
engine running ``mongo:7``, then the bundled ``mongod`` as a one-member
:class:`~migronaut_dev.mongod.replica_set.LocalReplicaSet`, and hands back a
:class:`ServerHandle` that stops what it started.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import time
from collections.abc import Callable
from typing import Any, Literal

from pymongo.errors import OperationFailure

from migronaut_core.errors import ConfigInvalidError
from migronaut_core.scrub import redact_uri
from migronaut_dev.errors import ServerUnavailableError
from migronaut_dev.lifecycle import StopsOnExit
from migronaut_dev.mongod.binary import (
    DEMO_URI_ENV,
    DOCKER_IMAGE,
    TEST_URI_ENV,
    Purpose,
    find_mongod,
    how_to_get_a_server,
)
from migronaut_dev.mongod.plumbing import direct_client, is_writable_primary
from migronaut_dev.mongod.replica_set import LocalReplicaSet, start_replica_set

logger = logging.getLogger(__name__)

ServerSource = Literal["env", "docker", "bundled"]


class ServerHandle(StopsOnExit):
    """A MongoDB server chosen by :func:`resolve_server`.

    ``uri`` connects to it; ``source`` says where it came from. :meth:`stop` ends a
    server this process started and does nothing for one given by URI. Idempotent.
    """

    def __init__(
        self,
        uri: str,
        source: ServerSource,
        *,
        replica_set: LocalReplicaSet | None = None,
        stopper: Callable[[], None] | None = None,
    ) -> None:
        self.uri = uri
        self.source: ServerSource = source
        #: The local set behind a ``"bundled"`` server, for chaos tests.
        self.replica_set = replica_set
        self._stopper = stopper

    def __repr__(self) -> str:
        return f"ServerHandle(source={self.source!r}, uri={redact_uri(self.uri)!r})"

    def stop(self) -> None:
        """Stop the server if this process started it."""
        stopper, self._stopper = self._stopper, None
        if stopper is not None:
            stopper()


def resolve_server(purpose: Purpose) -> ServerHandle:
    """Find or start a MongoDB replica set for the test suite or the demo.

    Order (DESIGN.md §2): ``MIGRONAUT_TEST_MONGODB_URI`` (for ``"test"``) or
    ``MIGRONAUT_MONGODB_URI`` (for ``"demo"``), used as given; a Docker engine that
    answers within two seconds, running ``mongo:7`` as a single-node replica set;
    the bundled ``mongod`` via :func:`start_replica_set`. A started server dies
    with this process.

    :raises ConfigInvalidError: ``purpose`` is neither ``"test"`` nor ``"demo"``.
    :raises ServerUnavailableError: none of these is available; the message says how
        to provide one.
    """
    if purpose not in ("test", "demo"):
        raise ConfigInvalidError(
            f"purpose must be 'test' or 'demo', got {purpose!r}", {"key": "purpose"}
        )
    env = TEST_URI_ENV if purpose == "test" else DEMO_URI_ENV
    uri = os.environ.get(env, "").strip()
    if uri:
        return ServerHandle(uri, "env")
    docker_handle = _try_docker()
    if docker_handle is not None:
        return docker_handle
    try:
        binary = find_mongod()
    except ServerUnavailableError as exc:
        raise ServerUnavailableError(
            f"No MongoDB server for {purpose}. " + how_to_get_a_server(purpose),
            {"key": env},
        ) from exc
    replica_set = start_replica_set(1, binary=binary)
    return ServerHandle(
        replica_set.uri, "bundled", replica_set=replica_set, stopper=replica_set.stop
    )


def _try_docker() -> ServerHandle | None:
    """Start ``mongo:7`` in Docker if an engine answers quickly, else return None."""
    try:
        docker: Any = importlib.import_module("docker")
    except ImportError:
        return None
    try:
        engine = docker.from_env(timeout=2)
        try:
            engine.ping()
        finally:
            engine.close()
    except Exception:  # no engine, no socket, no permission: all mean "not Docker"
        return None
    try:
        return _start_docker_mongo()
    except Exception as exc:  # e.g. offline image pull; the bundled binary may still do
        logger.warning(
            "Docker answered but %s did not start (%s)", DOCKER_IMAGE, type(exc).__name__
        )
        return None


def _start_docker_mongo() -> ServerHandle:
    try:
        module: Any = importlib.import_module("testcontainers.community.mongodb")
    except ImportError:
        module = importlib.import_module("testcontainers.mongodb")
    container = module.MongoDbContainer(DOCKER_IMAGE)
    # The image's entrypoint only sets up root credentials (and --auth, which a
    # replica set would refuse without a keyFile) when the command is "mongod";
    # spelling the path skips that, leaving a plain unauthenticated replica set.
    container.with_command("/usr/bin/mongod --replSet rs0 --bind_ip_all --port 27017")
    container.start()
    try:
        host = container.get_container_host_ip()
        port = int(container.get_exposed_port(27017))
        with (
            direct_client(host, port, timeout_ms=10_000) as client,
            contextlib.suppress(OperationFailure),  # already initiated
        ):
            client.admin.command(
                "replSetInitiate",
                {"_id": "rs0", "members": [{"_id": 0, "host": "localhost:27017"}]},
            )
        deadline = time.monotonic() + 60
        while not is_writable_primary(host, port):
            if time.monotonic() >= deadline:
                raise ServerUnavailableError(f"{DOCKER_IMAGE} elected no primary in 60s")
            time.sleep(0.2)
    except BaseException:
        container.stop()
        raise
    # The member advertises its in-container address, so connect directly.
    uri = f"mongodb://{host}:{port}/?directConnection=true"
    return ServerHandle(uri, "docker", stopper=container.stop)
