"""Which MongoDB the UI reads and steers: a target's, through one kit per target and process.

The plugin runs in the API server, which parses no DAG file, so it resolves the
target's settings the way the DAGs do (:func:`migronaut_airflow.targets.resolve_target`):
Airflow's ``[migronaut]`` section, the ``MIGRONAUT_*`` variables, then
``migronaut.toml`` beside the migrations folder. Only ``repin`` and ``retry
--repin`` read migration files; status needs none. Arguments given to
``build_dags`` in a DAG file do not reach the API server: settings the UI must
share belong in Airflow's configuration or ``migronaut.toml``.

The kit is built through :class:`~migronaut_airflow.hooks.migronaut.MigronautHook`
on first use and kept for the life of the process (one MongoDB client per API
worker, shared by its request threads; pymongo reconnects on its own). A changed
connection is picked up when the API server restarts.
"""

from __future__ import annotations

import threading

from airflow.sdk.exceptions import AirflowNotFoundException

from migronaut_airflow.hooks.migronaut import MigronautHook
from migronaut_airflow.plugins.access import TargetName
from migronaut_airflow.targets import DEFAULT_TARGET, TargetSettings, resolve_target, target_names
from migronaut_core import Migronaut
from migronaut_core.errors import ConfigInvalidError, MigronautError


class TargetNotConfiguredError(MigronautError):
    """The UI cannot build its kit: a missing connection, database or migrations directory."""

    code = "NOT_CONFIGURED"


class KitCache:
    """One kit per target for the whole process; safe to use from request threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hooks: dict[str, MigronautHook] = {}

    def kit(self, target: TargetSettings) -> Migronaut:
        """The target's kit, connecting on first use.

        :raises TargetNotConfiguredError: the connection is unknown or names no database.
        """
        with self._lock:
            key = repr(sorted(target.operator_args().items()))
            hook = self._hooks.get(key)
            if hook is None:
                hook = MigronautHook(
                    target.mongo_conn_id,
                    migrations_dir=target.migrations_dir,
                    database=target.database,
                    config=target.migronaut_config,
                )
                self._hooks[key] = hook
            try:
                kit = hook.get_conn()
            except AirflowNotFoundException as exc:
                raise TargetNotConfiguredError(
                    f"the connection {target.mongo_conn_id!r} is not defined; add it, or name "
                    "another as conn_id in Airflow's [migronaut] section",
                    {"mongo_conn_id": target.mongo_conn_id},
                ) from exc
            except ConfigInvalidError as exc:
                raise TargetNotConfiguredError(
                    exc.message, {"mongo_conn_id": target.mongo_conn_id}
                ) from exc
            kit.connect()  # wired once here, not raced by request threads
            return kit

    def close(self) -> None:
        """Close every client; the next request connects again."""
        with self._lock:
            for hook in self._hooks.values():
                hook.close()
            self._hooks.clear()


#: The process's kits.
kits = KitCache()


class UnknownTargetError(MigronautError):
    """The request names a target this Airflow does not configure."""

    code = "UNKNOWN_TARGET"


def current_kit(target: TargetName = DEFAULT_TARGET) -> Migronaut:
    """The kit of the request's target (a FastAPI dependency).

    :raises UnknownTargetError: ``[migronaut] targets`` does not list it.
    :raises TargetNotConfiguredError: its settings are invalid, or as :meth:`KitCache.kit`.
    """
    try:
        if target not in target_names():
            raise UnknownTargetError(
                f"no target {target!r}: [migronaut] targets lists the others", {"target": target}
            )
        settings = resolve_target(target)
    except ConfigInvalidError as exc:
        raise TargetNotConfiguredError(exc.message, exc.context) from exc
    return kits.kit(settings)
