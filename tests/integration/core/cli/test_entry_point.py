"""The `migronaut` command end to end: JSON output and exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pymongo.database import Database

from migronaut_core.errors import (
    ChecksumMismatchError,
    ConfigInvalidError,
    ConnectionFailedError,
    MigrationFailedError,
)
from tests.support.cli import configure, migronaut
from tests.support.runner import write_migration

A, B = "20240101000000_a", "20240102000000_b"


def test_create_up_status_down_round_trip(
    tmp_path: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    configure(tmp_path, mongo_uri, db.name)
    created = migronaut(tmp_path, "create", "add thing", "--json")
    assert created.returncode == 0, created.stderr
    name = json.loads(created.stdout)["name"]
    assert (tmp_path / "migrations" / f"{name}.py").is_file()

    status = migronaut(tmp_path, "status", "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout) == [
        {
            "name": name,
            "status": "pending",
            "applied_at": None,
            "checksum_ok": None,
            "kind": "regular",
            "description": "",
        }
    ]

    up = migronaut(tmp_path, "up", "--reason", "first deploy")
    assert up.returncode == 0, up.stderr
    assert f"applied    {name}" in up.stdout
    assert "created_at_1" in db.items.index_information()

    rows = json.loads(migronaut(tmp_path, "status", "--json").stdout)
    assert rows[0]["status"] == "applied"
    assert rows[0]["checksum_ok"] is True

    human = migronaut(tmp_path, "status")
    assert name in human.stdout and "applied" in human.stdout

    down = migronaut(tmp_path, "down", "--json")
    assert down.returncode == 0, down.stderr
    assert json.loads(down.stdout)["migrations"][0]["status"] == "reverted"
    assert "created_at_1" not in db.items.index_information()


def test_exit_codes_for_failures(
    tmp_path: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    configure(tmp_path, mongo_uri, db.name)
    migrations = tmp_path / "migrations"
    path = write_migration(migrations, A)
    assert migronaut(tmp_path, "up").returncode == 0
    path.write_text(path.read_text() + "# changed\n")
    mismatch = migronaut(tmp_path, "up", "--json")
    assert mismatch.returncode == ChecksumMismatchError.exit_code
    assert json.loads(mismatch.stdout)["error"]["code"] == "CHECKSUM_MISMATCH"

    write_migration(migrations, B, "def up(ctx):\n    raise ValueError('x')\n")
    failed = migronaut(tmp_path, "up", "--allow-checksum-mismatch")
    assert failed.returncode == MigrationFailedError.exit_code
    assert "MigrationFailedError" in failed.stderr


def test_bad_config_and_unreachable_server(tmp_path: Path) -> None:
    (tmp_path / "migronaut.toml").write_text('database = "x"\nlock_tll_seconds = 5\n')
    bad = migronaut(tmp_path, "status")
    assert bad.returncode == ConfigInvalidError.exit_code
    assert "lock_tll_seconds" in bad.stderr

    (tmp_path / "migronaut.toml").write_text(
        'uri = "mongodb://user:hunter2@127.0.0.1:1"\ndatabase = "x"\n'
        "server_selection_timeout_ms = 300\n"
    )
    down = migronaut(tmp_path, "status")
    assert down.returncode == ConnectionFailedError.exit_code
    assert "ConnectionFailedError" in down.stderr
    assert "hunter2" not in down.stderr
