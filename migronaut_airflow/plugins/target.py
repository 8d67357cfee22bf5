"""Which MongoDB the UI reads and steers: the one the DAGs use, through one kit per process.

The plugin runs in the API server, which has no DAG to ask, so it reads the same
environment as ``dags/migronaut_dags.py``:

- ``MIGRONAUT_CONN_ID``: the ``mongo`` connection (default ``migronaut_default``);
  its schema is the database;
- ``MIGRONAUT_MIGRATIONS_DIR``: the migration files (default: ``migrations/`` in
  the dags folder, where the DAG file looks by default). Only ``repin`` and
  ``retry --repin`` read files; status needs none.

A ``migronaut.toml`` or ``pyproject.toml`` ``[tool.migronaut]`` beside the
migrations directory is read as the hook reads it (collection names, …).

The kit is built through :class:`~migronaut_airflow.hooks.migronaut.MigronautHook`
on first use and kept for the life of the process (one MongoDB client per API
worker, shared by its request threads; pymongo reconnects on its own). A changed
connection is picked up when the API server restarts.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from airflow.configuration import conf
from airflow.sdk.exceptions import AirflowNotFoundException

from migronaut_airflow.hooks.migronaut import MIGRATIONS_DIR_ENV, MigronautHook
from migronaut_core import Migronaut
from migronaut_core.errors import ConfigInvalidError, MigronautError

#: The environment variable naming the ``mongo`` connection (as the DAG file reads it).
CONN_ID_ENV = "MIGRONAUT_CONN_ID"


class TargetNotConfiguredError(MigronautError):
    """The UI cannot build its kit: a missing connection, database or migrations directory."""

    code = "NOT_CONFIGURED"


@dataclass(frozen=True, slots=True)
class Target:
    """A connection id and a migrations directory: what one kit is built from."""

    mongo_conn_id: str
    migrations_dir: str

    @classmethod
    def from_environment(cls, env: Mapping[str, str] = os.environ) -> Target:
        """The DAG file's defaults: ``MIGRONAUT_CONN_ID`` and ``MIGRONAUT_MIGRATIONS_DIR``."""
        mongo_conn_id = env.get(CONN_ID_ENV) or MigronautHook.default_conn_name
        migrations = env.get(MIGRATIONS_DIR_ENV) or str(
            Path(conf.get("core", "dags_folder")) / "migrations"
        )
        return cls(mongo_conn_id=mongo_conn_id, migrations_dir=str(Path(migrations).resolve()))


class KitCache:
    """One kit per target for the whole process; safe to use from request threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hooks: dict[Target, MigronautHook] = {}

    def kit(self, target: Target) -> Migronaut:
        """The target's kit, connecting on first use.

        :raises TargetNotConfiguredError: the connection is unknown or names no database.
        """
        with self._lock:
            hook = self._hooks.get(target)
            if hook is None:
                hook = MigronautHook(target.mongo_conn_id, migrations_dir=target.migrations_dir)
                self._hooks[target] = hook
            try:
                kit = hook.get_conn()
            except AirflowNotFoundException as exc:
                raise TargetNotConfiguredError(
                    f"the connection {target.mongo_conn_id!r} is not defined; set {CONN_ID_ENV} "
                    "or add the connection",
                    {"mongo_conn_id": target.mongo_conn_id},
                ) from exc
            except ConfigInvalidError as exc:
                raise TargetNotConfiguredError(
                    exc.message, {"mongo_conn_id": target.mongo_conn_id}
                ) from exc
            kit.runtime  # noqa: B018 - built once here, not raced by request threads
            return kit

    def close(self) -> None:
        """Close every client; the next request connects again."""
        with self._lock:
            for hook in self._hooks.values():
                hook.close()
            self._hooks.clear()


#: The process's kits.
kits = KitCache()


def current_kit() -> Migronaut:
    """The kit of the environment's target (a FastAPI dependency)."""
    return kits.kit(Target.from_environment())
