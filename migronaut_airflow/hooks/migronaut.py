"""The hook: a migronaut kit built from an Airflow ``mongo`` connection."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from airflow.exceptions import AirflowProviderDeprecationWarning
from airflow.providers.mongo.hooks.mongo import MongoHook
from airflow.sdk.bases.hook import BaseHook

from migronaut_airflow.hooks.metrics import AirflowStatsSink
from migronaut_core import Migronaut, load_config
from migronaut_core.errors import ConfigInvalidError

#: Where migration files are when a DAG names none: ``$MIGRONAUT_MIGRATIONS_DIR``,
#: else ``migrations/`` beside the DAG files.
MIGRATIONS_DIR_ENV = "MIGRONAUT_MIGRATIONS_DIR"


class MigronautHook(BaseHook):
    """Builds one :class:`~migronaut_core.Migronaut` kit per task process.

    The kit reports its background metrics through Airflow's configured metrics
    backend (:class:`~migronaut_airflow.hooks.metrics.AirflowStatsSink`).

    The connection is a ``mongo`` connection (``apache-airflow-providers-mongo``):
    host, port, credentials, TLS/SRV extras; its *schema* is the database unless
    ``database`` is given. Nothing is looked up until :meth:`get_conn`, so a DAG
    file can build operators without reaching the metadata DB or MongoDB.

    :param mongo_conn_id: the ``mongo`` connection id.
    :param migrations_dir: the migration files (default: ``$MIGRONAUT_MIGRATIONS_DIR``).
    :param database: overrides the connection's schema.
    :param config: further migronaut config keys (collection names, lock TTL, …).
    :param conn_id: deprecated name of ``mongo_conn_id``.
    """

    conn_name_attr = "mongo_conn_id"
    default_conn_name = "migronaut_default"
    conn_type = "mongo"
    hook_name = "migronaut"

    def __init__(
        self,
        mongo_conn_id: str = default_conn_name,
        *,
        migrations_dir: str | os.PathLike[str] | None = None,
        database: str | None = None,
        config: Mapping[str, Any] | None = None,
        conn_id: str | None = None,
    ) -> None:
        super().__init__()
        self.mongo_conn_id = mongo_conn_id_from(mongo_conn_id, conn_id)
        self.migrations_dir = migrations_dir
        self.database = database
        self.config = dict(config or {})
        self._mongo: MongoHook | None = None
        self._kit: Migronaut | None = None

    def get_conn(self) -> Migronaut:
        """Return this hook's kit, connecting on first use."""
        if self._kit is None:
            self._mongo = MongoHook(mongo_conn_id=self.mongo_conn_id)
            database = self.database or self._mongo.connection.schema
            if not database:
                raise ConfigInvalidError(
                    f"connection {self.mongo_conn_id!r} names no database (its schema) and the "
                    "task gives none",
                    {"key": "database", "mongo_conn_id": self.mongo_conn_id},
                )
            overrides = {
                **self.config,
                "database": database,
                "migrations_dir": self._migrations_dir(),
            }
            config = load_config(overrides, env={}, cwd=Path(overrides["migrations_dir"]).parent)
            self._kit = Migronaut(
                config, client=self._mongo.get_conn(), metrics_sink=AirflowStatsSink()
            )
        return self._kit

    def _migrations_dir(self) -> str:
        chosen = self.migrations_dir or os.environ.get(MIGRATIONS_DIR_ENV)
        if not chosen:
            raise ConfigInvalidError(
                "no migrations directory: pass migrations_dir or set MIGRONAUT_MIGRATIONS_DIR",
                {"key": "migrations_dir"},
            )
        return str(Path(chosen).resolve())

    def close(self) -> None:
        """Close the MongoDB client; the hook connects again on next use."""
        if self._kit is not None:
            self._kit.close()
            self._kit = None
        if self._mongo is not None and self._mongo.client is not None:
            self._mongo.client.close()
            self._mongo.client = None
        self._mongo = None

    def __enter__(self) -> MigronautHook:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def mongo_conn_id_from(mongo_conn_id: str, conn_id: str | None) -> str:
    """The connection id to use: ``mongo_conn_id``, or the deprecated ``conn_id`` if given.

    The old name still works, with an ``AirflowProviderDeprecationWarning`` (a
    ``DeprecationWarning``) naming the new one.

    :raises TypeError: both names are given, with different connections.
    """
    if conn_id is None:
        return mongo_conn_id
    if mongo_conn_id not in (MigronautHook.default_conn_name, conn_id):
        raise TypeError(
            f"got mongo_conn_id={mongo_conn_id!r} and conn_id={conn_id!r}; "
            "conn_id is the deprecated name of mongo_conn_id: pass only mongo_conn_id"
        )
    warnings.warn(
        "the conn_id argument is deprecated; pass mongo_conn_id instead",
        AirflowProviderDeprecationWarning,
        stacklevel=3,
    )
    return conn_id
