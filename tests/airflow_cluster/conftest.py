"""The cluster tests: one production-shaped Airflow for the folder, tests one after another.

The ``airflow_cluster`` package fixture comes from :mod:`tests.support.cluster`. Every
test here is marked ``cluster`` (and ``airflow``, ``slow``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.airflow import log_tail_on_failure
from tests.support.cluster import Cluster, airflow_cluster

__all__ = ["airflow_cluster"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/airflow_cluster/" in str(item.path):
            for marker in ("cluster", "airflow", "slow"):
                item.add_marker(marker)


@pytest.fixture(autouse=True)
def _cluster_log_on_failure(
    airflow_cluster: Cluster, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> Iterator[None]:
    """Show the end of every cluster process's log when a test here failed."""
    yield from log_tail_on_failure(airflow_cluster.airflow, request, capsys)
