"""A finalize whose collMod the server refuses: a typed error, the state as it was."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core import Migronaut, PrivilegeMissingError
from tests.support.auth_server import AuthServer, auth_mongod
from tests.support.background import SPLIT_NAME, seed_users, write_background
from tests.support.validator import step, validation

DB = "finalize_privileges"
ROLE = "migrate_without_collmod"
COLLMOD = [{"resource": {"db": DB, "collection": "users"}, "actions": ["collMod"]}]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[AuthServer]:
    with auth_mongod(tmp_path / "auth-mongod") as server:
        yield server


@pytest.fixture
def limited_kit(server: AuthServer, migrations: Path) -> Iterator[Migronaut]:
    """A kit of a user whose custom role may read, write and index ``DB``, never collMod."""
    db = server.admin[DB]
    db.command("createRole", ROLE, privileges=[], roles=[{"role": "readWrite", "db": DB}])
    db.command("createUser", "migrator", pwd="migrator-secret", roles=[ROLE])
    uri = server.uri("migrator", "migrator-secret", source=DB)
    with Migronaut(uri=uri, database=DB, migrations_dir=str(migrations)) as kit:
        yield kit


def test_a_refused_collmod_names_the_action_and_leaves_the_state_as_it_was(
    server: AuthServer, limited_kit: Migronaut, migrations: Path
) -> None:
    db: Database[dict[str, Any]] = server.admin[DB]
    seed_users(db, 120)
    write_background(migrations, batch_size=50, extra='"validator": "version",')
    limited_kit.runs.up()
    with pytest.raises(PrivilegeMissingError) as refused:
        step(limited_kit, SPLIT_NAME)
    error = refused.value
    assert error.code == "PRIVILEGE_MISSING"
    assert error.context == {
        "action": "collMod",
        "namespace": f"{DB}.users",
        "migration": SPLIT_NAME,
    }
    assert f"collMod on {DB}.users" in error.message
    state = db.migronaut_background.find_one({"_id": SPLIT_NAME})
    assert state is not None
    assert (state["status"], state["phase"]) == ("running", "process")
    assert "validator" not in state
    assert "validator" not in validation(db, "users")
    assert db.users.count_documents({"_v": 2}) == 120  # the passes themselves were done

    db.command("grantPrivilegesToRole", ROLE, privileges=COLLMOD)
    assert limited_kit.background.coordinate(SPLIT_NAME).reason == "validator-soak"
    assert validation(db, "users")["validationAction"] == "warn"


def test_a_down_whose_restoring_collmod_is_refused_registers_no_revert(
    server: AuthServer, limited_kit: Migronaut, migrations: Path
) -> None:
    db: Database[dict[str, Any]] = server.admin[DB]
    db.command("grantPrivilegesToRole", ROLE, privileges=COLLMOD)
    seed_users(db, 40)
    write_background(migrations, extra='"validator": "version",')
    limited_kit.runs.up()
    assert step(limited_kit, SPLIT_NAME).reason == "validator-soak"
    assert step(limited_kit, SPLIT_NAME).status == "completed"
    db.command("revokePrivilegesFromRole", ROLE, privileges=COLLMOD)

    with pytest.raises(PrivilegeMissingError) as refused:
        limited_kit.runs.down()
    assert refused.value.context["action"] == "collMod"
    state = db.migronaut_background.find_one({"_id": SPLIT_NAME})
    assert state is not None
    assert (state["status"], state["direction"]) == ("completed", "forward")
    assert state["validator"]["phase"] == "error"
    assert validation(db, "users")["validationAction"] == "error"
    assert db.migronaut_changelog.find_one({"_id": SPLIT_NAME}) is not None  # still applied
