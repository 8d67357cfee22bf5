"""Replication lag from ``replSetGetStatus``: the slowest counted secondary."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from migronaut_core.background.throttle import (
    lag,
    replication_lag_ms,
)

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
