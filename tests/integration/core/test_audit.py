"""``migronaut audit``: the general audit with the background findings folded in.

Against the real replica set, each finding in its situation (the run lock held
or left by a killed run, pending, failed, changed, missing and broken
migrations, broken definitions, unreadable changelog records) and not
otherwise; one shape for all of them, and an exit status that says whether one
is an error.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core import Actor, Finding, MigrationFailedError, Migronaut
from migronaut_core.cli import AUDIT_ERRORS_EXIT
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.cli import configure, migronaut
from tests.support.runner import write_migration

Db = Database[dict[str, Any]]
FIRST = "20230101000000_first"
SECOND = "20230102000000_second"
FAILING = """
def up(ctx):
    raise RuntimeError("boom")
"""


@pytest.fixture
def kit(mongo_uri: str, db: Db, migrations: Path) -> Migronaut:
    write_migration(migrations, FIRST)
    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up()
        return kit


def kinds(findings: list[Finding]) -> list[tuple[str, str | None, str]]:
    return [(f.kind, f.migration, f.severity) for f in findings]


def test_a_healthy_setup_has_no_findings(kit: Migronaut) -> None:
    assert kit.runs.audit() == []


def test_the_run_lock_held_then_left_by_a_killed_run(kit: Migronaut, db: Db) -> None:
    lock = kit._runner.run_lock(Actor(requested_by="deployer"))
    assert lock.try_acquire()
    [held] = kit.runs.audit()
    assert (held.kind, held.severity) == ("lock_held", "warning")
    assert "deployer" in held.message
    # Its holder dies: it stops renewing, the lock expires unreleased.
    db.migronaut_lock.update_one(
        {"_id": lock.name}, {"$set": {"expires_at": datetime.now(UTC) - timedelta(minutes=5)}}
    )
    [stale] = kit.runs.audit()
    assert (stale.kind, stale.severity) == ("lock_stale", "warning")
    assert "killed" in stale.message
    # Released cleanly: nothing to say.
    assert lock.try_acquire() and lock.release()
    assert kit.runs.audit() == []


def test_each_migration_finding_in_its_situation(kit: Migronaut, db: Db, migrations: Path) -> None:
    write_migration(migrations, SECOND)
    assert kinds(kit.runs.audit()) == [("pending", SECOND, "warning")]

    (migrations / f"{SECOND}.py").write_text("import no_such_module_anywhere\n")
    [broken] = kit.runs.audit()
    assert (broken.kind, broken.migration, broken.severity) == ("file_invalid", SECOND, "error")

    write_migration(migrations, SECOND, FAILING)
    with pytest.raises(MigrationFailedError):
        kit.runs.up()
    [failed] = kit.runs.audit()
    assert (failed.kind, failed.migration, failed.severity) == ("failed", SECOND, "error")
    assert "MIGRATION_FAILED" in failed.message and "boom" not in failed.message
    (migrations / f"{SECOND}.py").unlink()
    db.migronaut_changelog.delete_one({"_id": SECOND})

    first = migrations / f"{FIRST}.py"
    first.write_text(first.read_text() + "\n# edited after it was applied\n")
    assert kinds(kit.runs.audit()) == [("checksum_mismatch", FIRST, "error")]
    first.unlink()
    assert kinds(kit.runs.audit()) == [("file_missing", FIRST, "warning")]


def test_unreadable_records_and_definitions_are_errors(
    kit: Migronaut, mongo_uri: str, db: Db, migrations: Path
) -> None:
    db.migronaut_changelog.insert_many(
        [
            {"_id": "20230103000000_half", "status": "applied", "checksum": "x"},  # no time
            {"_id": "not a name", "status": "applied", "applied_at": datetime.now(UTC)},
        ]
    )
    findings = kit.runs.audit()
    assert kinds(findings) == [
        ("record_invalid", "20230103000000_half", "error"),
        ("record_invalid", "not a name", "error"),
    ]
    assert "applied_at" in findings[0].message
    db.migronaut_changelog.delete_many({"_id": {"$ne": FIRST}})
    with make_kit(mongo_uri, db, migrations, collections_dir="missing") as broken:
        assert kinds(broken.runs.audit()) == [("definitions_invalid", None, "error")]


def test_background_findings_are_folded_in_each_fact_once(
    mongo_uri: str, db: Db, migrations: Path
) -> None:
    write_background(migrations)
    seed_users(db, 20)
    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up()
        kit.background.run(SPLIT_NAME)
        # No version index: the background audit's finding, in the general audit.
        assert kinds(kit.runs.audit()) == [("missing_version_index", SPLIT_NAME, "warning")]
        db.users.create_index([("_v", 1), ("_id", 1)])
        assert kit.runs.audit() == []
        # Its file changed: `up` refuses (an error), said once.
        path = migrations / f"{SPLIT_NAME}.py"
        path.write_text(path.read_text() + "\n# edited\n")
        [changed] = kit.runs.audit()
        assert (changed.kind, changed.severity) == ("checksum_mismatch", "error")
        assert "repin" in changed.message
        # Its file is gone: the lanes need it (an error), said once.
        path.unlink()
        assert kinds(kit.runs.audit()) == [("file_missing", SPLIT_NAME, "error")]


def test_cli_audit_exits_non_zero_on_an_error_only(
    kit: Migronaut, tmp_path: Path, mongo_uri: str, db: Db, migrations: Path
) -> None:
    configure(tmp_path, mongo_uri, db.name)
    clean = migronaut(tmp_path, "audit")
    assert (clean.returncode, clean.stdout.strip()) == (0, "no findings"), clean.stderr

    write_migration(migrations, SECOND)
    warned = migronaut(tmp_path, "audit", "--json")
    assert warned.returncode == 0, warned.stderr
    assert json.loads(warned.stdout) == [
        {
            "kind": "pending",
            "migration": SECOND,
            "collection": None,
            "message": f"{SECOND} is not applied yet",
            "severity": "warning",
        }
    ]
    first = migrations / f"{FIRST}.py"
    first.write_text(first.read_text() + "\n# edited\n")
    failed = migronaut(tmp_path, "audit")
    assert failed.returncode == AUDIT_ERRORS_EXIT, failed.stderr
    assert f"error    checksum_mismatch      {FIRST}:" in failed.stdout
    assert f"warning  pending                {SECOND}:" in failed.stdout
    assert failed.stdout.strip().endswith("1 error(s), 1 warning(s)")
