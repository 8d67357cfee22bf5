"""An update-pipeline migration through the CLI: ``create --background --update`` writes one
that runs as it is, and status names the mode of every migration."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pymongo.database import Database

from tests.support.background import write_background
from tests.support.cli import configure, migronaut

ITEMS = 1_500


def status_row(output: str, name: str) -> list[str]:
    """The cells of ``name``'s row in the human status table."""
    (line,) = [line for line in output.splitlines() if line.startswith(name)]
    return re.split(r"\s+", line.strip())


def test_the_update_template_runs_forward_and_back_and_status_says_update(
    tmp_path: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    configure(tmp_path, mongo_uri, db.name)
    created = migronaut(tmp_path, "create", "rename name", "--background", "--update", "--json")
    assert created.returncode == 0, created.stderr
    name = json.loads(created.stdout)["name"]
    db.items.insert_many([{"_id": i, "name": f"item {i}", "_v": 1} for i in range(ITEMS)])
    db.items.insert_one({"_id": ITEMS, "_v": 1})  # no name: the pipeline sets nothing
    db.items.create_index([("_v", 1), ("_id", 1)])

    up = migronaut(tmp_path, "up", "--json")
    assert up.returncode == 0, up.stderr
    (result,) = json.loads(up.stdout)["migrations"]
    assert result["details"]["mode"] == "update"
    pending = json.loads(migronaut(tmp_path, "background", "status", name, "--json").stdout)
    assert (pending["mode"], pending["runs_as"]) == ("update", "update")
    human = migronaut(tmp_path, "background", "status")
    assert human.stdout.splitlines()[0].split()[:3] == ["NAME", "STATUS", "MODE"]
    assert status_row(human.stdout, name)[1:3] == ["pending", "update"]

    run = migronaut(tmp_path, "background", "run", name, "--json")
    assert run.returncode == 0, run.stderr
    view = json.loads(run.stdout)
    assert (view["status"], view["runs_as"]) == ("completed", "update")
    assert view["totals"]["migrated"] == ITEMS + 1
    assert db.items.count_documents({"_v": 2, "name": {"$exists": False}}) == ITEMS + 1
    assert db.items.find_one({"_id": 7}) == {"_id": 7, "full_name": "item 7", "_v": 2}
    assert db.items.find_one({"_id": ITEMS}) == {"_id": ITEMS, "_v": 2}

    down = migronaut(tmp_path, "down", "--json")
    assert down.returncode == 0, down.stderr
    back = migronaut(tmp_path, "background", "run", name, "--json")
    assert back.returncode == 0, back.stderr
    reverted = json.loads(back.stdout)
    assert (reverted["direction"], reverted["status"]) == ("revert", "completed")
    assert db.items.find_one({"_id": 7}) == {"_id": 7, "name": "item 7", "_v": 1}
    assert db.items.count_documents({"_v": 1, "full_name": {"$exists": False}}) == ITEMS + 1


def test_status_names_python_and_step_migrations_too(
    tmp_path: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    configure(tmp_path, mongo_uri, db.name)
    migrations = tmp_path / "migrations"
    write_background(migrations)
    (migrations / "20240102000000_steps.py").write_text(
        'background = {"mode": "step", "from": 1, "to": 2}\n\n'
        "def step(ctx):\n"
        '    return {"checkpoint": None, "done": True}\n'
    )
    assert migronaut(tmp_path, "up").returncode == 0
    views = json.loads(migronaut(tmp_path, "background", "status", "--json").stdout)
    assert [(v["mode"], v["runs_as"]) for v in views] == [
        ("declarative", "python"),
        ("step", "step"),
    ]
    human = migronaut(tmp_path, "background", "status").stdout
    assert [status_row(human, v["name"])[2] for v in views] == ["python", "step"]
