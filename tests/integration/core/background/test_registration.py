"""Registering background migrations: the spec ``down`` goes by, atomic records, ``requires``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.database import Database

from migronaut_core import BackgroundPendingError, ConfigInvalidError, Migronaut
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.registration_kill import DIE_BEFORE_CHANGELOG_ENV
from tests.support.runner import write_migration

REPO_ROOT = Path(__file__).resolve().parents[4]
REGULAR = "20231231000000_before"
LOCK_TTL = 2.0

#: A split over a collection whose definition declares the version field ``sv``.
DECLARED_SPLIT = """
background = {"collection": "users", "from": 1, "to": 2, "batch_size": 50}

def migrate(doc, ctx):
    first, _, last = doc.pop("name").partition(" ")
    return {**doc, "first": first, "last": last}

def revert(doc, ctx):
    doc["name"] = doc.pop("first") + " " + doc.pop("last")
    return doc
"""


def _seed_declared(db: Database[dict[str, Any]], count: int) -> None:
    db.users.insert_many([{"_id": i, "name": f"F{i} L{i}", "sv": 1} for i in range(count)])


# -- item 2: down goes by the registered spec ------------------------------------------------


def test_down_reverts_by_the_spec_registered_at_up_not_the_edited_file(
    mongo_uri: str, db: Database[dict[str, Any]], migrations: Path, tmp_path: Path
) -> None:
    definitions = tmp_path / "collections"
    definitions.mkdir()
    (definitions / "users.toml").write_text('versioning = { field = "sv" }\n')
    _seed_declared(db, 120)
    path = write_background(migrations, body=DECLARED_SPLIT)
    with make_kit(mongo_uri, db, migrations, collections_dir=str(definitions)) as kit:
        kit.runs.up()
        assert kit_json.run(kit, SPLIT_NAME)["status"] == "completed"
    assert db.users.count_documents({"sv": 2, "first": {"$exists": True}}) == 120

    # Since: the file now says 2 -> 5, and the definitions do not load at all.
    path.write_text(path.read_text().replace('"to": 2', '"to": 5'))
    (definitions / "users.toml").write_text("versioning = {\n")
    with make_kit(mongo_uri, db, migrations, collections_dir=str(definitions)) as kit:
        result = kit.runs.down()
        assert [item.status for item in result.migrations] == ["reverted"]
        state = db.migronaut_background.find_one({"_id": SPLIT_NAME})
        assert state is not None
        assert state["direction"] == "revert"
        assert (state["spec"]["field"], state["spec"]["from"], state["spec"]["to"]) == ("sv", 1, 2)
        assert kit_json.run(kit, SPLIT_NAME)["status"] == "completed"
    assert db.users.count_documents({"sv": 1, "name": {"$exists": True}}) == 120


# -- item 3: a registration and its changelog record, atomically ------------------------------


def _up_killed_between_the_writes(uri: str, db_name: str, migrations: Path) -> None:
    process = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.support.registration_kill",
            uri,
            db_name,
            str(migrations),
            str(LOCK_TTL),
        ],
        cwd=REPO_ROOT,
        env={**os.environ, DIE_BEFORE_CHANGELOG_ENV: "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert process.returncode == -signal.SIGKILL, process.stderr


def _write_pair(migrations: Path) -> None:
    write_migration(migrations, REGULAR)
    write_background(migrations)


def _records(db: Database[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return list(db.migronaut_changelog.find({"_id": name}))


def test_without_transactions_a_killed_registration_is_completed_by_the_next_up(
    standalone_uri: str, tmp_path: Path
) -> None:
    migrations = tmp_path / "migrations"
    _write_pair(migrations)
    client: MongoClient[dict[str, Any]] = MongoClient(standalone_uri, tz_aware=True)
    db = client["registration"]
    db.users.insert_many([{"_id": i, "name": f"F{i} L{i}", "_v": 1} for i in range(300)])

    _up_killed_between_the_writes(standalone_uri, db.name, migrations)
    # The state is written first: the registration is there, its record is not.
    assert db.migronaut_changelog.find_one({"_id": REGULAR}) is not None
    assert _records(db, SPLIT_NAME) == []
    registered = db.migronaut_background.find_one({"_id": SPLIT_NAME})
    assert registered is not None
    # A lane may pick it up meanwhile: what it did is not thrown away by the next up.
    with make_kit(standalone_uri, db, migrations, lock_ttl_seconds=LOCK_TTL) as kit:
        assert kit_json.run(kit, SPLIT_NAME)["status"] == "completed"
        result = kit.runs.up(wait_for_lock_seconds=LOCK_TTL * 5)
    assert [(item.name, item.status) for item in result.migrations] == [(SPLIT_NAME, "applied")]
    assert [record["status"] for record in _records(db, SPLIT_NAME)] == ["applied"]
    states = list(db.migronaut_background.find({"_id": SPLIT_NAME}))
    assert len(states) == 1
    assert states[0]["registration"] == registered["registration"]
    assert states[0]["status"] == "completed"
    assert [entry["action"] for entry in states[0]["history"]].count("register") == 1
    assert db.users.count_documents({"_v": 2}) == 300
    client.close()


@pytest.fixture
def short_transactions(mongo_client: MongoClient[dict[str, Any]]) -> Iterator[None]:
    """Transactions left open by a killed client end after 2 s instead of 60 s."""
    before = mongo_client.admin.command("getParameter", 1, transactionLifetimeLimitSeconds=1)
    mongo_client.admin.command("setParameter", 1, transactionLifetimeLimitSeconds=2)
    try:
        yield
    finally:
        limit = before["transactionLifetimeLimitSeconds"]
        mongo_client.admin.command("setParameter", 1, transactionLifetimeLimitSeconds=limit)


@pytest.mark.usefixtures("short_transactions")
def test_with_transactions_a_killed_registration_leaves_nothing_behind(
    mongo_uri: str, db: Database[dict[str, Any]], migrations: Path
) -> None:
    _write_pair(migrations)
    db.users.insert_many([{"_id": i, "name": f"F{i} L{i}", "_v": 1} for i in range(50)])

    _up_killed_between_the_writes(mongo_uri, db.name, migrations)
    assert db.migronaut_changelog.find_one({"_id": REGULAR}) is not None
    assert _records(db, SPLIT_NAME) == []
    assert db.migronaut_background.find_one({"_id": SPLIT_NAME}) is None

    with make_kit(mongo_uri, db, migrations, lock_ttl_seconds=LOCK_TTL) as kit:
        result = kit.runs.up(wait_for_lock_seconds=LOCK_TTL * 5)
    assert [(item.name, item.status) for item in result.migrations] == [(SPLIT_NAME, "applied")]
    assert [record["status"] for record in _records(db, SPLIT_NAME)] == ["applied"]
    assert db.migronaut_background.count_documents({"_id": SPLIT_NAME}) == 1


# -- item 4: requires names earlier migrations -------------------------------------------------


def test_requiring_a_later_migration_is_refused_before_anything_is_written(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    later = "20240301000000_later_split"
    write_migration(migrations, REGULAR)
    write_migration(
        migrations,
        "20240201000000_needs_later",
        f'requires = ["{later}"]\n\ndef up(ctx):\n    ctx.db.marks.insert_one({{}})\n',
    )
    write_background(migrations, later)
    with pytest.raises(ConfigInvalidError) as raised:
        kit.runs.up(on_background_pending="stop")
    assert raised.value.context == {
        "key": "requires",
        "name": "20240201000000_needs_later",
        "requires": later,
    }
    assert later in raised.value.message
    assert db.list_collection_names() == []  # no lock, no changelog index, no state


ORDERS = "20240102000000_orders_v2"
AFTER_ORDERS = "20240103000000_drop_legacy"


def test_inline_mode_names_what_a_requirement_still_waits_for(
    mongo_uri: str, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 20)
    db.orders.insert_many([{"_id": i, "_v": 1} for i in range(10)])
    write_background(migrations)
    write_background(
        migrations,
        ORDERS,
        body=f"""
        requires = ["{SPLIT_NAME}"]
        background = {{"collection": "orders", "from": 1, "to": 2}}

        def migrate(doc, ctx):
            return {{**doc, "total": 0}}
        """,
    )
    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up()  # SPLIT_NAME pending, ORDERS blocked on it
        kit.background.control(SPLIT_NAME, "pause")
    write_migration(
        migrations, AFTER_ORDERS, f"requires = ['{ORDERS}']\n\ndef up(ctx):\n    pass\n"
    )

    # Inline, the paused requirement cannot be driven to the end: ORDERS stays blocked.
    with (
        make_kit(mongo_uri, db, migrations, background_inline=True) as kit,
        pytest.raises(BackgroundPendingError) as raised,
    ):
        kit.runs.up()

    assert raised.value.context == {
        "migration": ORDERS,
        "waits_for": [{"migration": SPLIT_NAME, "status": "paused"}],
    }
