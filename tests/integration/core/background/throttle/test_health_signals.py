"""MongoDB health signals on a real server: the readings, a refused source, a lane's hold."""

from __future__ import annotations

import dataclasses
import logging
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.database import Database

from migronaut_core.background.throttle import (
    HealthReading,
    ServerHealthProbe,
    shared_health_probe,
)
from migronaut_core.background.warn_once import Warn
from migronaut_core.cli.output import print_views
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.background import wait_until as wait_for
from tests.support.throttle import Warnings

Client = MongoClient[dict[str, Any]]

HEALTHY = HealthReading(
    flow_control_lagged=False,
    majority_lag_ms=0,
    cache_dirty_fraction=0.01,
    cache_used_fraction=0.5,
    write_tickets_available_fraction=1.0,
    queued_operations=0,
    oplog_window_seconds=86_400.0,
    oplog_used_fraction=0.1,
)
#: The WiredTiger cache past its hard limit (95% used).
CACHE_FULL = dataclasses.replace(HEALTHY, cache_used_fraction=0.97)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Readings:
    """An injected health probe: says what the test sets, thread-safe."""

    def __init__(self, reading: HealthReading = HEALTHY) -> None:
        self.reading = reading

    def read(self, warn: Warn | None = None) -> HealthReading:
        return self.reading


@pytest.fixture
def own_client(mongo_uri: str) -> Iterator[tuple[Client, str]]:
    """A client of its own, with an appName no other test uses (for fail points)."""
    app_name = f"health-{uuid.uuid4().hex[:8]}"
    client: Client = MongoClient(mongo_uri, appname=app_name, tz_aware=True)
    yield client, app_name
    client.close()


@contextmanager
def fail_point(admin_client: Client, data: dict[str, Any]) -> Iterator[None]:
    """Switch ``failCommand`` on with ``data``; always switch it off again."""
    admin_client.admin.command("configureFailPoint", "failCommand", mode="alwaysOn", data=data)
    try:
        yield
    finally:
        admin_client.admin.command("configureFailPoint", "failCommand", mode="off")


# ─── The real signals ─────────────────────────────────────────────────────────


def test_the_server_reports_every_signal_it_has(
    own_client: tuple[Client, str], db: Database[dict[str, Any]]
) -> None:
    client, _ = own_client
    db.probe.insert_one({"_id": 1})  # the oplog's last entry is now later than its first
    probe = ServerHealthProbe(client)
    reading = probe.read()
    assert probe.skipped == {}
    assert reading.flow_control_lagged is False
    assert isinstance(reading.flow_control_target_rate, int)
    assert reading.flow_control_target_rate > 0
    assert reading.majority_lag_ms is not None
    assert 0 <= reading.majority_lag_ms < 30_000
    for fraction in (
        reading.cache_dirty_fraction,
        reading.cache_used_fraction,
        reading.write_tickets_available_fraction,
    ):
        assert fraction is not None
        assert 0.0 <= fraction <= 1.0
    assert reading.cache_used_fraction is not None
    assert reading.cache_dirty_fraction is not None
    assert reading.cache_dirty_fraction <= reading.cache_used_fraction
    assert reading.queued_operations is not None
    assert reading.queued_operations >= 0
    assert reading.oplog_window_seconds is not None
    assert reading.oplog_window_seconds > 0
    assert reading.oplog_used_fraction is not None
    assert 0.0 < reading.oplog_used_fraction <= 1.0


def test_the_reading_is_cached_for_its_interval_whatever_the_lanes(
    own_client: tuple[Client, str],
) -> None:
    client, _ = own_client
    clock = Clock()
    probe = ServerHealthProbe(client, clock=clock)
    readings: list[HealthReading] = []
    threads = [threading.Thread(target=lambda: readings.append(probe.read())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert probe.reads == 1
    assert len({id(reading) for reading in readings}) == 1
    clock.now += 0.9
    probe.read()
    assert probe.reads == 1
    clock.now += 0.2
    probe.read()
    assert probe.reads == 2


def test_one_probe_per_process_and_cluster_whatever_the_client(
    own_client: tuple[Client, str], mongo_client: Client
) -> None:
    client, _ = own_client
    probe = shared_health_probe(client)
    assert shared_health_probe(mongo_client) is probe  # same seeds and replica set
    assert probe.bound_to(mongo_client)
    assert shared_health_probe(client) is probe


def test_a_standalone_skips_the_replication_signals_once(standalone_uri: str) -> None:
    client: Client = MongoClient(standalone_uri, tz_aware=True)
    try:
        warnings = Warnings()
        clock = Clock()
        probe = ServerHealthProbe(client, clock=clock)
        reading = probe.read(warnings)
        assert probe.skipped == {"replication": "absent"}
        assert reading.cache_used_fraction is not None
        assert reading.majority_lag_ms is None
        assert reading.oplog_window_seconds is None
        clock.now += 11
        probe.read(warnings)
        assert warnings.said == ["health:absent:replication"]
    finally:
        client.close()


@pytest.mark.parametrize(
    ("command", "source", "gone"),
    [
        ("serverStatus", "server_status", "cache_used_fraction"),
        ("replSetGetStatus", "replication", "majority_lag_ms"),
    ],
)
def test_a_refused_source_is_reported_once_and_skipped(
    own_client: tuple[Client, str],
    mongo_client: Client,
    caplog: pytest.LogCaptureFixture,
    command: str,
    source: str,
    gone: str,
) -> None:
    client, app_name = own_client
    clock = Clock()
    probe = ServerHealthProbe(client, clock=clock)
    refused = {"failCommands": [command], "errorCode": 13, "appName": app_name}
    with caplog.at_level(logging.WARNING), fail_point(mongo_client, refused):
        first = probe.read()
        clock.now += 2
        second = probe.read()
    clock.now += 2
    after = probe.read()  # the privilege is back, but the source stays skipped
    assert probe.skipped == {source: "unauthorized"}
    assert getattr(first, gone) is None
    assert getattr(second, gone) is None
    assert getattr(after, gone) is None
    assert first.oplog_window_seconds is not None  # the other sources are still read
    said = [r for r in caplog.records if "clusterMonitor" in r.getMessage()]
    assert len(said) == 1
    assert command in said[0].getMessage()
    assert probe.reads == 3


# ─── A lane holds on a hard limit ─────────────────────────────────────────────

_COUNTING = """
background = {"collection": "users", "from": 1, "to": 2, "batch_size": 50, "max_parallel": 2}


def migrate(doc, ctx):
    doc["times"] = doc.get("times", 0) + 1
    return doc
"""


def test_lanes_hold_on_a_hard_limit_and_resume_when_it_clears(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    seed_users(db, 2_000)
    migrations = tmp_path / "migrations"
    write_background(migrations, body=_COUNTING)
    probe = Readings()
    throttles: list[dict[str, Any]] = []
    batches: list[int] = []
    with make_kit(mongo_uri, db, migrations) as kit:
        kit._runtime.throttles.use_health_probe(probe)
        kit.runs.up()

        def on_batch(event: str, payload: dict[str, Any]) -> None:
            batches.append(payload["counters"]["scanned"])
            if len(batches) == 5:
                probe.reading = CACHE_FULL  # mid-run: the lanes stop at their next batch

        kit.background.on("background:batch", on_batch)
        kit.background.on("background:throttle", lambda event, p: throttles.append(p))
        outcome: list[Any] = []
        runner = threading.Thread(
            target=lambda: outcome.append(kit.background.run(SPLIT_NAME, concurrency=2))
        )
        runner.start()
        try:
            held = wait_for(
                lambda: _held(kit), timeout=30, what="the status to name the held signal"
            )
            wait_for(lambda: _leases(kit) == 0, timeout=10, what="the lanes to release")
            written = len(batches)
            stalled = wait_for(lambda: _still(batches, written), timeout=10, what="no batch")
            view = kit.background.status(SPLIT_NAME)
            assert view is not None
            shown = view.to_dict()
        finally:
            probe.reading = HEALTHY
            runner.join(timeout=60)
    assert not runner.is_alive()
    assert stalled
    assert held.signal == "cache_used"
    assert held.reading == 0.97
    assert held.limit == 0.95
    assert shown["held_by"]["signal"] == "cache_used"
    assert shown["held_by"]["reading"] == 0.97
    assert shown["status"] == "running"
    assert 0 < shown["progress"]["done"] < 2_000
    final = outcome[0]
    assert final is not None
    assert final.status == "completed"
    assert final.held_by is None
    assert final.totals.get("migrated") == 2_000
    assert db.users.count_documents({"_v": 2, "times": 1}) == 2_000  # each exactly once
    reasons = [payload["reason"] for payload in throttles]
    assert reasons.count("held") == 1
    assert reasons.count("released") == 1
    assert throttles[reasons.index("held")]["signal"] == "cache_used"
    state = db.migronaut_background.find_one({"_id": SPLIT_NAME})
    assert state is not None
    assert "hold" not in state


def test_a_hold_longer_than_the_full_oplogs_window_warns_once(
    mongo_uri: str,
    db: Database[dict[str, Any]],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed_users(db, 200)
    migrations = tmp_path / "migrations"
    write_background(migrations, body=_COUNTING)
    short_oplog = dataclasses.replace(HEALTHY, oplog_window_seconds=120.0, oplog_used_fraction=1.0)
    with make_kit(mongo_uri, db, migrations) as kit:
        kit._runtime.throttles.use_health_probe(Readings(short_oplog))
        kit.runs.up()
        kit.background.coordinate(SPLIT_NAME)
        with caplog.at_level(logging.WARNING):
            first = kit.background.run_slice(SPLIT_NAME)
            second = kit.background.run_slice(SPLIT_NAME)
            third = kit.background.run_slice(SPLIT_NAME)
        view = kit.background.status(SPLIT_NAME)
    assert first.outcome == second.outcome == third.outcome == "held"
    assert first.held_by is not None
    assert first.held_by.signal == "oplog_window_s"
    assert first.retry_after_ms is not None
    assert first.counters == {}
    assert view is not None
    assert view.held_by is not None
    assert view.held_by.signal == "oplog_window_s"
    assert view.live_leases == 0
    assert db.users.count_documents({"_v": 2}) == 0
    fallbacks = [r for r in caplog.records if "fall back to a probe" in r.getMessage()]
    assert len(fallbacks) == 1
    holds = [r for r in caplog.records if "lanes hold" in r.getMessage()]
    assert len(holds) == 1
    capsys.readouterr()
    print_views([view.to_dict()])
    row = capsys.readouterr().out.splitlines()[1]
    assert row.endswith("held: oplog_window_s 120 (hard limit 3600)")


def _held(kit: Any) -> Any:
    view = kit.background.status(SPLIT_NAME)
    return None if view is None else view.held_by


def _leases(kit: Any) -> int:
    view = kit.background.status(SPLIT_NAME)
    return -1 if view is None else int(view.live_leases)


def _still(batches: list[int], written: int) -> bool:
    """True once 1.5 s passed with no batch written after ``written``."""
    threading.Event().wait(1.5)
    return len(batches) == written
