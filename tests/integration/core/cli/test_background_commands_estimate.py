"""``background estimate``, ``dry-run --estimate`` and ``up --plan --estimate``: the table
and the JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pymongo.database import Database

from tests.support.background import SPLIT_NAME, seed_users, write_background
from tests.support.cli import configure, migronaut


def test_the_cli_prints_the_estimate_as_a_table_and_as_json(
    tmp_path: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    configure(tmp_path, mongo_uri, db.name)
    write_background(tmp_path / "migrations")
    seed_users(db, 60)

    shown = migronaut(tmp_path, "background", "estimate", SPLIT_NAME, "--sample", "20")
    assert shown.returncode == 0, shown.stderr
    assert "documents to migrate" in shown.stdout and "60" in shown.stdout
    assert "duration" in shown.stdout and "nothing written" in shown.stdout

    as_json = migronaut(
        tmp_path, "background", "estimate", SPLIT_NAME, "--sample", "20", "--lanes", "1", "--json"
    )
    assert as_json.returncode == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    assert data["documents"] == 60 and data["lanes"] == 1
    assert data["costs"]["documents"] == 20
    assert data["eta"]["low_seconds"] <= data["eta"]["seconds"] <= data["eta"]["high_seconds"]

    refused = migronaut(tmp_path, "background", "estimate", SPLIT_NAME, "--sample", "3", "--json")
    assert refused.returncode != 0
    assert "CONFIG_INVALID" in refused.stdout + refused.stderr


def test_a_dry_run_and_a_plan_carry_the_estimate_when_asked(
    tmp_path: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    configure(tmp_path, mongo_uri, db.name)
    write_background(tmp_path / "migrations")
    seed_users(db, 40)

    dry = migronaut(tmp_path, "background", "dry-run", SPLIT_NAME, "--estimate", "--json")
    assert dry.returncode == 0, dry.stderr
    data = json.loads(dry.stdout)
    assert data["totals"]["documents"] == 20 and data["pass_estimate"]["documents"] == 40
    shown = migronaut(tmp_path, "background", "dry-run", SPLIT_NAME, "--estimate")
    assert "estimate of the whole pass" in shown.stdout and "duration" in shown.stdout
    plain = json.loads(migronaut(tmp_path, "background", "dry-run", SPLIT_NAME, "--json").stdout)
    assert "pass_estimate" not in plain and plain["estimate"] == 40

    plan = migronaut(tmp_path, "up", "--plan", "--estimate", "--json")
    assert plan.returncode == 0, plan.stderr
    planned = json.loads(plan.stdout)
    assert planned["estimates"][SPLIT_NAME]["documents"] == 40
    assert db.migronaut_background.count_documents({}) == 0  # a plan registers nothing
    table = migronaut(tmp_path, "up", "--plan", "--estimate")
    assert "register" in table.stdout and "documents to migrate" in table.stdout
    assert "estimates" not in json.loads(migronaut(tmp_path, "up", "--plan", "--json").stdout)


def test_a_plan_says_why_a_step_migration_is_not_estimated(
    tmp_path: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    configure(tmp_path, mongo_uri, db.name)
    write_background(
        tmp_path / "migrations",
        body='background = {"mode": "step", "from": 1, "to": 2}\n\n\n'
        "def step(ctx):\n    return {'done': True}\n",
    )
    table = migronaut(tmp_path, "up", "--plan", "--estimate")
    assert table.returncode == 0, table.stderr
    assert "not estimated: CONFIG_INVALID" in table.stdout
    planned = json.loads(migronaut(tmp_path, "up", "--plan", "--estimate", "--json").stdout)
    assert planned["estimates"][SPLIT_NAME]["code"] == "CONFIG_INVALID"
