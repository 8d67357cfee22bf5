"""``build_dags(lane_retries=…)``: the seeds' ``maxLaneRetries`` (default 8, 0 to 100).

Building reads no database: no mongod is needed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from migronaut_airflow.dags.factory import build_dags
from migronaut_airflow.targets import dag_id_for
from migronaut_core import ConfigInvalidError
from tests.support.background import SPLIT_NAME, write_background

pytestmark = pytest.mark.airflow


@pytest.fixture(autouse=True)
def clean_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No migronaut setting from the session leaks in; a known host for the assets."""
    for name in list(os.environ):
        if (
            name.startswith(("AIRFLOW__MIGRONAUT", "MIGRONAUT_"))
            and name != "MIGRONAUT_TEST_MONGODB_URI"
        ):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AIRFLOW__MIGRONAUT__ASSET_HOST", "mongo.internal")
    monkeypatch.setenv("AIRFLOW__MIGRONAUT__DATABASE", "shop")
    yield


@pytest.fixture
def migrations(tmp_path: Path) -> Path:
    folder = tmp_path / "migrations"
    write_background(folder)
    return folder


def _lane_retries(dags: dict[str, Any]) -> tuple[int, bool]:
    lane = dags[dag_id_for(SPLIT_NAME)].get_task("lane")
    return lane.partial_kwargs["retries"], lane.partial_kwargs["retry_exponential_backoff"]


def test_lanes_retry_eight_times_with_backoff_by_default(migrations: Path) -> None:
    assert _lane_retries(build_dags(migrations)) == (8, True)


@pytest.mark.parametrize("retries", [0, 100])
def test_the_range_ends_are_accepted(migrations: Path, retries: int) -> None:
    assert _lane_retries(build_dags(migrations, lane_retries=retries))[0] == retries


@pytest.mark.parametrize("retries", [-1, 101, True, "8", 2.5])
def test_lane_retries_out_of_range_is_refused_by_name(migrations: Path, retries: Any) -> None:
    with pytest.raises(ConfigInvalidError) as refused:
        build_dags(migrations, lane_retries=retries, lane_retry_delay=timedelta(seconds=1))
    assert refused.value.context == {"key": "lane_retries"}
    assert "lane_retries must be an integer between 0 and 100" in refused.value.message
