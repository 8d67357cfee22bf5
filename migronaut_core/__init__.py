"""migronaut: online, resumable MongoDB schema migrations.

The public API is :class:`Migronaut` (the kit), :func:`load_config` and the error
hierarchy in :mod:`migronaut_core.errors`. Importing this package never imports
Airflow.
"""

from __future__ import annotations

from migronaut_core.changelog import Actor
from migronaut_core.config import Config, load_config
from migronaut_core.errors import (
    BackgroundConflictError,
    BackgroundFailedError,
    BackgroundPendingError,
    ChecksumMismatchError,
    ConfigInvalidError,
    ConnectionFailedError,
    IrreversibleMigrationError,
    LockAlreadyHeldError,
    LockLostError,
    MigrationFailedError,
    MigrationFileNotFoundError,
    MigrationInvalidExportError,
    MigrationInvalidNameError,
    MigronautError,
    NotAppliedError,
    RunAbortedError,
    TransactionsUnsupportedError,
)
from migronaut_core.kit import Migronaut
from migronaut_core.runner import MigrationContext, RunOptions, RunResult, StatusRow

__version__ = "0.1.0"

__all__ = [
    "Actor",
    "BackgroundConflictError",
    "BackgroundFailedError",
    "BackgroundPendingError",
    "ChecksumMismatchError",
    "Config",
    "ConfigInvalidError",
    "ConnectionFailedError",
    "IrreversibleMigrationError",
    "LockAlreadyHeldError",
    "LockLostError",
    "MigrationContext",
    "MigrationFailedError",
    "MigrationFileNotFoundError",
    "MigrationInvalidExportError",
    "MigrationInvalidNameError",
    "Migronaut",
    "MigronautError",
    "NotAppliedError",
    "RunAbortedError",
    "RunOptions",
    "RunResult",
    "StatusRow",
    "TransactionsUnsupportedError",
    "load_config",
]
