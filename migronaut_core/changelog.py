"""The changelog: one record per applied migration.

A record's ``_id`` is the migration's name, so the database itself refuses to
apply a migration twice, whatever the lock does. A failed attempt leaves a record
with ``status: "failed"`` (its error code and message, never document values),
which the next successful attempt replaces. A record written by ``migronaut
baseline`` is ``adopted``: applied without being run (the database already had
it), as the record says.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pymongo.client_session import ClientSession
from pymongo.collection import Collection
from pymongo.errors import DuplicateKeyError

from migronaut_core.errors import ConfigInvalidError, MigronautError
from migronaut_core.files import MigrationKind
from migronaut_core.required_indexes import RequiredIndex, ensure_indexes

RecordStatus = Literal["applied", "failed"]


class AlreadyAppliedError(MigronautError):
    """The changelog says the migration was applied by someone else meanwhile."""

    code = "ALREADY_APPLIED"


MAX_REQUESTED_BY_LENGTH = 100
MAX_REASON_LENGTH = 500


@dataclass(frozen=True, slots=True)
class Actor:
    """Who asked for a run and why; recorded with every changelog entry and control.

    :raises ConfigInvalidError: a value is not a string, too long, or has control
        characters (it ends up in logs and in the UI).
    """

    requested_by: str | None = None
    reason: str | None = None

    def __post_init__(self) -> None:
        _check_actor_field("requested_by", self.requested_by, MAX_REQUESTED_BY_LENGTH)
        _check_actor_field("reason", self.reason, MAX_REASON_LENGTH)

    def fields(self) -> dict[str, str]:
        """Return the set fields, as stored."""
        pairs = (("requested_by", self.requested_by), ("reason", self.reason))
        return {key: value for key, value in pairs if value is not None}


def _check_actor_field(key: str, value: str | None, limit: int) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not value.strip():
        raise ConfigInvalidError(f"{key} must be a non-empty string", {"key": key})
    if len(value) > limit:
        raise ConfigInvalidError(f"{key} is longer than {limit} characters", {"key": key})
    if any(ord(char) < 32 and char not in "\t" for char in value):
        raise ConfigInvalidError(f"{key} must not contain control characters", {"key": key})


@dataclass(frozen=True, slots=True)
class ChangelogRecord:
    name: str
    status: RecordStatus
    kind: MigrationKind
    checksum: str
    applied_at: datetime
    duration_ms: int
    run_id: str | None = None
    description: str | None = None
    requested_by: str | None = None
    reason: str | None = None
    error: dict[str, Any] | None = None
    #: Recorded by a baseline: the migration was never run by migronaut.
    adopted: bool = False

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> ChangelogRecord:
        return cls(
            name=doc["_id"],
            status=doc.get("status", "applied"),
            kind=doc.get("kind", "regular"),
            checksum=doc.get("checksum", ""),
            applied_at=doc["applied_at"],
            duration_ms=int(doc.get("duration_ms", 0)),
            run_id=doc.get("run_id"),
            description=doc.get("description"),
            requested_by=doc.get("requested_by"),
            reason=doc.get("reason"),
            error=doc.get("error"),
            adopted=bool(doc.get("adopted", False)),
        )


class Changelog:
    """Reads and writes the changelog collection."""

    def __init__(self, collection: Collection[dict[str, Any]]) -> None:
        self._collection = collection

    def required_indexes(self) -> list[RequiredIndex]:
        """The index ``applied`` and ``status`` read through."""
        return [RequiredIndex(self._collection.name, (("status", 1), ("applied_at", 1)))]

    def ensure_indexes(self, *, create: bool = True) -> None:
        """Create :meth:`required_indexes` (idempotent), or only check that they exist.

        :raises IndexMissingError: ``create`` is false and it is missing.
        """
        ensure_indexes(self._collection.database, self.required_indexes(), create=create)

    def records(self) -> dict[str, ChangelogRecord]:
        """Return every record (applied and failed) by migration name."""
        return {doc["_id"]: ChangelogRecord.from_document(doc) for doc in self._collection.find({})}

    def documents(self) -> list[dict[str, Any]]:
        """Every record as stored, unread: the audit judges the malformed ones."""
        return list(self._collection.find({}).sort("_id", 1))

    def applied(self) -> dict[str, ChangelogRecord]:
        return {
            doc["_id"]: ChangelogRecord.from_document(doc)
            for doc in self._collection.find({"status": "applied"})
        }

    def adopted_names(self, names: Sequence[str]) -> set[str]:
        """Which of ``names`` are applied by adoption (a baseline), not by a run."""
        found = self._collection.find(
            {"_id": {"$in": list(names)}, "status": "applied", "adopted": True}, {"_id": 1}
        )
        return {doc["_id"] for doc in found}

    def record_applied(
        self, record: ChangelogRecord, *, session: ClientSession | None = None
    ) -> None:
        """Write ``record`` as applied, replacing a failed attempt.

        :raises AlreadyAppliedError: another run applied it meanwhile.
        """
        fields = _document(record)
        try:
            self._collection.replace_one(
                {"_id": record.name, "status": {"$ne": "applied"}},
                fields,
                upsert=True,
                session=session,
            )
        except DuplicateKeyError as exc:
            raise AlreadyAppliedError(
                f"migration {record.name} was applied by another run", {"name": record.name}
            ) from exc

    def record_failed(self, record: ChangelogRecord) -> None:
        """Remember a failed attempt; never overwrites an applied record."""
        try:
            self._collection.replace_one(
                {"_id": record.name, "status": {"$ne": "applied"}}, _document(record), upsert=True
            )
        except DuplicateKeyError:
            return

    def set_checksum(self, name: str, checksum: str) -> None:
        """Pin a new checksum for an applied migration (a background ``repin``)."""
        self._collection.update_one(
            {"_id": name, "status": "applied"}, {"$set": {"checksum": checksum}}
        )

    def remove(self, name: str, *, session: ClientSession | None = None) -> bool:
        """Forget an applied migration (after its ``down``); True if it was there."""
        result = self._collection.delete_one({"_id": name, "status": "applied"}, session=session)
        return result.deleted_count == 1


def _document(record: ChangelogRecord) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "_id": record.name,
        "status": record.status,
        "kind": record.kind,
        "checksum": record.checksum,
        "applied_at": record.applied_at,
        "duration_ms": record.duration_ms,
    }
    optional = {
        "run_id": record.run_id,
        "description": record.description,
        "requested_by": record.requested_by,
        "reason": record.reason,
        "error": record.error,
    }
    doc.update({key: value for key, value in optional.items() if value is not None})
    if record.adopted:
        doc["adopted"] = True
    return doc
