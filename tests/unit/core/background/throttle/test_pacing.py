"""A lane's throttle: the user's throttle, pauses, cancellation, waiting out replication lag."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
from pymongo.errors import (
    DuplicateKeyError,
    ExecutionTimeout,
)

from migronaut_core.background.backoff import Backoff
from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.throttle import (
    Throttle,
    ThrottleChange,
    ThrottleContext,
    pacing,
    warning_keys,
)
from migronaut_core.background.warn_once import Warn, WarnOnce
from tests.support.throttle import controller


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
