"""The telemetry module alone: lag waits counted by the throttle, and telemetry turned off."""

from __future__ import annotations

import pytest

from migronaut_core.background import telemetry
from migronaut_core.background.backoff import Backoff
from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.telemetry import NO_TELEMETRY, Telemetry
from migronaut_core.background.throttle import Throttle, pacing
from migronaut_core.background.warn_once import Warn
from tests.support.telemetry import Captured


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
