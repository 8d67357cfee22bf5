"""The kit: one object that owns a connection and runs every migronaut operation.

The CLI, the Airflow provider and user code all go through :class:`Migronaut`.
It connects lazily (creating one is free, e.g. while Airflow parses a DAG file)
and owns the client it creates; a client passed in is borrowed and left open.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import TracebackType
from typing import Any

from pymongo import MongoClient
from pymongo.database import Database
from pymongo.errors import ConfigurationError, PyMongoError

from migronaut_core import files
from migronaut_core.changelog import Actor
from migronaut_core.config import Config, load_config
from migronaut_core.errors import ConfigInvalidError, ConnectionFailedError
from migronaut_core.lock import LockInfo
from migronaut_core.runner import (
    BackgroundHooks,
    MigrationRunner,
    RunOptions,
    RunResult,
    StatusRow,
)

_CREDENTIALS = re.compile(r"(mongodb(?:\+srv)?://)[^@/]+@")


def redact_uri(uri: str) -> str:
    """Return ``uri`` without user and password, for messages and logs."""
    return _CREDENTIALS.sub(r"\1***@", uri)


class Migronaut:
    """Runs migrations against one MongoDB database.

    :param config: settings; by default read from files and environment
        (:func:`~migronaut_core.config.load_config`) with ``overrides`` on top.
    :param client: an existing client to borrow instead of connecting.
    :param overrides: config keys, e.g. ``uri=…, database=…``.
    """

    def __init__(
        self,
        config: Config | None = None,
        *,
        client: MongoClient[dict[str, Any]] | None = None,
        background: BackgroundHooks | None = None,
        **overrides: Any,
    ) -> None:
        if config is not None and overrides:
            raise ConfigInvalidError(
                "pass either a Config or config keys, not both", {"key": next(iter(overrides))}
            )
        self.config = config if config is not None else load_config(overrides)
        self._client = client
        self._owns_client = client is None
        self._background = background
        self._runner: MigrationRunner | None = None

    # -- connection ----------------------------------------------------------------------

    @property
    def client(self) -> MongoClient[dict[str, Any]]:
        if self._client is None:
            self._client = self._connect()
        return self._client

    @property
    def db(self) -> Database[dict[str, Any]]:
        return self.client[self.config.database_name()]

    def _connect(self) -> MongoClient[dict[str, Any]]:
        self.config.database_name()  # a missing database fails before connecting
        try:
            client: MongoClient[dict[str, Any]] = MongoClient(
                self.config.uri,
                serverSelectionTimeoutMS=self.config.server_selection_timeout_ms,
                appname="migronaut",
                tz_aware=True,
            )
            client.admin.command("ping")
        except ConfigurationError as exc:
            raise ConfigInvalidError(
                f"uri is not usable: {type(exc).__name__}", {"key": "uri"}
            ) from exc
        except PyMongoError as exc:
            raise ConnectionFailedError(
                f"cannot reach MongoDB at {redact_uri(self.config.uri)} "
                f"({type(exc).__name__}); is the server running?",
                {"uri": redact_uri(self.config.uri)},
            ) from exc
        return client

    def close(self) -> None:
        """Close the client if this kit created it; the kit can connect again later."""
        if self._client is not None and self._owns_client:
            self._client.close()
            self._client = None
        self._runner = None

    def __enter__(self) -> Migronaut:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- the runner ------------------------------------------------------------------------

    @property
    def runner(self) -> MigrationRunner:
        if self._runner is None:
            self._runner = MigrationRunner(
                self.config, self.client, self.db, background=self._background
            )
        return self._runner

    def up(
        self,
        *,
        to: str | None = None,
        only: str | None = None,
        requested_by: str | None = None,
        reason: str | None = None,
        wait_for_lock_seconds: float = 0,
        allow_checksum_mismatch: bool = False,
        on_background_pending: str = "error",
        options: RunOptions | None = None,
    ) -> RunResult:
        """Apply pending migrations (all, up to ``to``, or ``only`` one)."""
        opts = options or RunOptions(
            wait_for_lock_seconds=wait_for_lock_seconds,
            actor=Actor(requested_by=requested_by, reason=reason),
            allow_checksum_mismatch=allow_checksum_mismatch,
            on_background_pending=on_background_pending,  # type: ignore[arg-type]
        )
        return self.runner.up(to=to, only=only, options=opts)

    def down(
        self,
        *,
        to: str | None = None,
        requested_by: str | None = None,
        reason: str | None = None,
        wait_for_lock_seconds: float = 0,
        options: RunOptions | None = None,
    ) -> RunResult:
        """Revert the last applied migration, or all applied after ``to``."""
        opts = options or RunOptions(
            wait_for_lock_seconds=wait_for_lock_seconds,
            actor=Actor(requested_by=requested_by, reason=reason),
        )
        return self.runner.down(to=to, options=opts)

    def status(self) -> list[StatusRow]:
        """Return one row per migration, oldest first."""
        return self.runner.status()

    def create(self, title: str, *, background: bool = False) -> Path:
        """Create a migration file from a template; needs no database."""
        return files.write_new(self.config.migrations_dir, title, background=background)

    def inspect_lock(self) -> LockInfo | None:
        """Return who holds the run lock, if anyone ever took it."""
        return self.runner.run_lock(Actor()).inspect()
