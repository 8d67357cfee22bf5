"""Where development servers listen and how Airflow reaches them.

:func:`free_port` picks a loopback port for a ``mongod`` or an ``airflow standalone``;
:func:`airflow_connection` turns a MongoDB URI into the ``mongo`` connection Airflow
reads from ``AIRFLOW_CONN_*``. The demo, the tests and the benchmarks share both.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Collection
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from migronaut_dev.errors import ServerUnavailableError

#: The interface every local server binds to.
LOOPBACK = "127.0.0.1"


def free_port(exclude: Collection[int] = ()) -> int:
    """A TCP port on loopback that nothing listens on now, and not one of ``exclude``.

    :raises ServerUnavailableError: no such port turned up in 100 tries.
    """
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((LOOPBACK, 0))
            port = int(sock.getsockname()[1])
        if port not in exclude:
            return port
    raise ServerUnavailableError("no free loopback port found")


def airflow_connection(uri: str, database: str) -> str:
    """An Airflow ``mongo`` connection (JSON) for a MongoDB URI and a database.

    Every host, credentials, ``mongodb+srv`` (extra ``srv``) and the URI's options
    (extras, handed to ``MongoClient``) are kept.

    :raises ValueError: ``uri`` is not a ``mongodb://`` or ``mongodb+srv://`` URI.
    """
    parts = urlsplit(uri)
    if parts.scheme not in ("mongodb", "mongodb+srv"):
        raise ValueError(f"not a MongoDB URI (scheme {parts.scheme!r})")
    userinfo, _, hosts = parts.netloc.rpartition("@")
    login, _, password = userinfo.partition(":")
    extra: dict[str, Any] = dict(parse_qsl(parts.query))
    if parts.scheme == "mongodb+srv":
        extra["srv"] = True
    connection = {
        "conn_type": "mongo",
        "host": hosts,
        "schema": database,
        "login": unquote(login) or None,
        "password": unquote(password) or None,
        "extra": extra,
    }
    return json.dumps({key: value for key, value in connection.items() if value is not None})
