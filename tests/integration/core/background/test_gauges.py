"""A migration's gauges from real runs: what a recording sink and OpenTelemetry were told.

The values asserted are what alerts and dashboards rely on (docs/monitoring/):
one status series per status, done and remaining against the real document
count, failed documents, lanes and the last progress's time.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core.background.states import STATUSES
from migronaut_core.background.throttle import HealthReading
from migronaut_core.background.warn_once import Warn
from migronaut_core.errors import BackgroundFailedError
from tests.support import kit_json
from tests.support.background import (
    SPLIT_NAME,
    make_kit,
    seed_users,
    wait_until,
    write_background,
)
from tests.support.telemetry import Captured, RecordingSink

NAME = "migronaut.background.name"
USERS = {"migration": SPLIT_NAME, "collection": "users"}


def status_series(sink: RecordingSink) -> dict[str, float | None]:
    """The last value of each status series."""
    return {
        status: sink.last_gauge("migronaut.migration.status", status=status) for status in STATUSES
    }


def gauges_sent(sink: RecordingSink) -> list[tuple[str, float, dict[str, str]]]:
    return [(name, value, tags) for kind, name, value, tags in sink.sent if kind == "gauge"]


def test_a_run_reports_its_status_done_remaining_and_rate_as_gauges(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    count = 3_000
    seed_users(db, count)
    migrations = tmp_path / "migrations"
    write_background(migrations, batch_size=200, max_parallel=2)
    sink = RecordingSink()
    captured = Captured()
    with make_kit(mongo_uri, db, migrations, metrics_sink=sink, **captured.providers()) as kit:
        kit.runs.up()
        view = kit_json.run(kit, SPLIT_NAME, concurrency=2)
    assert view["status"] == "completed"
    assert db.users.count_documents({"_v": 2}) == count

    running = [
        index
        for index, (name, value, tags) in enumerate(gauges_sent(sink))
        if name == "migronaut.migration.status" and tags["status"] == "running" and value == 1
    ]
    assert running, "no coordinator step reported the migration running"
    first_step = gauges_sent(sink)[running[0] :]
    done = next(value for name, value, _ in first_step if name == "migronaut.migration.done")
    left = next(value for name, value, _ in first_step if name == "migronaut.migration.remaining")
    assert left > 0
    assert done + left == count  # the plan's estimate of a small collection is its count
    # The lanes report progress as they record it, not only the coordinator's steps
    # (which this driver makes only before and after the lanes' pass).
    done_values = {value for name, value, _ in gauges_sent(sink) if name.endswith(".done")}
    assert any(0 < value < count for value in done_values), sorted(done_values)

    assert status_series(sink) == {status: float(status == "completed") for status in STATUSES}
    assert sink.last_gauge("migronaut.migration.done") == count
    assert sink.last_gauge("migronaut.migration.remaining") == 0
    assert sink.last_gauge("migronaut.migration.failed_documents") == 0
    assert sink.last_gauge("migronaut.migration.lanes") == 0
    assert sink.last_gauge("migronaut.migration.held") == 0
    rate = sink.last_gauge("migronaut.migration.rate")
    assert rate is not None and rate > 0
    last_progress = sink.last_gauge("migronaut.migration.last_progress")
    assert last_progress is not None and abs(time.time() - last_progress) < 120
    cache_used = sink.last_gauge("migronaut.health.reading", signal="cache_used")
    assert cache_used is not None and 0 <= cache_used <= 1  # the real server's reading
    for name, _value, tags in gauges_sent(sink):
        assert {key: tags[key] for key in USERS} == USERS, (name, tags)
        assert not any("First" in text or "Last" in text for text in tags.values()), tags

    status_of = {NAME: SPLIT_NAME, "migronaut.background.status": "completed"}
    (completed,) = captured.points("migronaut.background.status", **status_of)
    assert completed.value == 1
    assert captured.total("migronaut.background.done", **{NAME: SPLIT_NAME}) == count
    assert captured.total("migronaut.background.remaining", **{NAME: SPLIT_NAME}) == 0


def test_failed_documents_under_the_budget_are_counted(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    seed_users(db, 1_000)
    migrations = tmp_path / "migrations"
    write_background(
        migrations,
        body="""
        background = {"collection": "users", "from": 1, "to": 2, "batch_size": 100,
                      "max_document_errors": 5}

        def migrate(doc, ctx):
            if doc["n"] % 250 == 7:
                raise ValueError("no")
            return {**doc, "ok": True}
        """,
    )
    sink = RecordingSink()
    with make_kit(mongo_uri, db, migrations, metrics_sink=sink) as kit:
        kit.runs.up()
        assert kit_json.run(kit, SPLIT_NAME, concurrency=2)["status"] == "completed"
    assert sink.last_gauge("migronaut.migration.failed_documents") == 4
    assert sink.last_gauge("migronaut.migration.done") == 996


def test_a_migration_that_fails_is_reported_failed(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    seed_users(db, 500)
    migrations = tmp_path / "migrations"
    write_background(
        migrations,
        body="""
        background = {"collection": "users", "from": 1, "to": 2, "batch_size": 50,
                      "max_document_errors": 2}

        def migrate(doc, ctx):
            if doc["n"] % 10 == 0:
                raise KeyError("no")
            return {**doc, "ok": True}
        """,
    )
    failing = RecordingSink()
    with make_kit(mongo_uri, db, migrations, metrics_sink=failing) as kit:
        kit.runs.up()
        with pytest.raises(BackgroundFailedError):
            kit.background.run(SPLIT_NAME, concurrency=1)
    assert status_series(failing) == {status: float(status == "failed") for status in STATUSES}
    failed_documents = failing.last_gauge("migronaut.migration.failed_documents")
    assert failed_documents is not None and failed_documents > 2


def test_a_pause_is_reported_by_the_control_itself(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    seed_users(db, 2_000)
    migrations = tmp_path / "migrations"
    write_background(migrations, batch_size=100, max_parallel=2)
    sink = RecordingSink()
    with make_kit(mongo_uri, db, migrations, metrics_sink=sink) as kit:
        kit.runs.up()
        kit.background.run(SPLIT_NAME, concurrency=1, slice_ms=100, until_done=False)
        before = len(sink.sent)
        assert kit.background.control(SPLIT_NAME, "pause").applied == "changed"
    assert len(sink.sent) > before
    assert status_series(sink) == {status: float(status == "paused") for status in STATUSES}
    assert sink.last_gauge("migronaut.migration.lanes") == 0


HEALTHY = HealthReading(
    flow_control_lagged=False,
    majority_lag_ms=0,
    cache_dirty_fraction=0.01,
    cache_used_fraction=0.5,
    write_tickets_available_fraction=1.0,
    queued_operations=0,
)


class Readings:
    """An injected health probe: says what the test sets."""

    def __init__(self) -> None:
        self.reading = HEALTHY

    def read(self, warn: Warn | None = None) -> HealthReading:
        return self.reading


def test_a_hold_on_a_health_signal_is_reported_with_the_signal_s_reading(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    seed_users(db, 2_000)
    migrations = tmp_path / "migrations"
    write_background(migrations, batch_size=50, max_parallel=2)
    probe = Readings()
    sink = RecordingSink()
    batches: list[int] = []
    with make_kit(mongo_uri, db, migrations, metrics_sink=sink) as kit:
        kit._runtime.throttles.use_health_probe(probe)
        kit.runs.up()

        def on_batch(event: str, payload: dict[str, Any]) -> None:
            batches.append(1)
            if len(batches) == 5:  # the cache fills mid-run: the lanes hold
                probe.reading = dataclasses.replace(HEALTHY, cache_used_fraction=0.97)

        kit.background.on("background:batch", on_batch)
        runner = threading.Thread(target=lambda: kit.background.run(SPLIT_NAME, concurrency=2))
        runner.start()
        try:
            wait_until(
                lambda: sink.last_gauge("migronaut.migration.held") == 1,
                timeout=30,
                what="a coordinator step to report the hold",
            )
            held_reading = sink.last_gauge("migronaut.health.reading", signal="cache_used")
            held_status = status_series(sink)
        finally:
            probe.reading = HEALTHY
            runner.join(timeout=60)
    assert not runner.is_alive()
    assert held_reading == 0.97
    assert held_status["running"] == 1
    assert sink.last_gauge("migronaut.migration.held") == 0
    assert sink.last_gauge("migronaut.health.reading", signal="cache_used") == 0.5
    assert status_series(sink)["completed"] == 1
