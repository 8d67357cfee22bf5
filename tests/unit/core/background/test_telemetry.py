"""The telemetry module alone: lag waits counted by the throttle, and telemetry turned off."""

from __future__ import annotations

import pytest

from migronaut_core.background import telemetry
from migronaut_core.background.backoff import Backoff
from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.telemetry import NO_TELEMETRY, Telemetry
from migronaut_core.background.throttle import Throttle, pacing
from migronaut_core.background.warn_once import Warn
from tests.support.telemetry import Captured, RecordingSink


class Lags:
    """Answers the lags it was given, then the last one forever."""

    def __init__(self, *lags: int | None) -> None:
        self.lags = list(lags)

    def lag_ms(self, warn: Warn | None = None) -> int | None:
        return self.lags.pop(0) if len(self.lags) > 1 else self.lags[0]


def test_a_wait_for_a_lagging_secondary_counts_once_with_reason_lag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pacing, "LAG_BACKOFF", Backoff(first=0.01, cap=0.02))
    captured = Captured()
    throttle = Throttle(
        "m1",
        max_lag_ms=100,
        lag_probe=Lags(900, 800, 700, 0),
        group="shard01",
        telemetry=Telemetry(**captured.providers()),
    )
    assert throttle.before_batch(CancelToken()) is False  # three looks, one wait
    assert throttle.before_batch(CancelToken()) is False  # no lag: nothing counted
    (point,) = captured.points("migronaut.background.throttled")
    assert point.value == 1
    assert point.attributes == {
        "migronaut.background.name": "m1",
        "migronaut.background.reason": "lag",
        "migronaut.background.shard": "shard01",
    }


def test_disabled_telemetry_reports_nothing_and_its_spans_still_run_their_body() -> None:
    assert telemetry.AVAILABLE
    assert not NO_TELEMETRY.enabled
    with NO_TELEMETRY.span("migronaut.background.slice", "m1") as span:
        span.set("migronaut.background.outcome", "exhausted")
        ran = True
    assert ran
    captured = Captured()
    off = Telemetry(**captured.providers(), enabled=False)
    off.leases_reclaimed("m1", 3)
    off.throttled("m1", "lag")
    with off.span("migronaut.background.coordinate", "m1"):
        pass
    assert captured.spans() == []
    assert captured.metric_names() == set()


def test_a_sink_gets_every_measurement_tagged_with_migration_and_collection() -> None:
    sink = RecordingSink()
    reporting = Telemetry(enabled=True, sink=sink)
    reporting.slice_ended("m1", "yielded", 12.5)  # before its collection is known
    reporting.collection_of("m1", "users")
    reporting.batch_written("m1", size=200, duration_ms=8.0, shard="s1")
    reporting.transaction_retried("m1", "transient")
    reporting.throttled("m1", "lag")
    reporting.lease_claimed("m1")
    reporting.leases_reclaimed("m1", 0)  # nothing reaped: nothing sent
    reporting.leases_reclaimed("m1", 2)
    reporting.lease_lost("m1")
    users = {"migration": "m1", "collection": "users"}
    assert sink.sent == [
        ("timing", "migronaut.slice.duration", 12.5, {"migration": "m1", "outcome": "yielded"}),
        ("timing", "migronaut.batch.duration", 8.0, {**users, "shard": "s1"}),
        ("incr", "migronaut.batch.documents", 200, {**users, "shard": "s1"}),
        ("incr", "migronaut.transaction.retries", 1, {**users, "reason": "transient"}),
        ("incr", "migronaut.throttled", 1, {**users, "reason": "lag"}),
        ("incr", "migronaut.lease.claimed", 1, users),
        ("incr", "migronaut.lease.reclaimed", 2, users),
        ("incr", "migronaut.lease.lost", 1, users),
    ]
    counted = {name for name, call in telemetry.SINK_METRICS.items() if call != "gauge"}
    assert {name for _, name, _, _ in sink.sent} == counted


def test_a_failing_sink_never_fails_the_caller_and_disabled_telemetry_sends_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    Telemetry(sink=RecordingSink(broken=True)).lease_claimed("m1")
    assert "the metrics sink failed on migronaut.lease.claimed: ConnectionError" in caplog.text
    silent = RecordingSink()
    off = Telemetry(enabled=False, sink=silent)
    off.lease_claimed("m1")
    off.slice_ended("m1", "exhausted", 1.0)
    assert silent.sent == []
    assert not off.enabled
