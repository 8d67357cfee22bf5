"""What a pymongo error means to migronaut: the one place server errors are classified.

Every decision the engine takes on a server error — retry the transaction, halve
the batch, back off, fail one document and go on, treat a privilege as missing,
reopen a stream from scratch — asks a predicate here, so each code and label is
interpreted once. The texts such errors become when they leave the engine
(without document values) are :mod:`migronaut_core.scrub`'s job.

Every predicate takes any exception and answers ``False`` for what is not a
pymongo error, so callers need no ``isinstance`` chains.
"""

from __future__ import annotations

from typing import Any, Final

from pymongo.errors import (
    AutoReconnect,
    BulkWriteError,
    ConnectionFailure,
    ExecutionTimeout,
    OperationFailure,
    PyMongoError,
    WriteConcernError,
)

__all__ = [
    "DOCUMENT_ERROR_CODES",
    "commit_result_unknown",
    "document_write_errors",
    "history_lost",
    "is_batch_fault",
    "is_document_error",
    "is_overload",
    "is_retryable_write",
    "is_transient_transaction",
    "is_unauthorized",
    "pipeline_write_errors",
    "replication_unavailable",
    "timed_out",
    "too_slow_or_too_big",
]

#: MaxTimeMSExpired, ExceededTimeLimit: the operation ran out of its time limit.
TIME_LIMIT_CODES: Final = frozenset({50, 262})
#: Time limits plus TransactionTooLarge, TransactionTooOld, TransactionExceededLifetimeLimit
#: and the 16 MB reply/BSON size errors: a smaller batch may succeed.
TIME_OR_SIZE_CODES: Final = TIME_LIMIT_CODES | frozenset({290, 334, 10334, 17419})
#: WriteConflict, NoSuchTransaction, LockTimeout: worth retrying a whole transaction,
#: labelled or not.
TRANSIENT_TRANSACTION_CODES: Final = frozenset({112, 251, 24})
#: DuplicateKey: an insert or an upsert of a key a unique index holds already.
DUPLICATE_KEY: Final = 11000
#: Server errors that fail one document, not the batch: duplicate key, validation,
#: shard key change through mongos, immutable field, index key too large.
DOCUMENT_ERROR_CODES: Final = frozenset({11000, 121, 72, 66, 17280})
#: Unauthorized, and Atlas's AtlasError for a missing privilege.
UNAUTHORIZED_CODES: Final = frozenset({13, 8000})
#: CommandNotFound (mongos), NoReplicationEnabled (standalone), CommandNotSupported.
NO_REPLICATION_CODES: Final = frozenset({59, 76, 115})
#: ChangeStreamHistoryLost, ChangeStreamFatalError, CappedPositionLost: a resume
#: token that points before the oplog's start.
HISTORY_LOST_CODES: Final = frozenset({286, 280, 136})

#: Write-error codes of an update that are the batch's, not a document's: the primary
#: stepped down or is shutting down, the operation was interrupted or timed out, a
#: write conflict or lock timeout, a missing privilege.
BATCH_WRITE_ERROR_CODES: Final = (
    TIME_LIMIT_CODES
    | TRANSIENT_TRANSACTION_CODES
    | UNAUTHORIZED_CODES
    | frozenset({6, 7, 89, 91, 189, 9001, 10107, 11600, 11601, 11602, 13435, 13436})
)

_OVERLOAD_LABELS: Final = ("TransientTransactionError", "RetryableWriteError")
_CAUSE_DEPTH: Final = 8


def _code(error: BaseException) -> object:
    return error.code if isinstance(error, OperationFailure) else None


def timed_out(error: BaseException) -> bool:
    """Whether the server says the operation ran out of its time limit."""
    return isinstance(error, ExecutionTimeout) or _code(error) in TIME_LIMIT_CODES


def too_slow_or_too_big(error: BaseException) -> bool:
    """Whether a transaction failed on time or size, so a smaller batch may succeed."""
    return getattr(error, "code", None) in TIME_OR_SIZE_CODES


def is_transient_transaction(error: BaseException) -> bool:
    """Whether a whole transaction is worth running again (labelled transient, or a
    write conflict, an aborted transaction or a lock timeout)."""
    if isinstance(error, PyMongoError) and error.has_error_label("TransientTransactionError"):
        return True
    return getattr(error, "code", None) in TRANSIENT_TRANSACTION_CODES


def commit_result_unknown(error: BaseException) -> bool:
    """Whether a commit's outcome is unknown, so committing again is safe and needed."""
    return isinstance(error, PyMongoError) and error.has_error_label(
        "UnknownTransactionCommitResult"
    )


def is_retryable_write(error: BaseException) -> bool:
    """Whether a step may simply run again: the connection failed, or the server
    labelled the error a retryable write."""
    if isinstance(error, ConnectionFailure):
        return True
    return isinstance(error, PyMongoError) and error.has_error_label("RetryableWriteError")


def is_batch_fault(error: BaseException) -> bool:
    """Whether an error a transform raised is its batch's, not its document's: a
    transaction worth running again, or a dropped connection or stepped-down primary
    (the slice is cut off and run again). The document itself may be fine."""
    return is_transient_transaction(error) or is_retryable_write(error)


def is_document_error(code: object) -> bool:
    """Whether a write error's code fails one document rather than the batch."""
    return code in DOCUMENT_ERROR_CODES


def document_write_errors(error: BulkWriteError) -> dict[int, dict[str, Any]] | None:
    """The write errors of an unordered bulk write by op index, when each fails one
    document only; None when the bulk failed as a whole (a write concern error, or
    any write error that is not a document's)."""
    details = error.details or {}
    if details.get("writeConcernErrors"):
        return None
    failed: dict[int, dict[str, Any]] = {}
    for write_error in details.get("writeErrors", ()):
        if not is_document_error(write_error.get("code")):
            return None
        failed[write_error["index"]] = write_error
    return failed


def duplicate_key_indexes(error: BulkWriteError) -> list[int] | None:
    """The op indexes of an unordered bulk insert that failed as duplicate keys only;
    None when it failed otherwise too (another write error, a write concern error)."""
    details = error.details or {}
    errors = details.get("writeErrors") or []
    if details.get("writeConcernErrors") or not errors:
        return None
    if any(write_error.get("code") != DUPLICATE_KEY for write_error in errors):
        return None
    return [int(write_error["index"]) for write_error in errors]


def pipeline_write_errors(error: BulkWriteError) -> dict[int, dict[str, Any]] | None:
    """The write errors of a bulk of update-pipeline writes by op index, when each
    fails its document; None when the bulk failed as a whole.

    An update pipeline fails a document on more than :data:`DOCUMENT_ERROR_CODES`:
    an expression over the document's values (``$toInt`` of text, ``$add`` of a
    string, …) fails with a code of its own. So every write error counts as the
    document's unless its code is one of :data:`BATCH_WRITE_ERROR_CODES`; a write
    concern error is the batch's too.
    """
    details = error.details or {}
    if details.get("writeConcernErrors"):
        return None
    failed: dict[int, dict[str, Any]] = {}
    for write_error in details.get("writeErrors", ()):
        if write_error.get("code") in BATCH_WRITE_ERROR_CODES:
            return None
        failed[write_error["index"]] = write_error
    return failed


def is_unauthorized(error: BaseException) -> bool:
    """Whether the server refused for a missing privilege."""
    return _code(error) in UNAUTHORIZED_CODES


def replication_unavailable(error: BaseException) -> bool:
    """Whether the deployment has no replica set status to read (standalone or mongos)."""
    return _code(error) in NO_REPLICATION_CODES or (
        isinstance(error, OperationFailure) and "--replSet" in str(error)
    )


def history_lost(error: BaseException) -> bool:
    """Whether a change stream's resume token points before the oplog's start."""
    return _code(error) in HISTORY_LOST_CODES


def is_overload(error: BaseException) -> bool:
    """Whether ``error`` says the deployment lacks capacity, not that the data is wrong.

    True for write concern errors (also inside a ``BulkWriteError``), errors
    labelled ``TransientTransactionError`` or ``RetryableWriteError``, time
    limits (also on a bulk's write errors), lost or timed-out connections and
    any other pymongo timeout. Follows ``__cause__`` chains, so a wrapped
    pymongo error counts too.
    """
    current: BaseException | None = error
    for _ in range(_CAUSE_DEPTH):
        if current is None:
            return False
        if isinstance(current, PyMongoError) and _overloaded(current):
            return True
        current = current.__cause__
    return False


def _overloaded(error: PyMongoError) -> bool:
    if isinstance(error, WriteConcernError | AutoReconnect) or error.timeout:
        return True
    if any(error.has_error_label(label) for label in _OVERLOAD_LABELS):
        return True
    if isinstance(error, BulkWriteError):
        details = error.details or {}
        if details.get("writeConcernErrors"):
            return True
        codes = {entry.get("code") for entry in details.get("writeErrors", ())}
        return bool(codes & TIME_LIMIT_CODES)
    return _code(error) in TIME_LIMIT_CODES
