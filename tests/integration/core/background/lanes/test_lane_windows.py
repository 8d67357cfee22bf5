"""Maintenance windows on a real server: a lane outside every window stops at a batch
boundary, releases and holds; it resumes when one opens; a window's rate paces it.

Time moves through the one seam, the runtime's ``wall_clock``: no test sleeps for hours.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core import Migronaut
from migronaut_core.background.coordinator import stalled_for
from migronaut_core.background.store.lanes import read_lanes
from migronaut_core.cli import main
from migronaut_core.cli.output import print_views
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background

#: A Monday; the window below is open 01:00 to 05:00 UTC every day.
INSIDE = datetime(2026, 6, 1, 2, 0, tzinfo=UTC)
OUTSIDE = datetime(2026, 6, 1, 6, 0, tzinfo=UTC)
NEXT_OPENING = datetime(2026, 6, 2, 1, 0, tzinfo=UTC)
NIGHTLY = '"windows": [{"from": "01:00", "to": "05:00"}],'


class WallClock:
    """The runtime's wall clock, set by the test; thread-safe enough for one writer."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def _kit(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path, clock: WallClock, **config: Any
) -> Migronaut:
    kit = make_kit(mongo_uri, db, tmp_path / "migrations", **config)
    kit._runtime.wall_clock = clock
    return kit


@pytest.mark.parametrize("update", [False, True], ids=["python", "update-pipeline"])
def test_a_lane_stops_at_a_batch_boundary_when_the_window_closes_and_resumes_when_one_opens(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path, update: bool
) -> None:
    seed_users(db, 1_000)
    write_background(
        tmp_path / "migrations", batch_size=50, max_parallel=2, extra=NIGHTLY, update=update
    )
    clock = WallClock(INSIDE)
    throttles: list[dict[str, Any]] = []
    with _kit(mongo_uri, db, tmp_path, clock) as kit:
        kit.runs.up()
        kit.background.coordinate(SPLIT_NAME)
        batches: list[int] = []

        def on_batch(event: str, payload: dict[str, Any]) -> None:
            batches.append(payload["counters"]["migrated"])
            if len(batches) == 3:
                clock.now = OUTSIDE  # the window closes while the lane works

        kit.background.on("background:batch", on_batch)
        kit.background.on("background:throttle", lambda event, p: throttles.append(p))
        first = kit.background.run_slice(SPLIT_NAME, slice_ms=60_000)
        outside = kit.background.run_slice(SPLIT_NAME, slice_ms=60_000)
        view = kit.background.status(SPLIT_NAME)
        snapshot = _snapshot(kit)
        stalled = stalled_for(kit._runtime, _state(db), now=OUTSIDE + timedelta(hours=18))
        written_outside = db.users.count_documents({"_v": 2})
        clock.now = NEXT_OPENING
        final = kit.background.run(SPLIT_NAME, concurrency=2)
    assert first.outcome == "held"
    assert first.held_until == NEXT_OPENING
    assert first.held_by is None
    # Three whole batches, nothing of the next; an update-pipeline lane finishes the one
    # batch it may have had in flight beside the third (two update_many in flight).
    in_flight = 50 if update else 0
    assert 150 <= first.counters["migrated"] <= 150 + in_flight
    assert first.retry_after_ms == 300_000  # looks again within 5 minutes, whatever the wait
    assert outside.outcome == "held"
    assert outside.counters == {}  # claimed nothing
    assert written_outside == first.counters["migrated"]
    assert view is not None
    assert view.live_leases == 0
    assert view.held_by is not None
    assert (view.held_by.reason, view.held_by.until) == ("window", NEXT_OPENING)
    assert snapshot.held and not snapshot.live_lease and snapshot.open_partitions
    assert stalled is None  # waiting for a window is no stall
    assert final is not None
    assert final.status == "completed"
    assert final.held_by is None
    assert final.window is None  # a finished migration has no schedule to show
    assert db.users.count_documents({"_v": 2, "first": {"$exists": True}}) == 1_000
    assert "hold" not in _state(db)
    assert [p["reason"] for p in throttles].count("held") == 1
    assert [p["reason"] for p in throttles].count("released") == 1
    assert json.dumps(throttles)  # events stay JSON-safe


def test_the_status_and_the_cli_say_waiting_for_window_until(
    mongo_uri: str,
    db: Database[dict[str, Any]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed_users(db, 100)
    write_background(tmp_path / "migrations", batch_size=50, max_parallel=2, extra=NIGHTLY)
    clock = WallClock(OUTSIDE)
    with _kit(mongo_uri, db, tmp_path, clock) as kit:
        kit.runs.up()
        kit.background.coordinate(SPLIT_NAME)
        held = kit.background.run_slice(SPLIT_NAME)
        view = kit.background.status(SPLIT_NAME)
        clock.now = INSIDE
        open_view = kit.background.status(SPLIT_NAME)
    assert held.outcome == "held"
    assert held.to_dict()["held_until"] == "2026-06-02T01:00:00+00:00"
    assert view is not None
    shown = view.to_dict()
    assert shown["held_by"]["reason"] == "window"
    assert shown["held_by"]["until"] == "2026-06-02T01:00:00+00:00"
    assert shown["held_by"]["text"] == "waiting for window until 2026-06-02 01:00 UTC"
    assert shown["window"]["source"] == "spec"
    assert shown["window"]["open"] is False
    assert shown["window"]["opens_at"] == "2026-06-02T01:00:00+00:00"
    assert shown["window"]["windows"] == [
        {
            "days": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"],
            "from": "01:00",
            "to": "05:00",
            "timezone": "UTC",
            "rate": 1.0,
        }
    ]
    assert json.loads(json.dumps(shown)) == shown
    capsys.readouterr()
    print_views([shown])
    row = capsys.readouterr().out.splitlines()[1]
    assert row.endswith("waiting for window until 2026-06-02 01:00 UTC")
    assert open_view is not None
    assert open_view.window is not None
    assert open_view.window.open
    assert open_view.window.closes_at == datetime(2026, 6, 1, 5, 0, tzinfo=UTC)
    assert open_view.window.rate == "full speed"


def test_the_targets_windows_apply_unless_the_migration_sets_its_own(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    seed_users(db, 100)
    target = {"background_windows": [{"days": ["sat", "sun"], "from": "00:00", "to": "24:00"}]}
    write_background(tmp_path / "migrations", batch_size=50, max_parallel=2)
    clock = WallClock(OUTSIDE)  # a Monday
    with _kit(mongo_uri, db, tmp_path, clock, **target) as kit:
        kit.runs.up()
        kit.background.coordinate(SPLIT_NAME)
        held = kit.background.run_slice(SPLIT_NAME)
        view = kit.background.status(SPLIT_NAME)
    assert held.outcome == "held"
    assert held.held_until == datetime(2026, 6, 6, tzinfo=UTC)
    assert view is not None and view.window is not None
    assert view.window.source == "target"
    write_background(tmp_path / "migrations", batch_size=50, max_parallel=2, extra='"windows": [],')
    db.drop_collection("migronaut_background")
    db.drop_collection("migronaut_background_partitions")
    db.drop_collection("migronaut_changelog")
    with _kit(mongo_uri, db, tmp_path, clock, **target) as kit:
        kit.runs.up()
        final = kit.background.run(SPLIT_NAME)
    assert final is not None
    assert final.status == "completed"  # its own empty list: always open
    assert final.window is None


def test_a_documents_per_second_window_caps_each_batch_at_a_seconds_share(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    seed_users(db, 120)
    paced = '"windows": [{"from": "01:00", "to": "05:00", "rate": "80/s"}],'
    write_background(tmp_path / "migrations", batch_size=50, max_parallel=2, extra=paced)
    with _kit(mongo_uri, db, tmp_path, WallClock(INSIDE)) as kit:
        kit.runs.up()
        sizes: list[int] = []
        kit.background.on("background:batch", lambda e, p: sizes.append(p["counters"]["scanned"]))
        final = kit.background.run(SPLIT_NAME)
    assert final is not None
    assert final.status == "completed"
    assert sum(sizes) == 120
    assert max(sizes) == 40  # 80 docs/s shared by max_parallel 2 lanes


def _state(db: Database[dict[str, Any]]) -> dict[str, Any]:
    state = db.migronaut_background.find_one({"_id": SPLIT_NAME})
    assert state is not None
    return state


def _snapshot(kit: Migronaut) -> Any:
    rt = kit._runtime
    state = _state(rt.db)
    return read_lanes(
        rt.db,
        kit.config.background_collections,
        SPLIT_NAME,
        generation=state["generation"],
        plan=state["plan"]["token"],
    )


def test_the_cli_status_prints_the_window_wait_on_the_real_clock(
    mongo_uri: str,
    db: Database[dict[str, Any]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed_users(db, 100)
    opens = (datetime.now(UTC) + timedelta(hours=2)).replace(second=0, microsecond=0)
    closes = opens + timedelta(hours=1)
    later = f'"windows": [{{"from": "{opens:%H:%M}", "to": "{closes:%H:%M}"}}],'
    migrations = tmp_path / "migrations"
    write_background(migrations, batch_size=50, max_parallel=2, extra=later)
    where = ["--uri", mongo_uri, "--database", db.name, "--migrations-dir", str(migrations)]
    assert main([*where, "up"]) == 0
    with make_kit(mongo_uri, db, migrations) as kit:
        kit.background.coordinate(SPLIT_NAME)
        assert kit.background.run_slice(SPLIT_NAME).outcome == "held"
    capsys.readouterr()
    assert main([*where, "background", "status"]) == 0
    row = capsys.readouterr().out.splitlines()[1]
    assert row.endswith(f"waiting for window until {opens:%Y-%m-%d %H:%M} UTC")
    assert main([*where, "background", "status", SPLIT_NAME, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["held_by"]["reason"] == "window"
    assert shown["window"]["open"] is False
    assert datetime.fromisoformat(shown["window"]["opens_at"]) == opens
    assert db.users.count_documents({"_v": 2}) == 0
