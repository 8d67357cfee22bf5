"""Helpers for the Airflow tests: connection URIs and Airflow's log after a failure."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest


def mongo_connection_uri(mongo_uri: str, database: str) -> str:
    """The ``mongo`` connection URI Airflow reads from ``AIRFLOW_CONN_*`` for a test database."""
    parts = urlsplit(mongo_uri)
    host = parts.netloc.split(",")[0]
    query = f"?{parts.query}" if parts.query else ""
    return f"mongo://{host}/{database}{query}"


def log_tail_on_failure(
    airflow: Any,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
    extra: str = "",
) -> Iterator[None]:
    """For an autouse fixture: print the end of Airflow's log after a test that failed."""
    failed = request.session.testsfailed
    yield
    if request.session.testsfailed > failed:
        with capsys.disabled():
            print(f"\n{airflow.log_tail(150)}{extra}")
