"""The target-wide brake through the kit and the CLI: set, read, release, logged, checked.

How lanes honour it, in three processes, is
``tests/integration/core/background/throttle/test_budget_processes.py``.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core import Migronaut
from migronaut_core.background.throttle import BRAKE_SIGNAL
from migronaut_core.errors import ConfigInvalidError
from tests.support.background import SPLIT_NAME, seed_users, write_background
from tests.support.cli import configure, migronaut


def test_a_brake_is_set_once_for_the_target_read_back_and_logged(kit: Migronaut) -> None:
    until = datetime.now(UTC) + timedelta(hours=2)
    view = kit.background.brake("incident 7", until=until, requested_by="oncall")
    assert (view.on, view.changed, view.reason, view.requested_by) == (
        True,
        True,
        "incident 7",
        "oncall",
    )
    assert view.until is not None and abs(view.until - until) < timedelta(milliseconds=1)
    again = kit.background.brake("still investigating", requested_by="oncall")
    assert again.on and not again.changed
    status = kit.background.brake_status()
    assert status.on and status.reason == "still investigating" and status.until is None
    assert kit.background.release(requested_by="oncall", reason="fixed").changed
    assert not kit.background.release().changed
    assert not kit.background.brake_status().on
    log = [entry.to_dict() for entry in kit.background.brake_log()]
    assert [(e["action"], e.get("reason")) for e in log] == [
        ("brake", "incident 7"),
        ("brake", "still investigating"),
        ("release", "fixed"),
    ]
    assert log[0]["until"].startswith(until.strftime("%Y-%m-%dT%H:%M"))
    assert all(e["requested_by"] == "oncall" for e in log)


def test_the_requester_defaults_to_the_os_user(kit: Migronaut) -> None:
    assert kit.background.brake("maintenance").requested_by


@pytest.mark.parametrize(
    ("reason", "until", "key"),
    [
        ("", None, "reason"),
        ("r", datetime.now(UTC) - timedelta(seconds=1), "until"),
        ("r", datetime(2099, 1, 1), "until"),  # no time zone
    ],
)
def test_a_bad_brake_is_a_typed_error_and_writes_nothing(
    kit: Migronaut, reason: str, until: datetime | None, key: str
) -> None:
    with pytest.raises(ConfigInvalidError) as raised:
        kit.background.brake(reason, until=until)
    assert raised.value.context["key"] == key
    assert not kit.background.brake_status().on
    assert kit.background.brake_log() == []


def test_a_brake_ends_by_itself_at_its_until(kit: Migronaut) -> None:
    until = datetime.now(UTC) + timedelta(seconds=3)
    kit.background.brake("short", until=until)
    breach = kit._runtime.budget.brake_breach()
    assert breach is not None and breach.signal == BRAKE_SIGNAL
    time.sleep(max(0.0, (until - datetime.now(UTC)).total_seconds()) + 0.1)
    assert not kit.background.brake_status().on
    assert kit._runtime.budget.brake_breach() is None


def test_a_braked_run_holds_and_writes_nothing(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    write_background(migrations, batch_size=50, max_parallel=1)
    seed_users(db, 200)
    kit.runs.up()
    kit.background.brake("before the first batch")
    kit.background.coordinate(SPLIT_NAME)
    result = kit.background.run_slice(SPLIT_NAME)
    assert result.outcome == "held"
    assert result.held_by is not None and result.held_by.signal == BRAKE_SIGNAL
    assert db.users.count_documents({"_v": 2}) == 0
    view = kit.background.status(SPLIT_NAME)
    assert view is not None and view.held_by is not None and view.held_by.signal == "brake"
    kit.background.release()  # this kit's lanes read it afresh; others within a second
    assert kit.background.run_slice(SPLIT_NAME).outcome != "held"
    assert db.users.count_documents({"_v": 2}) > 0
    view = kit.background.status(SPLIT_NAME)
    assert view is not None and view.held_by is None


def test_the_cli_brakes_shows_and_releases(
    tmp_path: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    configure(tmp_path, mongo_uri, db.name)
    (tmp_path / "migrations").mkdir()
    braked = migronaut(
        tmp_path,
        "background",
        "brake",
        "--reason",
        "deploy freeze",
        "--until",
        "2099-01-01T00:00:00Z",
        "--requested-by",
        "cli-test",
        "--json",
    )
    assert braked.returncode == 0, braked.stderr
    assert json.loads(braked.stdout)["until"].startswith("2099-01-01T00:00:00")
    shown = migronaut(tmp_path, "background", "brake-status")
    assert "brake: ON (deploy freeze) by cli-test" in shown.stdout
    assert "until 2099-01-01" in shown.stdout
    status = migronaut(tmp_path, "background", "status")
    assert "brake: ON (deploy freeze)" in status.stdout
    released = migronaut(tmp_path, "background", "release", "--reason", "over")
    assert released.returncode == 0 and "brake released" in released.stdout
    logged = json.loads(migronaut(tmp_path, "background", "brake-status", "--json").stdout)
    assert logged["brake"] == {"on": False, "changed": False}
    assert [entry["action"] for entry in logged["log"]] == ["brake", "release"]
    bad = migronaut(tmp_path, "background", "brake", "--reason", "x", "--until", "tomorrow")
    assert bad.returncode == 2 and "until" in bad.stderr
    missing = migronaut(tmp_path, "background", "brake")
    assert missing.returncode != 0 and "--reason" in missing.stderr
