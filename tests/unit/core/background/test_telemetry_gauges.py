"""Gauges through the metrics sink and OpenTelemetry: status series, readings, throttle state."""

from __future__ import annotations

import pytest

from migronaut_core.background.spec import AdaptiveSettings
from migronaut_core.background.states import STATUSES
from migronaut_core.background.telemetry import MigrationReadings, Telemetry
from migronaut_core.background.throttle import Throttle
from migronaut_core.background.throttle.adaptive import AdaptiveController
from tests.support.telemetry import Captured, RecordingSink

NAME = "migronaut.background.name"


def readings(status: str, **changes: float) -> MigrationReadings:
    values: dict[str, float] = {
        "done": 1_200,
        "remaining": 800,
        "failed_documents": 3,
        "rate": 240.5,
        "lanes": 2,
        "last_progress": 1_790_000_000.0,
    }
    values.update(changes)
    return MigrationReadings(
        migration="m1",
        collection="users",
        status=status,
        statuses=STATUSES,
        done=int(values["done"]),
        remaining=int(values["remaining"]),
        failed_documents=int(values["failed_documents"]),
        rate=values["rate"],
        lanes=int(values["lanes"]),
        held=status == "running" and bool(changes.get("held")),
        window_wait=status == "running" and bool(changes.get("window_wait")),
        last_progress=values["last_progress"],
    )


def test_a_migration_s_gauges_reach_the_sink_one_status_series_per_status() -> None:
    sink = RecordingSink()
    reporting = Telemetry(enabled=True, sink=sink)
    reporting.migration_observed(readings("running"))
    users = {"migration": "m1", "collection": "users"}
    status = [(value, tags) for kind, name, value, tags in sink.sent if name.endswith(".status")]
    assert status == [
        (1.0 if each == "running" else 0.0, {**users, "status": each}) for each in STATUSES
    ]
    others = {name: (value, tags) for kind, name, value, tags in sink.sent if kind == "gauge"}
    assert others["migronaut.migration.done"] == (1_200, users)
    assert others["migronaut.migration.remaining"] == (800, users)
    assert others["migronaut.migration.failed_documents"] == (3, users)
    assert others["migronaut.migration.rate"] == (240.5, users)
    assert others["migronaut.migration.lanes"] == (2, users)
    assert others["migronaut.migration.held"] == (0.0, users)
    assert others["migronaut.migration.window_wait"] == (0.0, users)
    assert others["migronaut.migration.last_progress"] == (1_790_000_000.0, users)
    assert {kind for kind, *_ in sink.sent} == {"gauge"}


def test_opentelemetry_observes_the_last_values_and_a_status_change_flips_its_series() -> None:
    captured = Captured()
    reporting = Telemetry(**captured.providers())
    reporting.migration_observed(readings("running", held=1))
    reporting.migration_observed(readings("paused", done=1_500, remaining=500))
    series = {
        point.attributes["migronaut.background.status"]: point.value
        for point in captured.points("migronaut.background.status", **{NAME: "m1"})
    }
    assert series == {each: (1.0 if each == "paused" else 0.0) for each in STATUSES}
    (done,) = captured.points("migronaut.background.done")
    assert (done.value, done.attributes) == (1_500, {NAME: "m1"})
    (held,) = captured.points("migronaut.background.held")
    assert held.value == 0.0  # paused: nothing holds
    assert captured.total("migronaut.background.remaining") == 500
    assert captured.total("migronaut.background.failed_documents") == 3


def test_a_window_wait_is_its_own_gauge_so_alerts_on_held_leave_it_alone() -> None:
    sink = RecordingSink()
    reporting = Telemetry(enabled=True, sink=sink)

    def last() -> dict[str, float]:
        names = ("migronaut.migration.held", "migronaut.migration.window_wait")
        return {name: sink.last_gauge(name) for name in names}

    reporting.hold_observed("m1", held=True, reason="window")
    assert last() == {"migronaut.migration.held": 0.0, "migronaut.migration.window_wait": 1.0}
    reporting.hold_observed("m1", held=True)  # a health signal past its hard limit
    assert last() == {"migronaut.migration.held": 1.0, "migronaut.migration.window_wait": 0.0}
    reporting.hold_observed("m1", held=False)
    assert last() == {"migronaut.migration.held": 0.0, "migronaut.migration.window_wait": 0.0}
    reporting.migration_observed(readings("running", window_wait=1))
    assert last()["migronaut.migration.window_wait"] == 1.0


def test_health_readings_are_sent_when_they_change_and_unread_signals_are_left_out() -> None:
    sink = RecordingSink()
    captured = Captured()
    reporting = Telemetry(**captured.providers(), sink=sink)
    first: dict[str, float | bool | None] = {
        "majority_lag_ms": 40,
        "cache_dirty": 0.05,
        "flow_control": False,
        "oplog_window_s": None,
    }
    reporting.health_read("m1", first)
    reporting.health_read("m1", dict(first))  # the probe's cached reading again: nothing sent
    reporting.health_read("m1", {**first, "majority_lag_ms": 900})
    lags = [v for _, name, v, tags in sink.sent if tags.get("signal") == "majority_lag_ms"]
    assert lags == [40.0, 900.0]
    assert {tags["signal"] for *_, tags in sink.sent} == {
        "majority_lag_ms",
        "cache_dirty",
        "flow_control",
    }
    assert sink.last_gauge("migronaut.health.reading", signal="flow_control") == 0.0
    (point,) = captured.points(
        "migronaut.background.health.reading", **{"migronaut.background.signal": "majority_lag_ms"}
    )
    assert point.value == 900.0


def test_the_adaptive_throttle_reports_its_batch_size_and_pause_when_they_change() -> None:
    sink = RecordingSink()
    settings = AdaptiveSettings(min_batch_size=50, max_batch_size=500, increase=50)
    throttle = Throttle(
        "m1",
        adaptive=AdaptiveController(settings, {"batch_size": 400}, report_interval_s=0),
        group="shard01",
        telemetry=Telemetry(enabled=True, sink=sink),
    )
    throttle.after_batch(5_000.0)  # slower than the target: halved
    assert sink.last_gauge("migronaut.throttle.batch_size", shard="shard01") == 200
    assert sink.last_gauge("migronaut.throttle.pause_ms", shard="shard01") == 0
    throttle.after_batch(10.0)  # fast: grows
    assert sink.last_gauge("migronaut.throttle.batch_size", shard="shard01") == 250


def test_a_sink_without_gauge_is_told_once_and_still_gets_its_counters(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class CountersOnly:
        def __init__(self) -> None:
            self.names: list[str] = []

        def incr(self, name: str, count: int, tags: object) -> None:
            self.names.append(name)

        def timing(self, name: str, milliseconds: float, tags: object) -> None:
            self.names.append(name)

    old = CountersOnly()
    reporting = Telemetry(enabled=True, sink=old)  # type: ignore[arg-type]
    reporting.migration_observed(readings("running"))
    reporting.migration_observed(readings("running"))
    reporting.lease_claimed("m1")
    assert old.names == ["migronaut.lease.claimed"]
    told = [r for r in caplog.records if "has no gauge" in r.getMessage()]
    assert len(told) == 1
    assert "CountersOnly" in told[0].getMessage()


def test_disabled_telemetry_keeps_no_gauges() -> None:
    sink = RecordingSink()
    captured = Captured()
    off = Telemetry(**captured.providers(), enabled=False, sink=sink)
    off.migration_observed(readings("failed"))
    off.health_read("m1", {"majority_lag_ms": 5})
    assert sink.sent == []
    assert captured.metric_names() == set()


def test_due_answers_once_per_interval_and_migration() -> None:
    reporting = Telemetry(enabled=True, sink=RecordingSink())
    assert reporting.due("m1", 3_600)
    assert not reporting.due("m1", 3_600)  # the lanes' next lease end, within the hour
    assert reporting.due("m2", 3_600)
    assert reporting.due("m1", 0)
