"""Dry runs of background migrations: what a pass would do, and nothing written."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core import Migronaut
from migronaut_core.background.dry_run import DryRunReport, sandbox
from migronaut_core.errors import ConfigInvalidError, TransactionsUnsupportedError
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, seed_users, write_background
from tests.support.cli import configure, migronaut

#: A value only the transforms below produce: it must never show in a report or a log.
SECRET = "collide-value-7f3a"

HANDLES = f"""
background = {{"collection": "users", "from": 1, "to": 2, "batch_size": 4}}
calls = []


def migrate(doc, ctx):
    calls.append(doc["n"])
    doc["handle"] = "{SECRET}" if doc["n"] in (3, 7) else f"handle-{{doc['n']}}"
    return doc
"""

SAME_HANDLE = """
background = {"collection": "users", "from": 1, "to": 2}


def migrate(doc, ctx):
    doc["handle"] = "everyone"
    return doc
"""

SOMETIMES_RAISES = f"""
background = {{"collection": "users", "from": 1, "to": 2, "batch_size": 3}}


def migrate(doc, ctx):
    if doc["n"] % 4 == 0:
        raise ValueError("cannot split {SECRET} " + doc["name"])
    doc["first"], _, doc["last"] = doc.pop("name").partition(" ")
    return doc
"""

BATCHED = """
background = {"collection": "users", "from": 1, "to": 2, "batch_size": 7}
calls = []


def migrate_batch(docs, ctx):
    calls.append(len(docs))
    out = []
    for doc in docs:
        if doc["n"] == 5:
            out.append(None)
            continue
        doc["upper"] = doc["name"].upper()
        out.append(doc)
    return out
"""

STEPS = """
background = {"mode": "step", "from": 1, "to": 2}


def step(ctx):
    return {"checkpoint": None, "done": True}
"""


def users_hash(db: Database[dict[str, Any]]) -> str:
    return str(db.command("dbHash", collections=["users"])["collections"]["users"])


def bookkeeping(db: Database[dict[str, Any]]) -> dict[str, int]:
    """Documents in every collection migronaut keeps its own records in."""
    names = [
        "migronaut_background",
        "migronaut_background_partitions",
        "migronaut_changelog",
        "migronaut_lock",
    ]
    return {name: db[name].count_documents({}) for name in names}


def ids(report: DryRunReport) -> list[Any]:
    return [doc.id for doc in report.documents]


def assert_value_free(report: DryRunReport, *values: str) -> None:
    text = json.dumps(report.to_dict())
    for value in values:
        assert value not in text


def test_an_unregistered_migration_is_previewed_and_nothing_is_written(
    kit: Migronaut,
    db: Database[dict[str, Any]],
    migrations: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    seed_users(db, 100)
    write_background(migrations)
    before = users_hash(db)
    caplog.set_level(logging.DEBUG, logger="migronaut_core")
    caplog.set_level(logging.DEBUG, logger="migronaut")

    report = kit.background.dry_run(SPLIT_NAME, first=100)

    assert users_hash(db) == before
    assert bookkeeping(db) == dict.fromkeys(bookkeeping(db), 0)
    assert "migronaut_background" not in db.list_collection_names()
    assert report.migration == SPLIT_NAME and report.collection == "users"
    assert report.registered is False and report.status is None
    assert report.direction == "forward" and report.validate is False
    assert (report.estimate, report.at_least) == (100, False)
    assert ids(report) == list(range(100))
    data = report.to_dict()
    assert data["totals"] == {"documents": 100, "would_change": 100, "unchanged": 0, "errors": 0}
    assert data["first"] == 100 and data["registered"] is False
    for doc in data["documents"]:
        assert doc["changes"] == {"set": ["first", "last", "_v"], "unset": ["name"]}
    json.dumps(data)  # JSON-safe as it is
    assert_value_free(report, "First1", "Last1")
    logged = " ".join(record.getMessage() for record in caplog.records)
    assert "First1" not in logged and "Last1" not in logged
    assert "100 document(s)" in logged

    sampled = kit.background.dry_run(SPLIT_NAME)  # 20 random ones by default
    assert sampled.method == "sample" and sampled.size == 20
    assert len(set(ids(sampled))) == 20
    assert users_hash(db) == before


def test_first_is_the_first_matching_ids_in_order_and_sample_distinct_matching_ones(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 60)
    db.users.update_many({"_id": {"$in": [0, 2, 5]}}, {"$set": {"_v": 2}})  # already migrated
    db.users.create_index([("_v", 1), ("_id", 1)])  # read through the version index
    write_background(migrations)

    first = kit.background.dry_run(SPLIT_NAME, first=10)
    assert ids(first) == [1, 3, 4, 6, 7, 8, 9, 10, 11, 12]
    assert first.estimate == 57

    for _ in range(3):
        sample = kit.background.dry_run(SPLIT_NAME, sample=5)
        picked = ids(sample)
        assert len(picked) == len(set(picked)) == 5
        assert not set(picked) & {0, 2, 5}
        assert picked == sorted(picked)  # reported in _id order
        assert all(doc.set_fields == ("first", "last", "_v") for doc in sample.documents)

    everything = kit.background.dry_run(SPLIT_NAME, sample=1_000)  # more than there are
    assert sorted(ids(everything)) == [n for n in range(60) if n not in (0, 2, 5)]


def test_validate_reports_a_duplicate_key_without_its_value_and_writes_nothing(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 12)
    db.users.create_index("handle", unique=True, sparse=True)
    write_background(migrations, body=HANDLES)
    before = users_hash(db)

    plain = kit.background.dry_run(SPLIT_NAME, first=12)
    assert plain.totals["errors"] == 0  # the transform alone cannot see the index

    calls = kit._runtime.load(SPLIT_NAME).fns.migrate.__globals__["calls"]
    calls.clear()

    report = kit.background.dry_run(SPLIT_NAME, first=12, validate=True)

    assert sorted(calls) == list(range(12))  # each transform ran once, whatever the retries
    assert users_hash(db) == before
    assert db.users.count_documents({"handle": {"$exists": True}}) == 0
    assert bookkeeping(db) == dict.fromkeys(bookkeeping(db), 0)
    failed = [doc for doc in report.documents if doc.failed]
    assert len(failed) == 1, report.to_dict()
    assert failed[0].id in (3, 7)
    assert failed[0].reason == "write"
    assert failed[0].error is not None and "duplicate key" in failed[0].error
    assert "handle_1" in failed[0].error
    assert report.totals == {"documents": 12, "would_change": 11, "unchanged": 0, "errors": 1}
    assert ids(report) == list(range(12))
    for doc in report.documents:
        if not doc.failed:
            assert doc.set_fields == ("handle", "_v") and doc.unset_fields == ()
    assert_value_free(report, SECRET)


def test_validate_reports_a_validator_failure(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 12)  # names "First<n> Last<n>": "Last10" and up are six characters
    db.command(
        "collMod",
        "users",
        validator={"$jsonSchema": {"properties": {"last": {"bsonType": "string", "maxLength": 5}}}},
        validationLevel="strict",
    )
    write_background(migrations)
    before = users_hash(db)

    report = kit.background.dry_run(SPLIT_NAME, first=12, validate=True)

    assert users_hash(db) == before
    failed = {doc.id: doc for doc in report.documents if doc.failed}
    assert sorted(failed) == [10, 11]
    assert all(doc.reason == "write" for doc in failed.values())
    assert all("document failed validation" in str(doc.error) for doc in failed.values())
    assert report.totals["would_change"] == 10
    assert_value_free(report, "Last10", "Last11")


def test_validate_stops_isolating_write_errors_after_its_cap(
    kit: Migronaut,
    db: Database[dict[str, Any]],
    migrations: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seed_users(db, 10)
    db.users.create_index("handle", unique=True, sparse=True)
    write_background(migrations, body=SAME_HANDLE)
    monkeypatch.setattr(sandbox, "MAX_WRITE_FAILURES", 3)
    before = users_hash(db)

    report = kit.background.dry_run(SPLIT_NAME, first=10, validate=True)

    reasons = [doc.reason for doc in report.documents]
    assert reasons.count("write") == 3
    assert reasons.count("unvalidated") == 7
    assert report.totals["errors"] == 10
    assert users_hash(db) == before


def test_transform_errors_name_the_exception_type_only(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 20)
    write_background(migrations, body=SOMETIMES_RAISES)
    before = users_hash(db)

    for validate in (False, True):
        report = kit.background.dry_run(SPLIT_NAME, first=20, validate=validate)
        failed = {doc.id: doc for doc in report.documents if doc.failed}
        assert sorted(failed) == [0, 4, 8, 12, 16]
        assert all(
            (doc.reason, doc.error) == ("transform", "ValueError") for doc in failed.values()
        )
        assert report.totals == {"documents": 20, "would_change": 15, "unchanged": 0, "errors": 5}
        assert_value_free(report, SECRET, "First0")
        assert report.to_dict()["documents"][0] == {
            "id": 0,
            "error": "ValueError",
            "reason": "transform",
        }
    assert users_hash(db) == before


def test_a_batch_transform_is_previewed_in_batches(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 10)
    write_background(migrations, body=BATCHED)
    before = users_hash(db)

    calls = kit._runtime.load(SPLIT_NAME).fns.migrate_batch.__globals__["calls"]

    for validate in (False, True):
        calls.clear()
        report = kit.background.dry_run(SPLIT_NAME, first=10, validate=validate)
        assert calls == [7, 3]  # in batches of batch_size, each document once
        by_id = {doc.id: doc for doc in report.documents}
        assert by_id[5].failed and by_id[5].reason == "shape"
        assert all(by_id[n].set_fields == ("upper", "_v") for n in range(10) if n != 5)
        assert report.totals["errors"] == 1
    assert users_hash(db) == before


def test_a_registered_migration_is_previewed_by_its_registration_and_its_state_is_untouched(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 50)
    write_background(migrations)
    kit.runs.up()
    state_before = db.migronaut_background.find_one({"_id": SPLIT_NAME})
    assert state_before is not None
    changelog_before = list(db.migronaut_changelog.find())
    before = users_hash(db)

    for validate in (False, True):
        report = kit.background.dry_run(SPLIT_NAME, first=5, validate=validate)
        assert report.registered is True and report.status == "pending"
        assert report.file_changed is False
        assert ids(report) == [0, 1, 2, 3, 4]
        assert all(doc.set_fields == ("first", "last", "_v") for doc in report.documents)
        assert all(doc.unset_fields == ("name",) for doc in report.documents)

    assert db.migronaut_background.find_one({"_id": SPLIT_NAME}) == state_before
    assert db.migronaut_background_partitions.count_documents({}) == 0
    assert list(db.migronaut_changelog.find()) == changelog_before
    assert users_hash(db) == before

    # The registered spec rules: an edited file runs its functions with it, and says so.
    write_background(migrations, batch_size=7)
    edited = kit.background.dry_run(SPLIT_NAME, first=3)
    assert edited.file_changed is True and ids(edited) == [0, 1, 2]
    assert db.migronaut_background.find_one({"_id": SPLIT_NAME}) == state_before


def test_a_registered_revert_is_previewed_in_its_direction(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 30)
    write_background(migrations)
    kit.runs.up()
    assert kit_json.run(kit, SPLIT_NAME)["status"] == "completed"
    kit.runs.down()
    assert kit_json.status(kit, SPLIT_NAME)["direction"] == "revert"
    before = users_hash(db)

    report = kit.background.dry_run(SPLIT_NAME, first=3, validate=True)

    assert report.direction == "revert"
    assert ids(report) == [0, 1, 2]
    for doc in report.documents:
        assert (doc.set_fields, doc.unset_fields) == (("name", "_v"), ("first", "last"))
    assert users_hash(db) == before


def test_options_are_checked_before_anything_runs(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 5)
    write_background(migrations)
    bad: list[dict[str, Any]] = [
        {"sample": 5, "first": 5},
        {"first": 0},
        {"sample": 10_001},
        {"first": True},
        {"sample": "5"},
        {"steps": 2},
        {"from_start": True},
    ]
    for options in bad:
        with pytest.raises(ConfigInvalidError):
            kit.background.dry_run(SPLIT_NAME, **options)
    assert kit.background.dry_run(SPLIT_NAME, first=10_000).totals["documents"] == 5

    step_name = "20240102000000_step_thing"
    write_background(migrations, step_name, body=STEPS)
    # A step migration is previewed by steps (see engine/test_transactional.py).
    assert kit.background.dry_run(step_name).to_dict()["steps"] == [
        {"step": 1, "done": True, "counters": {}, "total": None, "checkpoint_bytes": 17}
    ]
    with pytest.raises(ConfigInvalidError):
        kit.background.dry_run(step_name, steps=0)


def test_validate_needs_transactions(
    kit: Migronaut,
    db: Database[dict[str, Any]],
    migrations: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seed_users(db, 5)
    write_background(migrations)
    monkeypatch.setattr(kit._runtime, "_transactions", False)  # as a standalone answers
    with pytest.raises(TransactionsUnsupportedError):
        kit.background.dry_run(SPLIT_NAME, validate=True)
    assert kit.background.dry_run(SPLIT_NAME, first=2).totals["documents"] == 2


def test_cli_prints_the_report(
    tmp_path: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    configure(tmp_path, mongo_uri, db.name)
    write_background(tmp_path / "migrations")
    seed_users(db, 10)
    before = users_hash(db)

    result = migronaut(tmp_path, "background", "dry-run", SPLIT_NAME, "--first", "3", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert [doc["id"] for doc in report["documents"]] == [0, 1, 2]
    assert report["documents"][0]["changes"] == {"set": ["first", "last", "_v"], "unset": ["name"]}
    assert report["totals"] == {"documents": 3, "would_change": 3, "unchanged": 0, "errors": 0}
    assert report["registered"] is False and report["first"] == 3

    human = migronaut(tmp_path, "background", "dry-run", SPLIT_NAME, "--sample", "4", "--validate")
    assert human.returncode == 0, human.stderr
    assert "nothing was written" in human.stdout
    assert "set first, last, _v; unset name" in human.stdout
    assert "4 document(s): 4 would change" in human.stdout

    refused = migronaut(tmp_path, "background", "dry-run", SPLIT_NAME, "--first", "0", "--json")
    assert refused.returncode == ConfigInvalidError.exit_code
    assert json.loads(refused.stdout)["error"]["code"] == ConfigInvalidError.code
    both = migronaut(tmp_path, "background", "dry-run", SPLIT_NAME, "--first", "1", "--sample", "1")
    assert both.returncode == 2  # argparse: not allowed together
    assert users_hash(db) == before
    assert "migronaut_background" not in db.list_collection_names()


UPDATE_PIPELINE = """
background = {
    "collection": "users",
    "from": 1,
    "to": 2,
    "revision_field": "rev",
    "update": [
        {"$set": {"num": {"$toInt": "$code"}}},
        {"$set": {"first": {"$arrayElemAt": [{"$split": ["$name", " "]}, 0]}}},
        {"$unset": "name"},
    ],
}
"""


def test_an_update_pipeline_is_previewed_by_the_server_and_validated_in_an_aborted_transaction(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    db.create_collection("users", validator={"$or": [{"_v": {"$ne": 2}}, {"num": {"$lt": 100}}]})
    seed_users(db, 10)
    db.users.update_many({}, [{"$set": {"code": {"$toString": "$n"}}}])
    db.users.update_one({"_id": 3}, {"$set": {"code": SECRET}})  # $toInt fails on it
    db.users.update_one({"_id": 5}, {"$set": {"code": "500"}})  # the validator refuses it
    db.users.update_one({"_id": 6}, {"$set": {"rev": 4}})
    write_background(migrations, body=UPDATE_PIPELINE)
    before = users_hash(db)

    plain = kit.background.dry_run(SPLIT_NAME, first=10)

    assert users_hash(db) == before
    assert bookkeeping(db) == dict.fromkeys(bookkeeping(db), 0)
    assert ids(plain) == list(range(10))
    by_id = {doc.id: doc for doc in plain.documents}
    assert by_id[3].failed and by_id[3].reason == "update"
    assert "241" in (by_id[3].error or "")  # ConversionFailure, by its code
    assert plain.totals == {"documents": 10, "would_change": 9, "unchanged": 0, "errors": 1}
    for doc_id in (0, 5, 6):
        assert by_id[doc_id].set_fields == ("num", "first", "_v", "rev")
        assert by_id[doc_id].unset_fields == ("name",)
    assert_value_free(plain, SECRET, "First1", "Last1")

    validated = kit.background.dry_run(SPLIT_NAME, first=10, validate=True)

    assert users_hash(db) == before
    assert db.users.count_documents({"_v": 2}) == 0
    assert bookkeeping(db) == dict.fromkeys(bookkeeping(db), 0)
    failed = {doc.id: doc for doc in validated.documents if doc.failed}
    assert set(failed) == {3, 5}, validated.to_dict()
    assert failed[3].reason == failed[5].reason == "update"
    assert "121" in (failed[5].error or "")  # document validation, by its code
    assert validated.totals["would_change"] == 8
    assert_value_free(validated, SECRET, "First1", "500")
