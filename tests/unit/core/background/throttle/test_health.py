"""MongoDB health signals: limits judged, soft slows a lane, hard stops it; readings injected."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from migronaut_core import HealthBreach, HoldView, SliceResult
from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.spec import (
    HEALTH_SIGNALS,
    AdaptiveSettings,
    HealthLimit,
    HealthSettings,
    read_stored,
    resolve_spec,
)
from migronaut_core.background.telemetry import Telemetry
from migronaut_core.background.throttle import (
    AdaptiveController,
    HealthReading,
    Throttle,
    ThrottleRegistry,
    first_breach,
    oplog_headroom_s,
    pacing,
)
from migronaut_core.background.throttle.health import OPLOG_MARGIN_S, breaches
from migronaut_core.background.warn_once import Warn
from migronaut_core.errors import ConfigInvalidError

HEALTHY = HealthReading(
    flow_control_lagged=False,
    flow_control_target_rate=1_000_000_000,
    majority_lag_ms=0,
    cache_dirty_fraction=0.01,
    cache_used_fraction=0.5,
    write_tickets_available_fraction=1.0,
    queued_operations=0,
    oplog_window_seconds=86_400.0,
    oplog_used_fraction=0.95,
)
DEFAULTS = HealthSettings()


class Readings:
    """A health probe that says what the test sets (and counts how often it was asked)."""

    def __init__(self, reading: HealthReading = HEALTHY) -> None:
        self.reading = reading
        self.asked = 0

    def read(self, warn: Warn | None = None) -> HealthReading:
        self.asked += 1
        return self.reading


class Sleeps(CancelToken):
    """A cancel token whose sleeps are recorded, not slept."""

    def __init__(self) -> None:
        super().__init__()
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> bool:
        self.slept.append(seconds)
        return self.cancelled


class Counted(Telemetry):
    """Telemetry that remembers the throttle reasons it was told."""

    def __init__(self) -> None:
        super().__init__(enabled=False)
        self.reasons: list[str] = []

    def throttled(self, migration: str, reason: str, *, shard: str | None = None) -> None:
        self.reasons.append(reason)


def spec_of(*, target_health: Any = DEFAULTS, **background: Any) -> Any:
    module = {
        "background": {"collection": "users", "from": 1, "to": 2, **background},
        "migrate": lambda doc, ctx: doc,
    }
    return resolve_spec("m1", module, target_health=target_health)[0]


# ─── Judging readings ─────────────────────────────────────────────────────────


def test_a_healthy_reading_breaches_nothing() -> None:
    assert breaches(HEALTHY, DEFAULTS, "soft") == []
    assert breaches(HEALTHY, DEFAULTS, "hard") == []


def test_an_unread_signal_breaches_nothing() -> None:
    assert breaches(HealthReading(), DEFAULTS, "soft") == []
    assert breaches(HealthReading(), DEFAULTS, "hard") == []


@pytest.mark.parametrize(
    ("change", "soft", "hard"),
    [
        ({"flow_control_lagged": True}, "flow_control", None),
        ({"majority_lag_ms": 2_001}, "majority_lag_ms", None),
        ({"majority_lag_ms": 30_001}, "majority_lag_ms", "majority_lag_ms"),
        ({"cache_dirty_fraction": 0.16}, "cache_dirty", None),
        ({"cache_dirty_fraction": 0.25}, "cache_dirty", "cache_dirty"),
        ({"cache_used_fraction": 0.91}, "cache_used", None),
        ({"cache_used_fraction": 0.97}, "cache_used", "cache_used"),
        ({"write_tickets_available_fraction": 0.2}, "write_tickets", None),
        ({"write_tickets_available_fraction": 0.0}, "write_tickets", "write_tickets"),
        ({"queued_operations": 33}, "queued_operations", None),
        ({"oplog_window_seconds": 5_000.0}, "oplog_window_s", None),
        ({"oplog_window_seconds": 600.0}, "oplog_window_s", "oplog_window_s"),
    ],
)
def test_each_signal_past_its_default_limits(
    change: dict[str, Any], soft: str, hard: str | None
) -> None:
    reading = dataclasses.replace(HEALTHY, **change)
    assert [b.signal for b in breaches(reading, DEFAULTS, "soft")] == [soft]
    assert [b.signal for b in breaches(reading, DEFAULTS, "hard")] == ([hard] if hard else [])


def test_a_limit_is_not_breached_at_the_limit_itself() -> None:
    at = dataclasses.replace(HEALTHY, majority_lag_ms=2_000, write_tickets_available_fraction=0.25)
    assert breaches(at, DEFAULTS, "soft") == []


def test_an_oplog_still_filling_is_not_judged_by_its_window() -> None:
    young = dataclasses.replace(HEALTHY, oplog_window_seconds=60.0, oplog_used_fraction=0.01)
    assert young.oplog_capacity_seconds is None
    assert breaches(young, DEFAULTS, "hard") == []
    unknown = dataclasses.replace(HEALTHY, oplog_window_seconds=60.0, oplog_used_fraction=None)
    assert breaches(unknown, DEFAULTS, "hard") == []


def test_the_first_breached_signal_in_order_names_the_hold() -> None:
    reading = dataclasses.replace(HEALTHY, cache_used_fraction=0.99, majority_lag_ms=60_000)
    breach = first_breach(reading, DEFAULTS, "hard")
    assert breach == HealthBreach("majority_lag_ms", "hard", 60_000, 30_000)
    assert [b.signal for b in breaches(reading, DEFAULTS, "hard")] == [
        "majority_lag_ms",
        "cache_used",
    ]


def test_a_breach_shows_rounded_readings_and_no_more() -> None:
    reading = dataclasses.replace(HEALTHY, cache_dirty_fraction=0.2345678)
    breach = first_breach(reading, DEFAULTS, "hard")
    assert breach is not None
    assert breach.to_dict() == {
        "signal": "cache_dirty",
        "level": "hard",
        "reading": 0.2346,
        "limit": 0.2,
    }


def test_limits_switched_off_are_never_breached() -> None:
    off = HealthSettings(**{signal: HealthLimit() for signal in HEALTH_SIGNALS})
    awful = HealthReading(
        flow_control_lagged=True,
        majority_lag_ms=10**9,
        cache_dirty_fraction=1.0,
        cache_used_fraction=1.0,
        write_tickets_available_fraction=0.0,
        queued_operations=10**6,
        oplog_window_seconds=1.0,
        oplog_used_fraction=1.0,
    )
    assert breaches(awful, off, "soft") == []
    assert breaches(awful, off, "hard") == []
    assert len(breaches(awful, DEFAULTS, "soft")) == len(HEALTH_SIGNALS)


def test_the_oplog_headroom_is_the_full_window_less_a_margin() -> None:
    assert oplog_headroom_s(HealthReading()) is None
    filling = HealthReading(oplog_window_seconds=3_600.0, oplog_used_fraction=0.5)
    assert oplog_headroom_s(filling) is None
    small = HealthReading(oplog_window_seconds=2_000.0, oplog_used_fraction=1.0)
    assert oplog_headroom_s(small) == 2_000 - OPLOG_MARGIN_S
    day = HealthReading(oplog_window_seconds=86_400.0, oplog_used_fraction=1.0)
    assert oplog_headroom_s(day) == 86_400 * 0.9
    short = HealthReading(oplog_window_seconds=60.0, oplog_used_fraction=1.0)
    assert oplog_headroom_s(short) == 0.0


# ─── The spec's ``health`` ────────────────────────────────────────────────────


def test_health_is_on_with_safe_defaults_unless_switched_off() -> None:
    assert spec_of().health == DEFAULTS
    assert spec_of(health=True).health == DEFAULTS
    assert spec_of(health=False).health is None


def test_a_signal_overrides_one_limit_and_keeps_the_other() -> None:
    health = spec_of(health={"cache_dirty": {"soft": 0.05}, "oplog_window_s": False}).health
    assert health.cache_dirty == HealthLimit(soft=0.05, hard=0.20)
    assert health.oplog_window_s == HealthLimit()
    assert health.majority_lag_ms == DEFAULTS.majority_lag_ms
    assert spec_of(health={"flow_control": {"hard": True}}).health.flow_control == HealthLimit(
        soft=True, hard=True
    )


def test_a_files_health_starts_from_its_targets_background_health() -> None:
    target = dataclasses.replace(DEFAULTS, cache_dirty=HealthLimit(soft=0.05, hard=0.10))
    assert spec_of(target_health=target).health == target
    assert spec_of(target_health=target, health=True).health == target
    overridden = spec_of(target_health=target, health={"cache_dirty": {"hard": 0.12}})
    assert overridden.health.cache_dirty == HealthLimit(soft=0.05, hard=0.12)
    assert spec_of(target_health=target, health=False).health is None
    # A target that switched health off: a file that says nothing stays off, and a
    # file's own limits start from the defaults.
    assert spec_of(target_health=None).health is None
    own = spec_of(target_health=None, health={"cache_used": False})
    assert own.health == dataclasses.replace(DEFAULTS, cache_used=HealthLimit())
    # What was resolved is stored: a running migration keeps it whatever the target says.
    assert read_stored(overridden.to_document()).health == overridden.health


def test_health_round_trips_through_the_state_document() -> None:
    spec = spec_of(health={"majority_lag_ms": {"hard": None}, "cache_used": {"soft": 0.85}})
    document = spec.to_document()
    assert document["health"]["majority_lag_ms"] == {"soft": 2_000, "hard": None}
    json.dumps(document["health"])
    assert read_stored(document) == spec
    off = spec_of(health=False)
    assert off.to_document()["health"] is False
    assert read_stored(off.to_document()).health is None


def test_a_spec_stored_before_health_existed_reads_with_the_defaults() -> None:
    document = spec_of().to_document()
    del document["health"]
    assert read_stored(document).health == DEFAULTS


@pytest.mark.parametrize(
    ("health", "key"),
    [
        ("on", "health"),
        ({"cache_dirt": {"soft": 0.1}}, "health.cache_dirt"),
        ({"cache_dirty": 0.1}, "health.cache_dirty"),
        ({"cache_dirty": {"soft": 1.5}}, "health.cache_dirty.soft"),
        ({"cache_dirty": {"soft": "high"}}, "health.cache_dirty.soft"),
        ({"cache_dirty": {"soft": 0.3}}, "health.cache_dirty.soft"),
        ({"write_tickets": {"soft": 0.01}}, "health.write_tickets.soft"),
        ({"majority_lag_ms": {"hard": 1.5}}, "health.majority_lag_ms.hard"),
        ({"flow_control": {"soft": 1}}, "health.flow_control.soft"),
        ({"cache_used": {"harder": 0.5}}, "health.cache_used.harder"),
    ],
)
def test_a_bad_health_setting_names_its_key_and_not_its_value(health: Any, key: str) -> None:
    with pytest.raises(ConfigInvalidError) as caught:
        spec_of(health=health)
    assert caught.value.context == {"migration": "m1", "key": key}
    assert "high" not in caught.value.message


# ─── A lane's throttle ────────────────────────────────────────────────────────


def test_a_soft_breach_pauses_a_lane_without_a_controller() -> None:
    probe = Readings(dataclasses.replace(HEALTHY, cache_dirty_fraction=0.17))
    telemetry = Counted()
    throttle = Throttle("m1", health=DEFAULTS, health_probe=probe, telemetry=telemetry)
    cancel = Sleeps()
    assert throttle.before_batch(cancel) is False
    assert cancel.slept == [pacing.SOFT_HEALTH_PAUSE_MS / 1000]
    assert telemetry.reasons == ["health"]
    assert throttle.hard_breach() is None
    probe.reading = HEALTHY
    cancel.slept.clear()
    assert throttle.before_batch(cancel) is False
    assert cancel.slept == []


def test_a_soft_breach_is_an_overload_to_the_controller() -> None:
    settings = AdaptiveSettings(
        min_batch_size=50, max_batch_size=400, increase=50, decrease=0.5, target_latency_ms=100
    )
    adaptive = AdaptiveController(settings, {"batch_size": 400, "pause_ms": 0})
    probe = Readings(dataclasses.replace(HEALTHY, flow_control_lagged=True))
    throttle = Throttle("m1", adaptive=adaptive, health=DEFAULTS, health_probe=probe)
    cancel = Sleeps()
    assert throttle.before_batch(cancel) is False
    assert cancel.slept == []  # the controller paces: no extra fixed pause
    throttle.after_batch(10.0)
    assert adaptive.batch_size() == 200
    probe.reading = HEALTHY
    throttle.before_batch(cancel)
    throttle.after_batch(10.0)
    assert adaptive.batch_size() == 250  # healthy again: grows back


def test_a_hard_breach_holds_the_lane_and_is_counted_once() -> None:
    probe = Readings(dataclasses.replace(HEALTHY, majority_lag_ms=45_000))
    telemetry = Counted()
    throttle = Throttle("m1", health=DEFAULTS, health_probe=probe, telemetry=telemetry)
    breach = throttle.hard_breach()
    assert breach == HealthBreach("majority_lag_ms", "hard", 45_000, 30_000)
    assert throttle.held_by == breach
    assert throttle.hard_breach() == breach
    assert telemetry.reasons == ["health"]
    probe.reading = HEALTHY
    assert throttle.hard_breach() is None
    assert throttle.held_by is None


def test_a_throttle_without_health_never_reads_it() -> None:
    probe = Readings(dataclasses.replace(HEALTHY, majority_lag_ms=45_000))
    throttle = Throttle("m1", health=None, health_probe=probe)
    assert throttle.hard_breach() is None
    assert throttle.before_batch(Sleeps()) is False
    assert probe.asked == 0


def test_a_kit_may_read_health_through_its_own_probe() -> None:
    registry = ThrottleRegistry()
    probe = Readings()
    registry.use_health_probe(probe)
    assert registry.health_probe(object()) is probe  # type: ignore[arg-type]


# ─── What readers see ─────────────────────────────────────────────────────────


def test_a_held_slice_says_which_signal_and_its_reading() -> None:
    breach = HealthBreach("cache_used", "hard", 0.97, 0.95)
    held = SliceResult("held", retry_after_ms=2_000, held_by=breach)
    assert held.to_dict() == {
        "outcome": "held",
        "counters": {},
        "retry_after_ms": 2_000,
        "held_by": {"signal": "cache_used", "level": "hard", "reading": 0.97, "limit": 0.95},
    }
    assert "held_by" not in SliceResult("yielded").to_dict()


def test_a_hold_view_is_json_safe() -> None:
    view = HoldView("oplog_window_s", "hard", 1_200, 3_600, None, None)
    assert json.loads(json.dumps(view.to_dict())) == {
        "signal": "oplog_window_s",
        "level": "hard",
        "reading": 1_200,
        "limit": 3_600,
        "since": None,
        "at": None,
        "reason": "health",
        "text": "held: oplog_window_s 1200 (hard limit 3600)",
    }
