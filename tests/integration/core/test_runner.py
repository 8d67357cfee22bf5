"""The migration runner against a real MongoDB: up, down, status, create, errors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core import BackgroundPendingError, Migronaut
from migronaut_core.errors import (
    ChecksumMismatchError,
    ConfigInvalidError,
    IrreversibleMigrationError,
    LockLostError,
    MigrationFailedError,
    MigrationFileNotFoundError,
    MigrationInvalidExportError,
    MigrationInvalidNameError,
    NotAppliedError,
)
from tests.support.background import SPLIT_NAME, seed_users, write_background
from tests.support.runner import write_migration

A, B, C = "20240101000000_a", "20240102000000_b", "20240103000000_c"


@pytest.fixture
def kit(mongo_uri: str, db: Database[dict[str, Any]], migrations: Path) -> Iterator[Migronaut]:
    with Migronaut(uri=mongo_uri, database=db.name, migrations_dir=str(migrations)) as kit:
        yield kit


def runs(db: Database[dict[str, Any]]) -> dict[str, int]:
    return {doc["_id"]: doc["n"] for doc in db.runs.find()}


def test_up_applies_all_pending_in_order_and_records_them(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    for name in (B, A):
        write_migration(migrations, name)
    result = kit.runs.up(requested_by="ana", reason="release 7")
    assert [item.name for item in result.migrations] == [A, B]
    assert {item.status for item in result.migrations} == {"applied"}
    assert runs(db) == {A: 1, B: 1}
    record = db.migronaut_changelog.find_one({"_id": A})
    assert record is not None
    assert record["status"] == "applied"
    assert record["requested_by"] == "ana"
    assert record["reason"] == "release 7"
    assert record["run_id"] == result.run_id
    assert len(record["checksum"]) == 64
    assert record["description"] == "counts its runs"
    assert kit.runs.up().migrations == ()


def test_up_to_and_only(kit: Migronaut, db: Database[dict[str, Any]], migrations: Path) -> None:
    for name in (A, B, C):
        write_migration(migrations, name)
    assert [m.name for m in kit.runs.up(to=B).migrations] == [A, B]
    assert [m.name for m in kit.runs.up(only=C).migrations] == [C]
    assert runs(db) == {A: 1, B: 1, C: 1}
    with pytest.raises(ConfigInvalidError):
        kit.runs.up(to=A, only=B)


def test_unknown_target_name_is_an_error(kit: Migronaut, migrations: Path) -> None:
    write_migration(migrations, A)
    with pytest.raises(MigrationFileNotFoundError):
        kit.runs.up(to="20990101000000_missing")
    with pytest.raises(MigrationInvalidNameError):
        kit.runs.up(only="../../etc/passwd")


def test_status_rows(kit: Migronaut, migrations: Path) -> None:
    write_migration(migrations, A)
    write_migration(migrations, B, 'background = {"collection": "c"}\n')
    kit.runs.up(only=A)
    rows = {row.name: row.to_dict() for row in kit.runs.status()}
    assert rows[A]["status"] == "applied"
    assert rows[A]["checksum_ok"] is True
    assert rows[A]["kind"] == "regular"
    assert rows[A]["description"] == "counts its runs"
    assert rows[A]["applied_at"] is not None
    assert rows[B] == {
        "name": B,
        "status": "pending",
        "applied_at": None,
        "checksum_ok": None,
        "kind": "background",
        "description": None,
    }


def test_checksum_drift_shows_in_status_and_blocks_up(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    path = write_migration(migrations, A)
    kit.runs.up()
    path.write_text(path.read_text() + "\n# edited after it was applied\n")
    write_migration(migrations, B)
    row = next(row for row in kit.runs.status() if row.name == A)
    assert row.checksum_ok is False
    with pytest.raises(ChecksumMismatchError) as raised:
        kit.runs.up()
    assert raised.value.context["names"] == [A]
    assert B not in runs(db)
    assert [m.name for m in kit.runs.up(allow_checksum_mismatch=True).migrations] == [B]


def test_status_shows_applied_records_whose_file_is_gone(kit: Migronaut, migrations: Path) -> None:
    path = write_migration(migrations, A)
    kit.runs.up()
    path.unlink()
    row = kit.runs.status()[0].to_dict()
    assert row["status"] == "applied"
    assert row["file_missing"] is True
    assert row["checksum_ok"] is None


def test_down_reverts_last_then_to_a_name(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    for name in (A, B, C):
        write_migration(migrations, name)
    kit.runs.up()
    assert [m.name for m in kit.runs.down().migrations] == [C]
    assert runs(db) == {A: 1, B: 1, C: 0}
    kit.runs.up()
    result = kit.runs.down(to=A)
    assert [m.name for m in result.migrations] == [C, B]
    assert {m.status for m in result.migrations} == {"reverted"}
    assert [row.status for row in kit.runs.status()] == ["applied", "pending", "pending"]


def test_down_errors_change_nothing(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    write_migration(migrations, A)
    write_migration(migrations, B, "def up(ctx):\n    pass\n")
    write_migration(migrations, C)
    kit.runs.up()
    with pytest.raises(NotAppliedError):
        kit.runs.down(to="20990101000000_never")
    with pytest.raises(IrreversibleMigrationError) as raised:
        kit.runs.down(to=A)
    assert raised.value.context["name"] == B
    assert runs(db) == {A: 1, C: 1}
    assert db.migronaut_changelog.count_documents({"status": "applied"}) == 3


def test_down_with_nothing_applied_is_a_no_op(kit: Migronaut) -> None:
    assert kit.runs.down().migrations == ()


def test_a_failing_migration_stops_the_run_and_is_remembered(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    write_migration(migrations, A)
    failing = write_migration(
        migrations, B, "def up(ctx):\n    raise KeyError('secret-customer-value')\n"
    )
    write_migration(migrations, C)
    with pytest.raises(MigrationFailedError) as raised:
        kit.runs.up()
    assert "secret-customer-value" not in raised.value.message
    assert raised.value.context["error_type"] == "KeyError"
    assert isinstance(raised.value.__cause__, KeyError)
    assert runs(db) == {A: 1}
    row = next(row for row in kit.runs.status() if row.name == B)
    assert row.status == "pending"
    assert row.last_error is not None
    assert row.last_error["code"] == "MIGRATION_FAILED"
    failing.write_text("def up(ctx):\n    pass\n")
    assert [m.name for m in kit.runs.up().migrations] == [B, C]
    assert db.migronaut_lock.find_one({"_id": "migrations"})["owner"] is None


@pytest.mark.parametrize(
    "body",
    [
        "def up(ctx):\n  return (\n",
        "import not_a_module_anywhere\n",
        "x = 1\n",
        "def up(ctx): pass\nrequires = 'b'\n",
    ],
)
def test_a_broken_module_fails_the_run_before_anything_is_written(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path, body: str
) -> None:
    write_migration(migrations, A)
    write_migration(migrations, B, body)
    with pytest.raises(MigrationInvalidExportError):
        kit.runs.up()
    assert runs(db) == {}
    assert db.migronaut_changelog.count_documents({}) == 0


def test_a_misnamed_file_fails_before_connecting_or_writing(
    mongo_uri: str, db: Database[dict[str, Any]], migrations: Path
) -> None:
    write_migration(migrations, A)
    (migrations / "add_index.py").write_text("def up(ctx): pass\n")
    kit = Migronaut(uri=mongo_uri, database=db.name, migrations_dir=str(migrations))
    with kit, pytest.raises(MigrationInvalidNameError):
        kit.runs.up()
    assert db.name not in db.client.list_database_names()


def test_bad_config_fails_before_anything_is_written(
    mongo_uri: str, db: Database[dict[str, Any]], migrations: Path
) -> None:
    with pytest.raises(ConfigInvalidError) as raised:
        Migronaut(uri=mongo_uri, database=db.name, lock_ttl="5")
    assert raised.value.context["key"] == "lock_ttl"
    assert db.name not in db.client.list_database_names()


def test_transaction_rolls_back_the_migration_and_its_record(
    mongo_uri: str, db: Database[dict[str, Any]], migrations: Path
) -> None:
    write_migration(
        migrations,
        A,
        """
        def up(ctx):
            assert ctx.session is not None and ctx.session.in_transaction
            ctx.db.items.insert_one({"x": 1}, session=ctx.session)
            raise RuntimeError("after a write")
        """,
    )
    db.create_collection("items")
    with (
        Migronaut(
            uri=mongo_uri, database=db.name, migrations_dir=str(migrations), use_transaction=True
        ) as kit,
        pytest.raises(MigrationFailedError),
    ):
        kit.runs.up()
    assert db.items.count_documents({}) == 0
    assert db.migronaut_changelog.count_documents({"status": "applied"}) == 0


def test_a_migration_that_loses_the_lock_records_nothing(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    write_migration(
        migrations,
        A,
        """
        from datetime import datetime

        def up(ctx):
            # Someone breaks the lock (an operator's unlock) while this runs.
            ctx.db.migronaut_lock.update_one(
                {"_id": "migrations"}, {"$set": {"owner": None, "expires_at": datetime(1970, 1, 1)}}
            )
        """,
    )
    with pytest.raises(LockLostError):
        kit.runs.up()
    assert db.migronaut_changelog.count_documents({"status": "applied"}) == 0


def test_create_writes_loadable_templates(kit: Migronaut, migrations: Path) -> None:
    regular = kit.runs.create("add created index")
    background = kit.runs.create("split names", background=True)
    assert regular.parent == migrations.resolve()
    rows = {row.name: row for row in kit.runs.status()}
    assert rows[regular.stem].kind == "regular"
    assert rows[background.stem].kind == "background"


AFTER_SPLIT = "20240105000000_drop_full_names"


def test_a_background_up_is_applied_in_the_run_result(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 10)
    write_background(migrations)

    result = kit.runs.up()

    (item,) = result.migrations
    assert (item.name, item.kind, item.status) == (SPLIT_NAME, "background", "applied")
    assert result.to_dict()["migrations"][0]["status"] == "applied"
    record = db.migronaut_changelog.find_one({"_id": SPLIT_NAME})
    assert record is not None and record["status"] == "applied"
    assert kit.background.status(SPLIT_NAME) is not None  # registered, not yet rewritten
    down = kit.runs.down()
    assert [(item.name, item.status) for item in down.migrations] == [(SPLIT_NAME, "reverted")]


def test_the_requires_guard_names_the_waiting_migration_and_what_it_waits_for(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 10)
    write_background(migrations)
    write_migration(
        migrations, AFTER_SPLIT, f"requires = ['{SPLIT_NAME}']\n\ndef up(ctx):\n    pass\n"
    )

    with pytest.raises(BackgroundPendingError) as raised:
        kit.runs.up()

    assert raised.value.context == {
        "migration": AFTER_SPLIT,
        "waits_for": [{"migration": SPLIT_NAME, "status": "pending"}],
    }
