"""Pacing rules: AIMD math, the shared registry, the user's throttle, overload, lag."""

from __future__ import annotations

import json
import logging
import threading
import time
from datetime import datetime, timedelta
from typing import Any

import bson
import pytest
from pymongo.errors import (
    AutoReconnect,
    BulkWriteError,
    DuplicateKeyError,
    ExecutionTimeout,
    NetworkTimeout,
    OperationFailure,
    WriteConcernError,
    WTimeoutError,
)

from migronaut_core.background.backoff import Backoff
from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.spec import AdaptiveSettings
from migronaut_core.background.throttle import (
    AdaptiveController,
    Throttle,
    ThrottleChange,
    ThrottleContext,
    ThrottleRegistry,
    lag,
    pacing,
    replication_lag_ms,
    warning_keys,
)
from migronaut_core.background.warn_once import Warn, WarnOnce
from migronaut_core.server_errors import is_overload

SETTINGS = AdaptiveSettings(
    min_batch_size=50,
    max_batch_size=400,
    increase=50,
    decrease=0.5,
    target_latency_ms=100,
    max_pause_ms=1_000,
)


class Clock:
    """Monotonic seconds that move only when a test says so."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Warnings:
    """A ``warn_once`` that remembers what it said."""

    def __init__(self) -> None:
        self.said: list[tuple[str, str]] = []
        self._keys: set[str] = set()

    def __call__(self, key: str, message: str, *args: Any) -> None:
        if key in self._keys:
            return
        self._keys.add(key)
        self.said.append((key, message % args))


def controller(initial: dict[str, Any] | None = None, **kwargs: Any) -> AdaptiveController:
    clock = kwargs.pop("clock", Clock())
    return AdaptiveController(SETTINGS, initial, report_interval_s=0, clock=clock, **kwargs)


def feed(
    adaptive: AdaptiveController, clock: Clock, latency_ms: float, overloaded: bool = False
) -> ThrottleChange | None:
    """Record one batch a second after the previous one."""
    clock.advance(1.0)
    return adaptive.record(latency_ms, overloaded)


@pytest.fixture
def registry() -> ThrottleRegistry:
    return ThrottleRegistry()


# ─── AIMD ─────────────────────────────────────────────────────────────────────


def test_starts_at_max_or_clamped_start_size() -> None:
    assert controller().batch_size() == 400
    assert controller(start_batch_size=120).batch_size() == 120
    assert controller(start_batch_size=5).batch_size() == 50
    assert controller(start_batch_size=9_999).batch_size() == 400
    assert controller().pause_ms() == 0


def test_first_batch_warms_up_unless_overloaded() -> None:
    clock = Clock()
    adaptive = controller(clock=clock)
    assert feed(adaptive, clock, 5_000) is None
    assert adaptive.batch_size() == 400
    other = controller(clock=clock)
    assert feed(other, clock, 1, overloaded=True) == ThrottleChange("overload", 200, 0)


def test_shrinks_multiplicatively_on_latency_and_overload_down_to_the_floor() -> None:
    clock = Clock()
    adaptive = controller({"batch_size": 400, "pause_ms": 0}, clock=clock)
    assert feed(adaptive, clock, 150) == ThrottleChange("latency", 200, 0)
    assert feed(adaptive, clock, 10, overloaded=True) == ThrottleChange("overload", 100, 0)
    assert feed(adaptive, clock, 500) == ThrottleChange("latency", 50, 0)
    assert adaptive.batch_size() == 50


def test_pause_grows_at_the_floor_up_to_max_pause() -> None:
    clock = Clock()
    adaptive = controller({"batch_size": 50}, clock=clock)
    pauses = []
    for _ in range(6):
        feed(adaptive, clock, 500)
        pauses.append(adaptive.pause_ms())
    assert pauses == [100, 200, 400, 800, 1_000, 1_000]
    assert adaptive.batch_size() == 50
    assert feed(adaptive, clock, 500) is None  # nothing left to change


def test_recovers_pause_first_then_size_additively_up_to_the_cap() -> None:
    clock = Clock()
    adaptive = controller({"batch_size": 50, "pause_ms": 400}, clock=clock)
    seen = [feed(adaptive, clock, 5) for _ in range(12)]
    pauses_then_sizes = [(change.pause_ms, change.batch_size) for change in seen if change]
    assert pauses_then_sizes[:6] == [(200, 50), (100, 50), (50, 50), (25, 50), (12, 50), (0, 50)]
    assert [size for _, size in pauses_then_sizes[6:]] == [100, 150, 200, 250, 300, 350]
    assert all(change.reason == "recovered" for change in seen if change)
    feed(adaptive, clock, 5)
    assert adaptive.batch_size() == 400
    assert feed(adaptive, clock, 5) is None  # at the cap: nothing to report


def test_grows_back_after_shrinking() -> None:
    clock = Clock()
    adaptive = controller({"batch_size": 400}, clock=clock)
    for _ in range(3):
        feed(adaptive, clock, 1_000)
    assert adaptive.batch_size() == 50
    for _ in range(7):
        feed(adaptive, clock, 1)
    assert adaptive.batch_size() == 400


def test_concurrent_lanes_decrease_once_per_round_trip() -> None:
    clock = Clock()
    adaptive = controller({"batch_size": 400}, clock=clock)
    clock.advance(1)
    assert adaptive.record(300, overloaded=True) is not None
    clock.advance(0.1)  # a second lane's batch, slow over the same moment
    assert adaptive.record(300, overloaded=True) is None
    assert adaptive.batch_size() == 200
    clock.advance(0.5)
    adaptive.record(300)
    assert adaptive.batch_size() == 100


def test_reports_are_rate_limited_and_keep_the_most_severe_reason() -> None:
    clock = Clock()
    adaptive = AdaptiveController(SETTINGS, {"batch_size": 200}, report_interval_s=10, clock=clock)
    assert feed(adaptive, clock, 500) == ThrottleChange("latency", 100, 0)
    assert feed(adaptive, clock, 1, overloaded=True) is None
    assert feed(adaptive, clock, 1) is None
    clock.advance(10)
    change = feed(adaptive, clock, 1)
    assert change == ThrottleChange("overload", 150, 0)
    assert change.to_dict() == {"reason": "overload", "batch_size": 150, "pause_ms": 0}


def test_state_round_trip_is_bson_and_json_safe() -> None:
    clock = Clock()
    adaptive = controller({"batch_size": 50}, clock=clock)
    feed(adaptive, clock, 500)
    state = adaptive.state()
    assert state == {"batch_size": 50, "pause_ms": 100}
    stored = bson.decode(bson.encode({"throttle": state}))["throttle"]
    assert json.loads(json.dumps(stored)) == state
    again = controller(stored)
    assert (again.batch_size(), again.pause_ms()) == (50, 100)


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ({"batch_size": 10_000, "pause_ms": 99_999}, (400, 1_000)),
        ({"batch_size": -3, "pause_ms": -1}, (50, 0)),
        ({"batch_size": "many", "pause_ms": None}, (400, 0)),
        ({"batch_size": True, "pause_ms": float("nan")}, (400, 0)),
        ({}, (400, 0)),
    ],
)
def test_state_out_of_range_is_clamped_or_ignored(
    state: dict[str, Any], expected: tuple[int, int]
) -> None:
    adaptive = controller(state)
    assert (adaptive.batch_size(), adaptive.pause_ms()) == expected


def test_record_is_thread_safe() -> None:
    adaptive = AdaptiveController(SETTINGS, {"batch_size": 50}, report_interval_s=0)

    def healthy() -> None:
        for _ in range(200):
            adaptive.record(1)

    threads = [threading.Thread(target=healthy) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert adaptive.batch_size() == 400
    assert adaptive.pause_ms() == 0


# ─── The registry ─────────────────────────────────────────────────────────────


def test_registry_shares_one_controller_per_migration_and_group(
    registry: ThrottleRegistry,
) -> None:
    first = registry.adaptive_for("m1", "shardA", SETTINGS, {"batch_size": 100})
    assert registry.adaptive_for("m1", "shardA", SETTINGS, {"batch_size": 300}) is first
    assert first.batch_size() == 100  # a later partition's state does not reseed it
    assert registry.adaptive_for("m1", "shardB", SETTINGS) is not first
    assert registry.adaptive_for("m1", None, SETTINGS) is not first
    assert registry.adaptive_for("m2", "shardA", SETTINGS) is not first
    assert ThrottleRegistry().adaptive_for("m1", "shardA", SETTINGS) is not first  # another kit


def test_registry_replaces_a_controller_whose_settings_changed_keeping_its_state(
    registry: ThrottleRegistry,
) -> None:
    first = registry.adaptive_for("m1", None, SETTINGS, {"batch_size": 100, "pause_ms": 300})
    narrower = AdaptiveSettings(min_batch_size=10, max_batch_size=80, max_pause_ms=200)
    second = registry.adaptive_for("m1", None, narrower)
    assert second is not first
    assert (second.batch_size(), second.pause_ms()) == (80, 200)
    assert registry.adaptive_for("m1", None, narrower) is second


def test_registry_is_shared_between_threads(registry: ThrottleRegistry) -> None:
    found: list[AdaptiveController] = []
    lock = threading.Lock()

    def claim() -> None:
        controller = registry.adaptive_for("m1", "g", SETTINGS)
        with lock:
            found.append(controller)

    threads = [threading.Thread(target=claim) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(controller) for controller in found}) == 1


def test_forget_drops_the_controllers_of_one_migration_or_all(
    registry: ThrottleRegistry,
) -> None:
    registry.adaptive_for("m1", None, SETTINGS)
    registry.adaptive_for("m1", "g", SETTINGS)
    registry.adaptive_for("m2", None, SETTINGS)
    assert registry.migrations() == {"m1", "m2"}
    assert registry.forget("m1") == 2
    assert registry.migrations() == {"m2"}
    assert registry.forget() == 1
    assert registry.migrations() == frozenset()


def test_a_forgotten_controller_resumes_from_the_stored_state(
    registry: ThrottleRegistry,
) -> None:
    first = registry.adaptive_for("m1", None, SETTINGS, {"batch_size": 100})
    registry.forget("m1")
    again = registry.adaptive_for("m1", None, SETTINGS, {"batch_size": 300})
    assert again is not first
    assert again.batch_size() == 300


# ─── The user's throttle ──────────────────────────────────────────────────────


def test_user_throttle_sees_its_context_and_its_number_is_waited() -> None:
    seen: list[ThrottleContext] = []

    def user(ctx: ThrottleContext) -> int:
        seen.append(ctx)
        return 120

    throttle = Throttle(
        "m1", user_throttle=user, generation=3, partition="p1", batch_size=77, collection="c"
    )
    started = time.monotonic()
    assert throttle.before_batch(CancelToken()) is False
    assert time.monotonic() - started >= 0.11
    assert seen == [ThrottleContext("m1", 3, "p1", 77, "c")]


def test_user_throttle_sees_the_adaptive_batch_size() -> None:
    seen: list[int] = []
    adaptive = controller({"batch_size": 150})
    throttle = Throttle(
        "m1", user_throttle=lambda ctx: seen.append(ctx.batch_size), adaptive=adaptive
    )
    throttle.before_batch(CancelToken())
    assert seen == [150]
    assert throttle.next_batch_size() == 150


@pytest.mark.parametrize("value", [None, 0, 0.0])
def test_user_throttle_nothing_means_no_wait(value: Any) -> None:
    warnings = Warnings()
    throttle = Throttle("m1", user_throttle=lambda ctx: value, warn=warnings)
    started = time.monotonic()
    assert throttle.before_batch(CancelToken()) is False
    assert time.monotonic() - started < 0.05
    assert warnings.said == []


@pytest.mark.parametrize("value", ["100", True, -5, float("nan"), float("inf"), [1]])
def test_user_throttle_bad_value_is_warned_once_and_ignored(value: Any) -> None:
    warnings = Warnings()
    throttle = Throttle("m1", user_throttle=lambda ctx: value, warn=warnings)
    for _ in range(3):
        assert throttle.before_batch(CancelToken()) is False
    assert len(warnings.said) == 1
    key, message = warnings.said[0]
    assert key == "throttle-value:m1"
    assert "m1" in message
    assert repr(value) not in message


def test_raising_user_throttle_counts_as_zero_and_is_warned_once() -> None:
    warnings = Warnings()

    def broken(ctx: ThrottleContext) -> int:
        raise RuntimeError("secret-value-42")

    throttle = Throttle("m1", pause_ms=0, user_throttle=broken, warn=warnings)
    for _ in range(3):
        assert throttle.before_batch(CancelToken()) is False
    assert warnings.said == [
        ("throttle-raised:m1", "m1: throttle() raised RuntimeError; not waiting for it")
    ]


def test_throttles_sharing_a_warn_once_log_a_warning_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    warn = WarnOnce(logging.getLogger("tests.throttle"))
    throttle = Throttle("m1", user_throttle=lambda ctx: "soon", warn=warn)
    with caplog.at_level(logging.WARNING, logger="tests.throttle"):
        for _ in range(3):
            Throttle("m1", user_throttle=lambda ctx: "soon", warn=warn).before_batch(CancelToken())
        throttle.before_batch(CancelToken())
    assert [record.getMessage() for record in caplog.records].count(
        "m1: throttle() returned str, not a non-negative number of ms; ignored"
    ) == 1


def test_without_warn_a_throttle_logs_its_warning_once(caplog: pytest.LogCaptureFixture) -> None:
    throttle = Throttle("m1", user_throttle=lambda ctx: "soon")
    with caplog.at_level(logging.WARNING, logger=pacing.__name__):
        for _ in range(3):
            throttle.before_batch(CancelToken())
    assert [record.getMessage() for record in caplog.records] == [
        "m1: throttle() returned str, not a non-negative number of ms; ignored"
    ]


def test_warning_keys_name_what_a_throttle_warns_about() -> None:
    warnings = Warnings()
    Throttle("m1", user_throttle=lambda ctx: "soon", warn=warnings).before_batch(CancelToken())
    Throttle("m1", user_throttle=lambda ctx: 1 / 0, warn=warnings).before_batch(CancelToken())
    assert {key for key, _ in warnings.said} == warning_keys("m1")


def test_waits_pause_plus_user_plus_adaptive_pause() -> None:
    adaptive = controller({"batch_size": 50, "pause_ms": 60})
    throttle = Throttle("m1", pause_ms=50, user_throttle=lambda ctx: 40, adaptive=adaptive)
    started = time.monotonic()
    assert throttle.before_batch(CancelToken()) is False
    assert 0.15 <= time.monotonic() - started < 1.0


# ─── Cancellation ─────────────────────────────────────────────────────────────


def test_cancel_during_a_pause_returns_true_promptly() -> None:
    token = CancelToken()
    throttle = Throttle("m1", pause_ms=10_000)
    timer = threading.Timer(0.05, token.cancel, args=("stop",))
    timer.start()
    started = time.monotonic()
    assert throttle.before_batch(token) is True
    assert time.monotonic() - started < 1.0
    timer.join()


def test_already_cancelled_returns_true_without_waiting() -> None:
    token = CancelToken()
    token.cancel()
    assert Throttle("m1").before_batch(token) is True
    assert Throttle("m1", pause_ms=5_000).before_batch(token) is True


# ─── Replication lag (with a scripted lag source, no server) ──────────────────


class ScriptedLag:
    """Answers the lags it was given, then the last one forever."""

    def __init__(self, *lags: int | None) -> None:
        self.lags = list(lags)
        self.calls = 0

    def lag_ms(self, warn: Warn | None = None) -> int | None:
        self.calls += 1
        return self.lags.pop(0) if len(self.lags) > 1 else self.lags[0]


@pytest.fixture
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pacing, "LAG_BACKOFF", Backoff(first=0.01, cap=0.02))


@pytest.mark.usefixtures("quick_backoff")
def test_waits_while_lagging_and_marks_lagged_once() -> None:
    source = ScriptedLag(5_000, 3_000, 200, 0)
    throttle = Throttle("m1", max_lag_ms=1_000, lag_probe=source)
    assert throttle.before_batch(CancelToken()) is False
    assert source.calls == 3
    assert throttle.take_lagged() is True
    assert throttle.take_lagged() is False


@pytest.mark.usefixtures("quick_backoff")
def test_lag_wait_feeds_the_controller_as_overload() -> None:
    adaptive = controller({"batch_size": 400})
    throttle = Throttle("m1", max_lag_ms=100, lag_probe=ScriptedLag(900, 0), adaptive=adaptive)
    throttle.before_batch(CancelToken())
    change = throttle.after_batch(5)
    assert change == ThrottleChange("overload", 200, 0)
    assert throttle.state() == {"batch_size": 200, "pause_ms": 0}


def test_unknown_lag_does_not_wait() -> None:
    throttle = Throttle("m1", max_lag_ms=0, lag_probe=ScriptedLag(None))
    assert throttle.before_batch(CancelToken()) is False
    assert throttle.take_lagged() is False


def test_cancel_while_lagging_returns_true_promptly() -> None:
    token = CancelToken()
    throttle = Throttle("m1", max_lag_ms=10, lag_probe=ScriptedLag(60_000))
    timer = threading.Timer(0.05, token.cancel)
    timer.start()
    started = time.monotonic()
    assert throttle.before_batch(token) is True
    assert time.monotonic() - started < 1.0
    timer.join()


def test_no_max_lag_never_asks() -> None:
    source = ScriptedLag(60_000)
    assert Throttle("m1", lag_probe=source).before_batch(CancelToken()) is False
    assert source.calls == 0


def test_after_error_records_only_overloads() -> None:
    adaptive = controller({"batch_size": 400})
    throttle = Throttle("m1", adaptive=adaptive)
    assert throttle.after_error(DuplicateKeyError("dup", 11000), 5) is None
    assert adaptive.batch_size() == 400
    assert throttle.after_error(ExecutionTimeout("slow", 50), 5) == ThrottleChange(
        "overload", 200, 0
    )
    assert Throttle("m1").after_error(ExecutionTimeout("slow", 50), 5) is None
    assert Throttle("m1").after_batch(5) is None
    assert Throttle("m1").state() is None


T0 = datetime(2026, 1, 1, 12, 0, 0)


def member(name: str, state: int, behind_s: float = 0, **extra: Any) -> dict[str, Any]:
    return {"name": name, "state": state, "optimeDate": T0 - timedelta(seconds=behind_s), **extra}


def test_replication_lag_of_the_slowest_counted_secondary() -> None:
    status = {
        "members": [
            member("a:1", 1),
            member("b:1", 2, 2.5),
            member("c:1", 2, 0.5),
            {"name": "arb:1", "state": 7, "health": 1},
            member("down:1", 8, 3_600, health=0),
            member("recovering:1", 3, 600),
            member("delayed:1", 2, 3_600),
            {"name": "starting:1", "state": 2},
        ]
    }
    assert replication_lag_ms(status, frozenset({"delayed:1"})) == 2_500
    assert replication_lag_ms(status) == 3_600_000


def test_replication_lag_without_primary_or_secondaries_is_zero() -> None:
    assert replication_lag_ms({"members": [member("a:1", 1)]}) == 0
    assert replication_lag_ms({"members": [member("b:1", 2, 5)]}) == 0
    assert replication_lag_ms({}) == 0


def test_excluded_members_from_config() -> None:
    config = {
        "config": {
            "members": [
                {"host": "a:1"},
                {"host": "h:1", "hidden": True, "priority": 0},
                {"host": "d:1", "secondaryDelaySecs": 3600},
                {"host": "old:1", "slaveDelay": 10},
            ]
        }
    }
    assert lag._excluded_members(config) == frozenset({"h:1", "d:1", "old:1"})


# ─── Overload classification ──────────────────────────────────────────────────


def labelled(label: str, code: int = 112) -> OperationFailure:
    return OperationFailure("labelled", code, {"ok": 0, "code": code, "errorLabels": [label]})


@pytest.mark.parametrize(
    "error",
    [
        WriteConcernError("waiting for replication timed out", 64, {"code": 64}),
        WTimeoutError("wtimeout", 64, {"errInfo": {"wtimeout": True}}),
        BulkWriteError(
            {
                "writeErrors": [],
                "writeConcernErrors": [{"code": 64, "errmsg": "waiting for replication"}],
                "nMatched": 3,
            }
        ),
        BulkWriteError({"writeErrors": [{"index": 0, "code": 50, "errmsg": "t"}]}),
        labelled("TransientTransactionError"),
        labelled("RetryableWriteError", 189),
        OperationFailure("operation exceeded time limit", 50),
        ExecutionTimeout("operation exceeded time limit", 50),
        OperationFailure("exceeded time limit", 262),
        NetworkTimeout("timed out"),
        AutoReconnect("connection closed"),
    ],
    ids=lambda error: type(error).__name__,
)
def test_overload_errors(error: Exception) -> None:
    assert is_overload(error) is True


@pytest.mark.parametrize(
    "error",
    [
        DuplicateKeyError("E11000", 11000),
        OperationFailure("document failed validation", 121),
        BulkWriteError({"writeErrors": [{"index": 0, "code": 11000, "errmsg": "dup"}]}),
        OperationFailure("other label", 2, {"errorLabels": ["NoWritesPerformed"]}),
        ValueError("transform bug"),
    ],
    ids=lambda error: type(error).__name__,
)
def test_not_overload(error: Exception) -> None:
    assert is_overload(error) is False


def test_overload_is_found_through_a_wrapping_error() -> None:
    try:
        try:
            raise NetworkTimeout("timed out")
        except NetworkTimeout as inner:
            raise RuntimeError("batch failed") from inner
    except RuntimeError as outer:
        assert is_overload(outer) is True
