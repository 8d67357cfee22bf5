"""The one error hierarchy of migronaut.

Every failure the engine reports is a :class:`MigronautError` carrying a stable
``code`` (for scripts and alerting), a human ``message`` and a ``context`` dict of
identifiers (names, counts, collection names — never document values). Errors are
grouped by how a caller should react; ``retryable`` says whether running the same
call again may succeed without anyone changing anything::

    MigronautError
    ├── ConfigInvalidError (ValueError)       bad config, spec, option or argument
    ├── MigrationFileError
    │   ├── MigrationFileNotFoundError
    │   ├── MigrationInvalidNameError
    │   └── MigrationInvalidExportError     a module that does not load or exports wrong
    ├── ChecksumMismatchError                 an applied file changed since
    ├── NotAppliedError
    ├── IrreversibleMigrationError
    ├── BaselineConflictError                 a baseline would contradict what was run
    ├── MigrationFailedError                  a migration's own code raised
    ├── RunAbortedError                       the run was cancelled between migrations
    ├── LockError
    │   ├── LockAlreadyHeldError              retryable
    │   └── LockLostError                     retryable: a lease or lock taken over
    ├── StoreError                            MongoDB itself failed us
    │   ├── ConnectionFailedError             retryable
    │   ├── ShardMetadataError                retryable: chunks read mid-change
    │   ├── TransactionsUnsupportedError
    │   ├── IndexMissingError                 ensure_indexes = false, and an index is missing
    │   └── PrivilegeMissingError             the user may not run an action migronaut needs
    └── BackgroundError
        ├── BackgroundPendingError            a requirement has not completed yet
        ├── BackgroundConflictError           a control that does not fit the state
        │   └── UndoUnavailableError          no undo journal, or the migration still runs
        ├── BackgroundFailedError
        │   └── DocumentFailedError           one document failed a strict batch
        ├── DryRunRefusedError                a dry run's ctx.db refused a write
        └── BatchFailed                       retryable: one slice failed

A :class:`DocError` is the record of one document that could not be rewritten
(its ``_id``, a value-free text, a reason); :class:`DocumentFailedError` carries
one. Lower-layer errors are chained (``raise ... from exc``) so tracebacks keep them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar


class MigronautError(Exception):
    """Base of every error migronaut raises on purpose.

    :param message: what went wrong, for a person; never contains document values.
    :param context: identifiers that help locate the problem (JSON-safe).
    """

    code: ClassVar[str] = "MIGRONAUT_ERROR"
    retryable: ClassVar[bool] = False
    #: The CLI's exit status for this class of failure.
    exit_code: ClassVar[int] = 1

    def __init__(self, message: str, context: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.context: dict[str, Any] = dict(context or {})

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        # Keep errors picklable across process boundaries (Airflow, multiprocessing).
        return (self.__class__, (self.message, self.context))

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON shape used by ``--json`` output and events."""
        return {"code": self.code, "message": self.message, "context": self.context}


class ConfigInvalidError(MigronautError, ValueError):
    """A configuration key, migration spec, option or argument is wrong.

    Raised before anything is written; ``context["key"]`` names the culprit when
    there is one.
    """

    code = "CONFIG_INVALID"
    exit_code = 2


class MigrationFileError(MigronautError):
    """A migration file cannot be used as it is."""

    code = "MIGRATION_FILE_INVALID"
    exit_code = 3


class MigrationFileNotFoundError(MigrationFileError):
    code = "MIGRATION_FILE_NOT_FOUND"


class MigrationInvalidNameError(MigrationFileError):
    code = "MIGRATION_INVALID_NAME"


class MigrationInvalidExportError(MigrationFileError):
    code = "MIGRATION_INVALID_EXPORT"


class ChecksumMismatchError(MigronautError):
    """An applied migration's file no longer matches what was applied."""

    code = "CHECKSUM_MISMATCH"
    exit_code = 4


class NotAppliedError(MigronautError):
    code = "NOT_APPLIED"
    exit_code = 5


class IrreversibleMigrationError(MigronautError):
    code = "IRREVERSIBLE_MIGRATION"
    exit_code = 13


class BaselineConflictError(MigronautError):
    """A baseline cannot adopt: a migration past its target is applied, or one it
    would adopt was run by migronaut (a background state exists)."""

    code = "BASELINE_CONFLICT"
    exit_code = 18


class MigrationFailedError(MigronautError):
    """A migration's own ``up``/``down`` raised; the cause is chained."""

    code = "MIGRATION_FAILED"
    exit_code = 6


class RunAbortedError(MigronautError):
    code = "RUN_ABORTED"
    exit_code = 7


class LockError(MigronautError):
    code = "LOCK_ERROR"
    retryable = True
    exit_code = 8


class LockAlreadyHeldError(LockError):
    """Another run holds the lock; ``context["holder"]`` says who, when known."""

    code = "LOCK_ALREADY_HELD"


class LockLostError(LockError):
    """The lock or lease expired or was taken over while we held it."""

    code = "LOCK_LOST"
    exit_code = 17


class StoreError(MigronautError):
    """MongoDB refused or failed an operation migronaut needed."""

    code = "STORE_ERROR"
    exit_code = 9


class ConnectionFailedError(StoreError):
    code = "CONNECTION_FAILED"
    retryable = True


class ShardMetadataError(StoreError):
    """A sharded collection's chunk metadata did not hold together (read while it changed)."""

    code = "SHARD_METADATA"
    retryable = True


class TransactionsUnsupportedError(StoreError):
    code = "TRANSACTIONS_UNSUPPORTED"


class IndexMissingError(StoreError):
    """``ensure_indexes = false`` and an index migronaut needs is not there.

    Raised before anything is written. ``context["missing"]`` lists each one as
    ``{"collection", "key"}`` (the key pattern as ``[[field, direction], ...]``);
    someone with index-creation rights creates them (``ensure_indexes = true``
    once, or by hand).
    """

    code = "INDEX_MISSING"


class PrivilegeMissingError(StoreError):
    """The server refused an action migronaut needs for a missing privilege.

    ``context``: ``{"action", "namespace"}`` (the command, such as ``collMod``, and
    the ``db.collection`` it ran on), plus ``migration`` when one asked for it.
    Raised before the migration's state records anything of the refused action;
    grant the action and step again.
    """

    code = "PRIVILEGE_MISSING"


class BackgroundError(MigronautError):
    code = "BACKGROUND_ERROR"
    exit_code = 11


class BackgroundPendingError(BackgroundError):
    """A migration requires background migrations that have not completed."""

    code = "BACKGROUND_PENDING"
    exit_code = 14


class BackgroundConflictError(BackgroundError):
    """An action does not fit the background migration's current state."""

    code = "BACKGROUND_CONFLICT"
    exit_code = 15


class UndoUnavailableError(BackgroundConflictError):
    """An undo was asked of a migration that cannot be undone from its journal now.

    ``context["reason"]`` says why: ``unregistered``, ``no-journal`` (its spec
    has no ``undo = "journal"``), ``direction`` (it is a revert or an undo
    already) or ``status`` (it is still pending, running, paused or blocked;
    ``context["status"]``). Nothing was written.
    """

    code = "UNDO_UNAVAILABLE"


class BackgroundFailedError(BackgroundError):
    code = "BACKGROUND_FAILED"


@dataclass(frozen=True, slots=True)
class DocError:
    """A document that could not be rewritten: its ``_id``, a value-free text, and why.

    ``reason`` is ``transform``, ``shape``, ``write``, ``transaction``, ``update``
    (the server refused an update pipeline's result for it) or a partitioner's
    refusal. The ``_id`` is kept on the state so later passes
    exclude the document; logs and events only count these.
    """

    id: Any
    error: str
    reason: str

    def entry(self) -> dict[str, Any]:
        return {"id": self.id, "error": self.error, "reason": self.reason}


class DocumentFailedError(BackgroundFailedError):
    """One document failed a strict (transactional) batch; the batch retries without it."""

    code = "BACKGROUND_DOCUMENT_FAILED"

    def __init__(self, error: DocError) -> None:
        super().__init__(f"a document failed: {error.error}", {"reason": "document"})
        self.error = error

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.__class__, (self.error,))


class DryRunRefusedError(BackgroundError):
    """User code in a dry run tried what would escape it: a write outside its
    aborted transaction, or a write to migronaut's own collections.

    ``context`` names the ``operation`` and its ``target`` (``db.collection``).
    """

    code = "DRY_RUN_REFUSED"


class BatchFailed(BackgroundError):  # noqa: N818 - the name the design uses
    """One slice of a lane failed; running it again may succeed."""

    code = "BATCH_FAILED"
    exit_code = 16
    retryable = True


__all__ = [
    "BackgroundConflictError",
    "BackgroundError",
    "BackgroundFailedError",
    "BackgroundPendingError",
    "BaselineConflictError",
    "BatchFailed",
    "ChecksumMismatchError",
    "ConfigInvalidError",
    "ConnectionFailedError",
    "DocError",
    "DocumentFailedError",
    "DryRunRefusedError",
    "IndexMissingError",
    "IrreversibleMigrationError",
    "LockAlreadyHeldError",
    "LockError",
    "LockLostError",
    "MigrationFailedError",
    "MigrationFileError",
    "MigrationFileNotFoundError",
    "MigrationInvalidExportError",
    "MigrationInvalidNameError",
    "MigronautError",
    "NotAppliedError",
    "PrivilegeMissingError",
    "RunAbortedError",
    "ShardMetadataError",
    "StoreError",
    "TransactionsUnsupportedError",
]
