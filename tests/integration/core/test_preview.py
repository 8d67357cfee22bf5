"""``up --plan`` / ``down --plan``: what a run would do, with nothing written, not even the lock."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core import IrreversibleMigrationError, Migronaut
from migronaut_core.changelog import Actor
from tests.support import kit_json
from tests.support.background import write_background
from tests.support.cli import configure, migronaut
from tests.support.runner import write_migration

A = "20240101000000_a"
SPLIT = "20240102000000_split"
ORDERS = "20240103000000_orders"
NEEDS = "20240104000000_needs"
ONE_WAY = "20240105000000_one_way"


@pytest.fixture
def migrations(tmp_path: Path) -> Path:
    path = tmp_path / "migrations"
    write_migration(path, A)
    write_background(path, SPLIT)
    write_background(
        path,
        ORDERS,
        body=f'requires = ["{SPLIT}"]\n'
        'background = {"collection": "orders", "from": 1, "to": 2}\n\n'
        "def migrate(doc, ctx):\n    return doc\n",
    )
    write_migration(
        path, NEEDS, f'requires = ["{ORDERS}"]\n\ndef up(ctx):\n    ctx.db.marks.insert_one({{}})\n'
    )
    return path


def snapshot(db: Database[dict[str, Any]]) -> dict[str, Any]:
    """Every collection of the database with its documents and indexes."""
    return {
        name: (list(db[name].find().sort("_id")), db[name].index_information())
        for name in sorted(db.list_collection_names())
    }


def test_up_plan_on_a_fresh_database_lists_the_run_and_creates_nothing(
    kit: Migronaut, db: Database[dict[str, Any]]
) -> None:
    plan = kit.runs.plan_up()
    assert plan.refusal is None
    assert [item.to_dict() for item in plan.migrations] == [
        {"name": A, "kind": "regular", "action": "apply", "requires": [], "waits_for": []},
        {
            "name": SPLIT,
            "kind": "background",
            "action": "register",
            "requires": [],
            "waits_for": [],
        },
        {
            "name": ORDERS,
            "kind": "background",
            "action": "register",
            "requires": [SPLIT],
            "waits_for": [{"migration": SPLIT, "status": "planned"}],
        },
        {
            "name": NEEDS,
            "kind": "regular",
            "action": "apply",
            "requires": [ORDERS],
            "waits_for": [{"migration": ORDERS, "status": "planned"}],
        },
    ]
    assert [item.name for item in kit.runs.plan_up(to=SPLIT).migrations] == [A, SPLIT]
    assert db.list_collection_names() == []


def test_plans_write_nothing_not_even_the_held_lock(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    kit.runs.up(on_background_pending="stop")
    write_background(
        migrations,
        ONE_WAY,
        body='background = {"collection": "users", "from": 5, "to": 6}\n\n'
        "def migrate(doc, ctx):\n    return doc\n",
    )
    kit.runs.up(only=ONE_WAY)
    db.users.insert_one({"_id": 1, "_v": 5})
    assert kit_json.run(kit, ONE_WAY)["status"] == "completed"
    holder = kit._runner.run_lock(Actor(requested_by="someone"))
    holder.acquire()
    try:
        before = snapshot(db)
        up = kit.runs.plan_up()
        assert [(item.name, item.waits_for) for item in up.migrations] == [
            (NEEDS, ({"migration": ORDERS, "status": "blocked"},))
        ]
        down = kit.runs.plan_down(to=A)
        assert [(item.name, item.action) for item in down.migrations] == [
            (ONE_WAY, "withdraw"),
            (ORDERS, "withdraw"),
            (SPLIT, "revert"),
        ]
        assert isinstance(down.refusal, IrreversibleMigrationError)
        assert down.migrations[0].refusal is down.refusal
        assert snapshot(db) == before
    finally:
        holder.release()


def test_cli_plans_as_json_and_exit_with_the_refusal(
    tmp_path: Path, mongo_uri: str, db: Database[dict[str, Any]], migrations: Path
) -> None:
    configure(tmp_path, mongo_uri, db.name)
    up = migronaut(tmp_path, "up", "--plan", "--json")
    assert up.returncode == 0, up.stderr
    document = json.loads(up.stdout)
    assert [row["name"] for row in document["migrations"]] == [A, SPLIT, ORDERS, NEEDS]
    assert document["refused"] is None
    assert db.list_collection_names() == []

    write_migration(migrations, A, "def up(ctx):\n    pass\n")  # no down()
    assert migronaut(tmp_path, "up", "--to", A).returncode == 0
    before = snapshot(db)
    down = migronaut(tmp_path, "down", "--plan", "--json")
    assert down.returncode == IrreversibleMigrationError.exit_code
    refused = json.loads(down.stdout)
    assert refused["refused"]["code"] == "IRREVERSIBLE_MIGRATION"
    assert refused["migrations"][0]["refused"]["code"] == "IRREVERSIBLE_MIGRATION"
    human = migronaut(tmp_path, "down", "--plan")
    assert "REFUSED: IRREVERSIBLE_MIGRATION" in human.stdout
    assert snapshot(db) == before
