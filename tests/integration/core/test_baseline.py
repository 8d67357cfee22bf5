"""``baseline --to NAME``: adopting a database whose migrations already ran elsewhere."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core import (
    BaselineConflictError,
    IrreversibleMigrationError,
    MigrationFileNotFoundError,
    MigrationInvalidNameError,
    Migronaut,
)
from tests.support import kit_json
from tests.support.background import write_background
from tests.support.cli import configure, migronaut
from tests.support.runner import write_migration

A, B, C = "20240101000000_a", "20240102000000_split", "20240103000000_c"
ONE_WAY = """
background = {"collection": "users", "from": 1, "to": 2}

def migrate(doc, ctx):
    return doc
"""


@pytest.fixture
def migrations(tmp_path: Path) -> Path:
    path = tmp_path / "migrations"
    write_migration(path, A)
    write_background(path, B, body=ONE_WAY)
    write_migration(path, C)
    return path


def test_baseline_records_a_prefix_as_adopted_without_running_it(
    kit: Migronaut, db: Database[dict[str, Any]]
) -> None:
    result = kit.runs.baseline(to=B, requested_by="ops", reason="adopt prod")
    assert result.adopted == (A, B)
    assert result.already_applied == ()
    assert db.runs.count_documents({}) == 0  # nothing ran
    assert db.migronaut_background.count_documents({}) == 0  # nothing registered
    record = db.migronaut_changelog.find_one({"_id": A})
    assert record is not None
    assert (record["status"], record["adopted"], record["requested_by"]) == (
        "applied",
        True,
        "ops",
    )
    rows = {row.name: row.to_dict() for row in kit.runs.status()}
    assert rows[A]["adopted"] is True and rows[A]["status"] == "applied"
    assert rows[B]["adopted"] is True and rows[B]["kind"] == "background"
    assert "adopted" not in rows[C] and rows[C]["status"] == "pending"

    assert kit.runs.baseline(to=B).adopted == ()  # again: nothing more to adopt
    assert [item.name for item in kit.runs.up().migrations] == [C]
    assert db.runs.count_documents({}) == 1
    assert "adopted" not in (db.migronaut_changelog.find_one({"_id": C}) or {})


def test_an_adopted_background_migration_counts_as_done_for_requires(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    kit.runs.baseline(to=B)
    needs = "20240104000000_needs_split"
    body = f'requires = ["{B}"]\n\ndef up(ctx):\n    ctx.db.marks.insert_one({{}})\n'
    write_migration(migrations, needs, body)
    later = "20240105000000_later_split"
    write_background(
        migrations,
        later,
        body=f'requires = ["{B}"]\n'
        'background = {"collection": "orders", "from": 1, "to": 2}\n\n'
        "def migrate(doc, ctx):\n    return doc\n",
    )
    result = kit.runs.up()
    assert [item.name for item in result.migrations] == [C, needs, later]
    assert db.marks.count_documents({}) == 1
    assert kit_json.status(kit, later)["status"] == "pending"  # not blocked


def test_down_of_an_adopted_one_way_background_migration_is_refused(
    kit: Migronaut, db: Database[dict[str, Any]]
) -> None:
    kit.runs.baseline(to=B)
    with pytest.raises(IrreversibleMigrationError):
        kit.runs.down()
    assert db.migronaut_changelog.count_documents({"_id": B, "status": "applied"}) == 1


def test_baseline_refusals_write_nothing(kit: Migronaut, db: Database[dict[str, Any]]) -> None:
    with pytest.raises(MigrationFileNotFoundError):
        kit.runs.baseline(to="20990101000000_unknown")
    with pytest.raises(MigrationInvalidNameError):
        kit.runs.baseline(to="not a name")
    kit.runs.up(to=A)
    kit.runs.up(only=C)
    before = list(db.migronaut_changelog.find())
    with pytest.raises(BaselineConflictError) as raised:
        kit.runs.baseline(to=B)
    assert raised.value.context == {"to": B, "applied_after": [C]}
    assert list(db.migronaut_changelog.find()) == before


def test_a_background_migration_migronaut_registered_is_not_adopted(
    kit: Migronaut, db: Database[dict[str, Any]]
) -> None:
    kit.runs.up(to=B)
    kit.runs.down()  # withdrawn: no state
    db.migronaut_background.insert_one({"_id": B, "status": "completed", "direction": "revert"})
    with pytest.raises(BaselineConflictError) as raised:
        kit.runs.baseline(to=B)
    assert raised.value.context == {"name": B}
    assert db.migronaut_changelog.find_one({"_id": B}) is None


def test_cli_baseline_and_status_show_adoption(
    tmp_path: Path, mongo_uri: str, db: Database[dict[str, Any]], migrations: Path
) -> None:
    configure(tmp_path, mongo_uri, db.name)
    adopted = migronaut(tmp_path, "baseline", "--to", A, "--json")
    assert adopted.returncode == 0, adopted.stderr
    assert json.loads(adopted.stdout)["adopted"] == [A]
    human = migronaut(tmp_path, "status")
    assert "[adopted]" in next(line for line in human.stdout.splitlines() if A in line)

    migronaut(tmp_path, "up")
    refused = migronaut(tmp_path, "baseline", "--to", A, "--json")
    assert refused.returncode == BaselineConflictError.exit_code
    assert json.loads(refused.stdout)["error"]["code"] == "BASELINE_CONFLICT"
