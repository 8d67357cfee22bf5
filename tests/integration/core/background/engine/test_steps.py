"""A step migration's ``total`` in status: progress, percentage and ETA, in the view and the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pymongo.database import Database

from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, write_background
from tests.support.cli import configure, migronaut
from tests.support.steps import COUNTED_STEPS, UNCOUNTED_STEPS


def test_a_step_total_shows_as_done_of_total_with_a_percentage_and_an_eta(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    db.orders.insert_many([{"_id": i} for i in range(40)])
    migrations = tmp_path / "migrations"
    write_background(migrations, body=COUNTED_STEPS)
    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up()
        kit.background.coordinate(SPLIT_NAME)
        kit.background.run_slice(SPLIT_NAME, slice_ms=100)
        kit.background.run_slice(SPLIT_NAME, slice_ms=100)
        view = kit_json.status(kit, SPLIT_NAME)
    assert view["status"] == "running"
    assert view["progress"]["done"] == 20
    assert view["progress"]["estimate"] == 40
    assert view["progress"]["percent"] == 50.0
    assert view["progress"]["source"] == "step"
    assert view["eta_seconds"] is not None
    assert view["eta_seconds"] > 0

    configure(tmp_path, mongo_uri, db.name)
    shown = migronaut(tmp_path, "background", "status")
    assert shown.returncode == 0, shown.stderr
    row = next(line for line in shown.stdout.splitlines() if line.startswith(SPLIT_NAME))
    assert "20/40" in row.split()
    assert "50.0%" in row.split()


def test_without_a_total_a_step_migration_has_no_percentage_until_it_completes(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    db.orders.insert_many([{"_id": i} for i in range(20)])
    migrations = tmp_path / "migrations"
    write_background(migrations, body=UNCOUNTED_STEPS)
    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up()
        kit.background.coordinate(SPLIT_NAME)
        kit.background.run_slice(SPLIT_NAME, slice_ms=100)
        running = kit_json.status(kit, SPLIT_NAME)
        done = kit_json.run(kit, SPLIT_NAME)
    assert running["progress"]["percent"] is None
    assert running["progress"]["source"] == "plan"
    assert done["status"] == "completed"
    assert done["progress"]["percent"] == 100.0
