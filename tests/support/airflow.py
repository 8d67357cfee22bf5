"""Helpers for the Airflow tests: Airflow's log after a failure, task logs at INFO, the stall
watch connected."""

from __future__ import annotations

import contextlib
import logging
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


@contextlib.contextmanager
def task_logs_at_info() -> Iterator[None]:
    """Let tasks run by ``dag.test()`` log at INFO (the session's Airflow logs WARNING up).

    A task's ``self.log`` is a structlog logger whose level Airflow fixes when it
    configures logging; the lines then reach the captured output (``capfd``).
    """
    import structlog

    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    try:
        yield
    finally:
        structlog.configure(**saved)


def stall_watch_connected(client: MongoClient[dict[str, Any]]) -> bool:
    """Whether the stall trigger runs in the triggerer: its client is connected to mongod."""
    ops = client.admin.aggregate(
        [
            {"$currentOp": {"allUsers": True, "idleConnections": True}},
            {"$match": {"appName": StalledMigrationTrigger.appname}},
        ]
    )
    return bool(list(ops))
