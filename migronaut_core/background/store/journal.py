"""The undo journal: the before-image of every document a journaling migration rewrote.

A migration with ``undo = "journal"`` writes, for each document of a batch, its
before-image here before the batch's guarded write (in the batch's transaction
when it has one; otherwise acknowledged by the write concern first), keyed by
the migration's name and the document's ``_id``
(:class:`~.documents.JournalKey`), so a later rewrite of one document replaces
its entry. ``background undo`` reads the entries of one batch of documents
back (:meth:`UndoJournal.entries`). A TTL index drops entries past their
``expires_at`` (the spec's ``undo_retention``); an undo of an expired entry
finds nothing and leaves the document as it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, cast

from pymongo import ASCENDING, ReplaceOne
from pymongo.client_session import ClientSession
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import BulkWriteError
from pymongo.write_concern import WriteConcern

from migronaut_core.background.store.documents import JournalDocument, JournalKey
from migronaut_core.bson_values import canonical_id_key
from migronaut_core.clock import utc_now
from migronaut_core.required_indexes import RequiredIndex
from migronaut_core.server_errors import duplicate_key_indexes

__all__ = ["JOURNAL_WRITE_CONCERN", "BeforeImage", "UndoJournal"]

Document = dict[str, Any]

#: The write concern of a journal write outside a transaction when the spec sets none:
#: a before-image must survive a failover that keeps the rewrite it stands for.
JOURNAL_WRITE_CONCERN: Mapping[str, Any] = {"w": "majority"}

#: ``(document as read, its revision then)``: what one entry records.
BeforeImage = tuple[Mapping[str, Any], int]


def journal_key(migration: str, doc_id: Any) -> JournalKey:
    """The ``_id`` of ``migration``'s entry for the document whose ``_id`` is ``doc_id``."""
    return {"m": migration, "d": doc_id}


class UndoJournal:
    """The journal collection (``<background_collection>_undo``) of one database."""

    def __init__(self, db: Database[Document], name: str) -> None:
        self.collection: Collection[Document] = db[name]

    def required_indexes(self) -> list[RequiredIndex]:
        """A migration's entries are counted by name; the TTL index expires old ones."""
        name = self.collection.name
        return [
            RequiredIndex(name, (("migration", ASCENDING),), name="migration"),
            RequiredIndex(
                name, (("expires_at", ASCENDING),), name="expires", expire_after_seconds=0
            ),
        ]

    def record(
        self,
        migration: str,
        generation: int,
        images: Sequence[BeforeImage],
        *,
        retention_s: int,
        write_concern: Mapping[str, Any] | None = None,
        session: ClientSession | None = None,
    ) -> None:
        """Keep the before-images of a batch, each replacing the document's earlier entry.

        Returns once the server acknowledged them: in ``session``'s transaction
        (they commit with it), else with ``write_concern``
        (:data:`JOURNAL_WRITE_CONCERN` when ``None``). Idempotent. Outside a
        transaction the entries are inserted, and only those whose document has
        an entry already are replaced (measured by ``bench.undo_journal``: one
        batched insert costs far less than as many upserts).
        """
        if not images:
            return
        entries = _entries(migration, generation, images, retention_s)
        if session is not None:
            # A duplicate key would abort the transaction: replace each entry.
            self.collection.bulk_write(_replacements(entries), ordered=False, session=session)
            return
        concern = WriteConcern(**(write_concern or JOURNAL_WRITE_CONCERN))
        target = self.collection.with_options(write_concern=concern)
        try:
            target.insert_many(entries, ordered=False)
        except BulkWriteError as exc:
            kept = duplicate_key_indexes(exc)
            if kept is None:
                raise
            target.bulk_write(_replacements([entries[index] for index in kept]), ordered=False)

    def entries(self, migration: str, ids: Sequence[Any]) -> dict[str, JournalDocument]:
        """``migration``'s entries for these document ``_id``s, by canonical ``_id`` key."""
        if not ids:
            return {}
        keys = [journal_key(migration, doc_id) for doc_id in ids]
        found = self.collection.find({"_id": {"$in": keys}})
        return {
            canonical_id_key(entry["_id"]["d"]): cast(JournalDocument, entry) for entry in found
        }

    def count(self, migration: str) -> int:
        """How many entries ``migration`` has (expired ones the TTL monitor has not yet
        removed included)."""
        return self.collection.count_documents({"migration": migration})

    def has_entries(self, migration: str) -> bool:
        """Whether ``migration`` has any entry."""
        return self.collection.find_one({"migration": migration}, {"_id": 1}) is not None


def _entries(
    migration: str, generation: int, images: Sequence[BeforeImage], retention_s: int
) -> list[Document]:
    now = utc_now()
    expires = now + timedelta(seconds=retention_s)
    entries = []
    for doc, revision in images:
        entry: JournalDocument = {
            "_id": journal_key(migration, doc["_id"]),
            "migration": migration,
            "generation": generation,
            "before": dict(doc),
            "revision": revision,
            "written": revision + 1,
            "at": now,
            "expires_at": expires,
        }
        entries.append(cast(Document, entry))
    return entries


def _replacements(entries: Sequence[Document]) -> list[ReplaceOne[Document]]:
    return [ReplaceOne({"_id": entry["_id"]}, entry, upsert=True) for entry in entries]
