"""``retry`` with ``failed_only``: one pass over exactly the documents that failed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core import (
    BackgroundConflictError,
    BackgroundFailedError,
    ConfigInvalidError,
    ControlResult,
    Migronaut,
    NotAppliedError,
)
from tests.support import kit_json
from tests.support.background import (
    FLAKY_NAME,
    SPLIT_NAME,
    fix_flaky,
    seed_users,
    write_background,
    write_flaky,
)

#: The documents the broken transform refuses (every n ending in 3, of 200).
FAILING = [n for n in range(200) if n % 10 == 3]


def failed_ids(kit: Migronaut) -> list[Any]:
    return [row.id for row in kit.background.failed(FLAKY_NAME, limit=1_000).documents]


def completed_with_failures(kit: Migronaut, db: Database[dict[str, Any]], path: Path) -> None:
    seed_users(db, 200)
    kit.runs.up()
    assert kit_json.run(kit, FLAKY_NAME, concurrency=2)["status"] == "completed"
    assert failed_ids(kit) == FAILING


def test_a_failed_only_retry_rewrites_exactly_the_failed_documents(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    path = write_flaky(migrations)
    completed_with_failures(kit, db, path)
    others = {doc["_id"]: doc for doc in db.users.find({"_id": {"$nin": FAILING}})}
    assert all(doc["_v"] == 2 for doc in others.values())
    before = kit_json.status(kit, FLAKY_NAME)
    # The application rewrote one failed document itself meanwhile: nothing is left to do.
    db.users.update_one(
        {"_id": 33}, {"$set": {"_v": 2, "first": "App", "last": "Wrote"}, "$unset": {"name": ""}}
    )
    fix_flaky(path)

    result = kit.background.control(
        FLAKY_NAME, "retry", failed_only=True, repin=True, requested_by="ana", reason="fixed"
    )

    assert result == ControlResult("changed", "pending", replan=False, failed=20, may_run=True)
    retrying = kit.background.failed(FLAKY_NAME, limit=1_000)
    assert (retrying.total, retrying.retrying) == (20, True)
    assert all(row.retrying for row in retrying.documents)
    assert kit_json.status(kit, FLAKY_NAME)["failed_documents"] == 20
    view = kit_json.run(kit, FLAKY_NAME, concurrency=2)
    assert view["status"] == "completed"
    # 13 fails again; 33 was the application's; 23 was written by the application while
    # its transform ran: the guarded write missed, and it was re-read and migrated anew.
    assert view["totals"]["migrated"] == before["totals"]["migrated"] + 18
    assert failed_ids(kit) == [13]
    assert [sample["id"] for sample in view["failed_document_samples"]] == [13]
    again = kit.background.failed(FLAKY_NAME).documents[0]
    assert (again.reason, again.error, again.code) == ("transform", "KeyError", None)
    assert again.generation == view["generation"]
    assert db.users.find_one({"_id": 23}, {"_id": 0, "first": 1, "_v": 1}) == {
        "first": "Changed",
        "_v": 2,
    }
    assert db.users.find_one({"_id": 33}, {"_id": 0, "first": 1}) == {"first": "App"}
    assert db.users.count_documents({"_v": 1}) == 1
    # No other document was written: each is exactly as the first pass left it.
    assert {doc["_id"]: doc for doc in db.users.find({"_id": {"$nin": FAILING}})} == others
    entry = next(e for e in kit_json.history(kit, FLAKY_NAME) if e["action"] == "reopen")
    assert (entry["failed_only"], entry["failed"], entry["by"], entry["reason"]) == (
        True,
        20,
        "ana",
        "fixed",
    )
    assert view["pass"] == before["pass"]  # not a sweep of the collection


def test_a_failed_only_retry_of_a_migration_that_failed_mid_pass_finishes_it(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    path = write_flaky(migrations, max_document_errors=3)
    seed_users(db, 200)
    kit.runs.up()
    with pytest.raises(BackgroundFailedError):
        kit.background.run(FLAKY_NAME)
    failed = kit.background.failed(FLAKY_NAME)
    assert failed.status == "failed"
    assert 3 < failed.total < len(FAILING)  # the budget stopped the pass
    left_behind = db.users.count_documents({"_v": 1})
    assert left_behind > failed.total
    fix_flaky(path)

    kit.background.control(FLAKY_NAME, "retry", failed_only=True, repin=True)
    view = kit_json.run(kit, FLAKY_NAME)

    # The failed documents first; then ordinary passes take what the failure left.
    assert view["status"] == "completed"
    assert failed_ids(kit) == [13]
    assert db.users.count_documents({"_v": 1}) == 1
    assert view["totals"]["migrated"] == 199


def test_a_failed_only_retry_keeps_what_fails_again_and_counts_the_error_budget(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    path = write_flaky(migrations)
    completed_with_failures(kit, db, path)
    # Not fixed: every failed document fails again, the same way.
    assert kit.background.control(FLAKY_NAME, "retry", failed_only=True).failed == 20
    view = kit_json.run(kit, FLAKY_NAME)
    assert view["status"] == "completed"
    assert view["failed_documents"] == 20
    rows = kit.background.failed(FLAKY_NAME, limit=1_000).documents
    assert [row.id for row in rows] == FAILING
    assert {(row.reason, row.error, row.generation) for row in rows} == {
        ("transform", "ValueError", view["generation"])
    }
    assert db.users.count_documents({"_v": 1}) == 20


def test_a_failed_only_retry_that_does_not_fit_is_refused_before_anything_is_written(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 50)
    write_background(migrations, batch_size=10)
    kit.runs.up()
    states = kit._runtime.store.states

    def refusal(**options: Any) -> dict[str, Any]:
        before = states.get(SPLIT_NAME)
        with pytest.raises(BackgroundConflictError) as error:
            kit.background.control(SPLIT_NAME, "retry", failed_only=True, **options)
        assert states.get(SPLIT_NAME) == before
        assert error.value.code == "BACKGROUND_CONFLICT"
        return dict(error.value.context)

    assert refusal()["reason"] == "status"  # pending: its lanes may be about to write
    kit.background.control(SPLIT_NAME, "pause")
    assert refusal()["status"] == "paused"
    kit.background.control(SPLIT_NAME, "resume")
    assert kit_json.run(kit, SPLIT_NAME)["status"] == "completed"
    write_background(migrations, batch_size=20)  # a repin refused with it leaves the pin
    assert refusal(repin=True) == {
        "migration": SPLIT_NAME,
        "action": "retry",
        "failed_only": True,
        "status": "completed",
        "reason": "no-failed-documents",
    }
    with pytest.raises(ConfigInvalidError) as error:
        kit.background.control(SPLIT_NAME, "retry_from_start", failed_only=True)
    assert error.value.context["key"] == "failed_only"


def test_the_failed_list_and_its_errors_carry_no_document_values(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    path = write_flaky(migrations)
    completed_with_failures(kit, db, path)
    page = kit.background.failed(FLAKY_NAME, limit=5, offset=5)
    assert (page.total, page.offset, page.limit, page.retrying) == (20, 5, 5, False)
    assert [row.id for row in page.documents] == FAILING[5:10]
    text = json.dumps(page.to_dict())
    assert "First" not in text and "Last" not in text and "cannot split" not in text
    first = page.to_dict()["documents"][0]
    assert isinstance(first.pop("at"), str)
    assert first == {
        "id": 53,
        "reason": "transform",
        "code": None,
        "error": "ValueError",
        "generation": 1,
        "retrying": False,
    }
    with pytest.raises(ConfigInvalidError):
        kit.background.failed(FLAKY_NAME, limit=0)
    with pytest.raises(NotAppliedError):
        kit.background.failed("20990101000000_unknown")


def test_a_failed_only_retry_is_leased_and_resumes_from_its_checkpoints(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    path = write_flaky(migrations, max_document_errors=1_000)
    seed_users(db, 2_000)
    kit.runs.up()
    assert kit_json.run(kit, FLAKY_NAME, concurrency=2)["status"] == "completed"
    assert kit.background.failed(FLAKY_NAME).total == 200
    fix_flaky(path, per_document_seconds=0.01)  # a batch of 20 outlasts a 100 ms slice
    kit.background.control(FLAKY_NAME, "retry", failed_only=True, repin=True)

    answer = kit.background.coordinate(FLAKY_NAME)
    assert answer.next == "process"
    state = kit._runtime.store.states.get(FLAKY_NAME)
    assert state is not None and state["bad_ids"] == []
    assert len((state.get("replay") or {}).get("ids") or []) == 200
    assert kit.background.run_slice(FLAKY_NAME, slice_ms=100).outcome == "yielded"
    kit.background.control(FLAKY_NAME, "pause", wait=True)
    part_way = db.users.count_documents({"_v": 1})
    assert 1 < part_way < 200  # one batch of 20 at least, not all of them
    assert kit.background.control(FLAKY_NAME, "resume").status == "running"
    view = kit_json.run(kit, FLAKY_NAME, concurrency=2)

    assert view["status"] == "completed"
    assert view["totals"]["migrated"] == 1_999
    assert failed_ids(kit) == [13]
    assert kit._runtime.store.states.get(FLAKY_NAME, projection={"replay": 1}) == {
        "_id": FLAKY_NAME
    }


def test_a_failed_only_retry_of_an_update_pipeline_migration_after_a_duplicate_key(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 100)
    db.users.create_index("first", unique=True, partialFilterExpression={"_v": 2})
    db.users.insert_one({"_id": "taken", "first": "First5", "last": "X", "_v": 2})
    write_background(migrations, update=True, batch_size=10, extra='"max_document_errors": 5,')
    kit.runs.up()
    assert kit_json.run(kit, SPLIT_NAME)["status"] == "completed"
    rows = kit.background.failed(SPLIT_NAME).documents
    assert [(row.id, row.reason, row.code) for row in rows] == [(5, "update", 11000)]
    assert rows[0].error == "duplicate key on index first_1 (code 11000)"
    db.users.delete_one({"_id": "taken"})  # the data is fixed

    assert kit.background.control(SPLIT_NAME, "retry", failed_only=True).failed == 1
    view = kit_json.run(kit, SPLIT_NAME)

    assert view["status"] == "completed"
    assert view["totals"]["migrated"] == 100
    assert kit.background.failed(SPLIT_NAME).total == 0
    assert db.users.find_one({"_id": 5}, {"_id": 0, "first": 1, "_v": 1}) == {
        "first": "First5",
        "_v": 2,
    }
