"""Helpers for the Airflow tests: Airflow's log after a failure, the stall watch connected."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pymongo import MongoClient

from migronaut_airflow.triggers.stall import StalledMigrationTrigger


def log_tail_on_failure(
    airflow: Any,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
    extra: str | Callable[[], str] = "",
) -> Iterator[None]:
    """For an autouse fixture: print the end of Airflow's log after a test that failed.

    :param extra: more to print, or a function returning it (called after the test).
    """
    failed = request.session.testsfailed
    yield
    if request.session.testsfailed > failed:
        more = extra() if callable(extra) else extra
        with capsys.disabled():
            print(f"\n{airflow.log_tail(150)}{more}")


def stall_watch_connected(client: MongoClient[dict[str, Any]]) -> bool:
    """Whether the stall trigger runs in the triggerer: its client is connected to mongod."""
    ops = client.admin.aggregate(
        [
            {"$currentOp": {"allUsers": True, "idleConnections": True}},
            {"$match": {"appName": StalledMigrationTrigger.appname}},
        ]
    )
    return bool(list(ops))
