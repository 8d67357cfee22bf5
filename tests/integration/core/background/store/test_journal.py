"""The undo journal's store: one entry per document, replaced on a rewrite, in or out of
a transaction; every key one ``JournalDocument`` declares."""

from __future__ import annotations

from typing import Any

from pymongo import MongoClient
from pymongo.database import Database

from migronaut_core.background.store import BackgroundStore, JournalDocument
from migronaut_core.config import BackgroundCollections

NAMES = BackgroundCollections.from_prefix("migronaut_background")


def store_of(db: Database[dict[str, Any]]) -> BackgroundStore:
    store = BackgroundStore(db, NAMES)
    store.ensure_indexes()
    return store


def test_a_rewritten_document_replaces_its_entry_and_others_are_inserted(
    db: Database[dict[str, Any]],
) -> None:
    store = store_of(db)
    first = [({"_id": i, "name": f"n{i}", "rev": 0}, 0) for i in range(5)]
    store.journal.record("m", 1, first, retention_s=3_600)
    again = [({"_id": 2, "name": "changed", "rev": 1}, 1), ({"_id": 9, "rev": 4}, 4)]
    store.journal.record("m", 2, again, retention_s=3_600)
    store.journal.record("other", 1, [({"_id": 2, "rev": 7}, 7)], retention_s=3_600)

    entries = store.journal.entries("m", [0, 2, 9, 42])
    assert sorted(entry["_id"]["d"] for entry in entries.values()) == [0, 2, 9]
    [two] = [entry for entry in entries.values() if entry["_id"]["d"] == 2]
    assert (two["before"], two["revision"], two["written"], two["generation"]) == (
        {"_id": 2, "name": "changed", "rev": 1},
        1,
        2,
        2,
    )
    assert store.journal.count("m") == 6 and store.journal.count("other") == 1
    assert store.journal.has_entries("m") and not store.journal.has_entries("none")
    declared = set(JournalDocument.__annotations__)
    for stored in db[NAMES.undo].find():
        assert set(stored) <= declared, set(stored) - declared


def test_in_a_transaction_entries_commit_or_abort_with_it(
    db: Database[dict[str, Any]], mongo_client: MongoClient[dict[str, Any]]
) -> None:
    store = store_of(db)
    store.journal.record("m", 1, [({"_id": 1, "rev": 0}, 0)], retention_s=3_600)
    with mongo_client.start_session() as session:
        session.start_transaction()
        images = [({"_id": 1, "rev": 1}, 1), ({"_id": 2, "rev": 0}, 0)]
        store.journal.record("m", 1, images, retention_s=3_600, session=session)
        session.abort_transaction()
    assert store.journal.count("m") == 1
    with mongo_client.start_session() as session, session.start_transaction():
        images = [({"_id": 1, "rev": 1}, 1), ({"_id": 2, "rev": 0}, 0)]
        store.journal.record("m", 1, images, retention_s=3_600, session=session)
    written = {key: entry["written"] for key, entry in store.journal.entries("m", [1, 2]).items()}
    assert sorted(written.values()) == [1, 2]
