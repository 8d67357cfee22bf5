"""``undo = "journal"``: before-images journaled on the write path, and the undo that
restores every document still the migration's write and leaves the others."""

from __future__ import annotations

import logging
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core import (
    BackgroundConflictError,
    BackgroundFailedError,
    Migronaut,
    NotAppliedError,
    UndoUnavailableError,
)
from tests.support.background import SPLIT_NAME, seed_users, write_background

JOURNAL = "migronaut_background_undo"

#: The name-splitting migration without a revert, journaled; ``{extra}``: more spec keys.
JOURNALED = """
background = {{
    "collection": "users",
    "from": 1,
    "to": 2,
    "batch_size": 40,
    "max_parallel": 2,
    "revision_field": "rev",
    "undo": "journal",
    "undo_retention": "2d",
    {extra}
}}


def migrate(doc, ctx):
    first, _, last = doc.pop("name").partition(" ")
    return {{**doc, "first": first, "last": last, "tags": ["split"]}}
"""


def write_journaled(migrations: Path, extra: str = "") -> None:
    migrations.mkdir(parents=True, exist_ok=True)
    source = textwrap.dedent(JOURNALED.format(extra=extra))
    (migrations / f"{SPLIT_NAME}.py").write_text(source)


def migrated(kit: Migronaut, db: Database[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """Seed ``count`` users, run the journaled migration to its end; the seeded documents."""
    seed_users(db, count)
    seeded = list(db.users.find().sort("_id", 1))
    kit.runs.up()
    kit.background.run(SPLIT_NAME, concurrency=2)
    assert db.users.count_documents({"_v": 2}) == count
    return seeded


def test_a_journaled_pass_keeps_each_before_image_with_the_revision_it_wrote(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    write_journaled(migrations)
    seeded = migrated(kit, db, 200)

    entries = {entry["_id"]["d"]: entry for entry in db[JOURNAL].find()}
    assert len(entries) == 200
    for doc in seeded:
        entry = entries[doc["_id"]]
        assert entry["before"] == doc
        assert entry["migration"] == SPLIT_NAME
        assert (entry["revision"], entry["written"]) == (0, 1)
        retention = (entry["expires_at"] - entry["at"]).total_seconds()
        assert retention == pytest.approx(2 * 86_400, abs=1)
    ttl = [index for index in db[JOURNAL].list_indexes() if "expireAfterSeconds" in index]
    assert [dict(index["key"]) for index in ttl] == [{"expires_at": 1}]


def test_the_undo_restores_the_migrations_writes_and_lists_what_changed_since(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    write_journaled(migrations)
    seeded = migrated(kit, db, 300)
    # The application changes three documents (an OCC writer bumps the revision) and
    # inserts one in the new shape: the undo must leave all four as they are.
    changed_ids = [5, 150, 299]
    for doc_id in changed_ids:
        db.users.update_one({"_id": doc_id}, {"$set": {"first": "Edited"}, "$inc": {"rev": 1}})
    db.users.insert_one({"_id": 1000, "first": "New", "last": "User", "_v": 2, "rev": 1})
    left_alone = {doc["_id"]: doc for doc in db.users.find({"_id": {"$in": [*changed_ids, 1000]}})}

    result = kit.background.control(SPLIT_NAME, "undo", requested_by="ana", reason="bad deploy")
    assert (result.applied, result.status, result.may_run) == ("changed", "pending", True)
    again = kit.background.control(SPLIT_NAME, "undo")
    assert (again.applied, again.status) == ("unchanged", "pending")
    kit.background.run(SPLIT_NAME, concurrency=2)

    for doc in seeded:
        now = db.users.find_one({"_id": doc["_id"]})
        assert now is not None
        if doc["_id"] in changed_ids:
            assert now == left_alone[doc["_id"]]
            continue
        # Every field as before, the version back at 1, the revision moved on twice.
        assert now == {**doc, "rev": 2}, doc["_id"]
    assert db.users.find_one({"_id": 1000}) == left_alone[1000]

    view = kit.background.status(SPLIT_NAME)
    assert view is not None
    assert (view.status, view.direction, view.undo) == ("completed", "revert", "journal")
    assert view.totals["migrated"] == 297
    assert view.failed_documents == 4
    samples = {sample["id"]: sample for sample in view.failed_document_samples}
    assert set(samples) == {*changed_ids, 1000}
    assert {sample["reason"] for sample in samples.values()} == {"changed"}
    assert all("Edited" not in str(sample) for sample in samples.values())
    assert view.to_dict()["undo"] == "journal"
    history = kit.background.history(SPLIT_NAME)
    assert history[-1].to_dict()["action"] in {"complete", "undo"}
    assert any(entry.to_dict().get("requested_by") == "ana" for entry in history)

    # ``down`` keeps the undo as the way back and only drops the changelog record.
    kit.runs.down()
    assert kit.runs.status()[0].status == "pending"
    assert db.users.count_documents({"_v": 1}) == 297


def test_an_undo_is_refused_without_a_journal_or_while_the_migration_runs(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    with pytest.raises(NotAppliedError):
        kit.background.control(SPLIT_NAME, "undo")
    seed_users(db, 50)
    write_journaled(migrations)
    kit.runs.up()
    with pytest.raises(UndoUnavailableError) as running:
        kit.background.control(SPLIT_NAME, "undo")
    assert running.value.context == {
        "migration": SPLIT_NAME,
        "reason": "status",
        "status": "pending",
    }
    assert isinstance(running.value, BackgroundConflictError)
    state = db.migronaut_background.find_one({"_id": SPLIT_NAME})
    assert state is not None and "undo" not in state and state["direction"] == "forward"


def test_an_undo_is_refused_for_a_migration_that_keeps_no_journal(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 50)
    write_background(migrations, batch_size=25)
    kit.runs.up()
    kit.background.run(SPLIT_NAME)
    with pytest.raises(UndoUnavailableError) as refused:
        kit.background.control(SPLIT_NAME, "undo")
    assert refused.value.context["reason"] == "no-journal"
    assert refused.value.code == "UNDO_UNAVAILABLE"
    assert db[JOURNAL].count_documents({}) == 0


def test_a_transactional_pass_journals_in_its_transaction_and_undoes_exactly(
    kit: Migronaut,
    db: Database[dict[str, Any]],
    migrations: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    write_journaled(migrations, extra='"transaction": {"timeout_ms": 30000},')
    seeded = migrated(kit, db, 120)
    assert db[JOURNAL].count_documents({"migration": SPLIT_NAME}) == 120
    db.users.update_one({"_id": 7}, {"$set": {"last": "Changed"}, "$inc": {"rev": 1}})

    kit.background.control(SPLIT_NAME, "undo")
    with caplog.at_level(logging.WARNING, "migronaut_core.background"):
        kit.background.run(SPLIT_NAME)

    assert "left 1 document(s) changed since the migration wrote them" in caplog.text
    assert "Changed" not in caplog.text
    restored = {doc["_id"]: doc for doc in db.users.find()}
    assert all(restored[doc["_id"]] == {**doc, "rev": 2} for doc in seeded if doc["_id"] != 7)
    assert restored[7]["last"] == "Changed" and restored[7]["_v"] == 2
    view = kit.background.status(SPLIT_NAME)
    assert view is not None and view.status == "completed"
    assert [sample["id"] for sample in view.failed_document_samples] == [7]


def test_no_document_is_rewritten_before_its_before_image_is_kept(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    write_journaled(migrations, extra='"max_slice_failures": 1,')
    seed_users(db, 80)
    # A journal that refuses every entry: each batch must fail before its guarded write.
    db.create_collection(JOURNAL, validator={"$jsonSchema": {"required": ["refused"]}})
    kit.runs.up()

    with pytest.raises(BackgroundFailedError):
        kit.background.run(SPLIT_NAME)

    assert db.users.count_documents({"_v": 2}) == 0
    assert db.users.count_documents({"_v": 1, "name": {"$exists": True}}) == 80
