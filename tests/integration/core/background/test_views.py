"""The live ETA range in a running migration's status: its own rate, windows counted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core import Migronaut
from migronaut_core.cli.output import _eta_text, print_views
from migronaut_core.windows import parse_windows, seconds_to_work
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background

#: A Monday at noon UTC; the target's window opens at 22:00 and closes at 06:00.
NOON = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NIGHTLY = [{"from": "22:00", "to": "06:00"}]


def _half_done(kit: Migronaut) -> None:
    """Plan the pass and work one short slice of it: running, part done."""
    kit.runs.up()
    assert kit.background.coordinate(SPLIT_NAME).next == "process"
    kit.background.run_slice(SPLIT_NAME, slice_ms=300)


def test_a_running_pass_shows_its_eta_as_a_range_around_the_plain_figure(
    kit: Migronaut,
    db: Database[dict[str, Any]],
    migrations: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed_users(db, 3_000)
    write_background(migrations, batch_size=50, max_parallel=1, per_document_seconds=0.002)
    _half_done(kit)

    view = kit.background.status(SPLIT_NAME)

    assert view is not None and view.status == "running"
    assert 0 < view.progress.done < view.progress.estimate
    assert view.eta_seconds is not None and view.eta_range is not None
    eta = view.eta_range
    assert eta.low_seconds is not None and eta.seconds is not None
    assert eta.high_seconds is not None
    assert eta.low_seconds < eta.seconds < eta.high_seconds
    # Without windows the expected figure is the plain one (same rate, same rest).
    assert abs(eta.seconds - view.eta_seconds) <= max(1.0, 0.2 * view.eta_seconds)
    shown = kit_json.status(kit, SPLIT_NAME)
    assert set(shown["eta_range"]) == {"low_seconds", "seconds", "high_seconds"}
    # The CLI's table shows the range beside the expected figure.
    print_views([shown])
    header, row = capsys.readouterr().out.splitlines()
    column = header.index("ETA RANGE")
    low, high = row[column - 2 : column + len("ETA RANGE")].strip().split("-")
    assert (low, high) == (_eta_text(eta.low_seconds), _eta_text(eta.high_seconds))


def test_the_live_range_counts_only_open_time_and_waits_for_the_next_window(
    mongo_uri: str, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 3_000)
    write_background(migrations, batch_size=50, max_parallel=1, per_document_seconds=0.002)
    with make_kit(mongo_uri, db, migrations) as kit:
        _half_done(kit)
    # Planned a day before noon: 8 h of it were open. Read at noon, closed till 22:00.
    db.migronaut_background.update_one(
        {"_id": SPLIT_NAME}, {"$set": {"pass_started_at": NOON - timedelta(days=1)}}
    )
    with make_kit(mongo_uri, db, migrations, background_windows=NIGHTLY) as kit:
        kit._runtime.wall_clock = lambda: NOON
        view = kit.background.status(SPLIT_NAME)

    assert view is not None and view.eta_range is not None
    done, left = view.progress.done, view.progress.estimate - view.progress.done
    rate = done / (8 * 3600)
    nights = parse_windows(NIGHTLY)
    expected = seconds_to_work(nights, NOON, left, lambda _: rate)
    assert expected is not None and expected > 10 * 3600  # nothing before 22:00
    assert view.eta_range.seconds == round(expected, 1)
    assert view.window is not None and view.window.open is False


def test_a_finished_or_paused_migration_has_no_range(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 200)
    write_background(migrations)
    kit.runs.up()
    kit.background.run(SPLIT_NAME)
    view = kit.background.status(SPLIT_NAME)
    assert view is not None and view.status == "completed" and view.eta_range is None
    assert "eta_range" not in view.to_dict()
