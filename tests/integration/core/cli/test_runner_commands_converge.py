"""`migronaut converge`: the version indexes of declared collections, from the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pymongo.database import Database

from migronaut_core.errors import ConfigInvalidError
from tests.support.cli import migronaut


def _configure(tmp_path: Path, mongo_uri: str, database: str, extra: str) -> None:
    (tmp_path / "migronaut.toml").write_text(
        f'uri = "{mongo_uri}"\ndatabase = "{database}"\nmigrations_dir = "migrations"\n{extra}'
    )


def test_converge_creates_then_finds_the_version_indexes(
    tmp_path: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    _configure(
        tmp_path,
        mongo_uri,
        db.name,
        'collections_dir = "collections"\n'
        "[collections.users]\n"
        'versioning = { field = "_v", revision_field = "rev" }\n'
        "[collections.audit]\n",
    )
    (tmp_path / "collections").mkdir()
    (tmp_path / "collections" / "orders.toml").write_text('versioning = { field = "schema" }\n')

    first = migronaut(tmp_path, "converge", "--json")
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    assert report["created"] == 2
    assert [(c["collection"], c["action"], c["index"]) for c in report["collections"]] == [
        ("users", "created", {"_v": 1, "_id": 1}),
        ("audit", "skipped", None),
        ("orders", "created", {"schema": 1, "_id": 1}),
    ]
    assert {"_v_1__id_1"} <= set(db.users.index_information())

    again = migronaut(tmp_path, "converge")
    assert again.returncode == 0, again.stderr
    assert "exists   users  _v_1__id_1  {_v: 1, _id: 1}" in again.stdout
    assert "skipped  audit  (no versioning declared)" in again.stdout
    assert again.stdout.strip().endswith("0 index(es) created")


def test_a_bad_definition_exits_with_the_config_error_code(
    tmp_path: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    _configure(tmp_path, mongo_uri, db.name, 'collections_dir = "missing"\n')
    result = migronaut(tmp_path, "converge", "--json")
    assert result.returncode == ConfigInvalidError.exit_code
    assert json.loads(result.stdout)["error"]["code"] == "CONFIG_INVALID"


def test_options_that_would_be_ignored_are_a_usage_error_before_anything_is_written(
    tmp_path: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    _configure(
        tmp_path,
        mongo_uri,
        db.name,
        '[collections.users]\nversioning = { field = "_v" }\n',
    )
    collection_without_log = migronaut(tmp_path, "converge", "--collection", "users")
    assert collection_without_log.returncode == 2
    assert "--collection needs --log" in collection_without_log.stderr
    assert "users" not in db.list_collection_names()

    for extra in (["--prune"], ["--reason", "tidy"], ["--requested-by", "ops"]):
        log_with_change = migronaut(tmp_path, "converge", "--log", *extra)
        assert log_with_change.returncode == 2, extra
        assert f"{extra[0]} cannot go with --log" in log_with_change.stderr
