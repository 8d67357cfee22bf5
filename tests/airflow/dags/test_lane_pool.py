"""Lanes run in a configurable Airflow pool; the coordinator and the sensor stay out of it.

Building reads no connection, so no metadata DB or mongod is needed.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from migronaut_airflow.dags.factory import LANE_POOL_ENV, build_dags
from migronaut_airflow.operators.background import dag_id_for
from tests.support.background import SPLIT_NAME, write_background

pytestmark = pytest.mark.airflow

DEFAULT_POOL = "default_pool"
OTHER_TASKS = ("coordinate", "wait_for_lanes", "continue")


@pytest.fixture
def migrations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv(LANE_POOL_ENV, raising=False)
    write_background(tmp_path)
    return tmp_path


def _pools(migrations: Path, **options: Any) -> dict[str, str]:
    dag = build_dags(migrations, **options)[dag_id_for(SPLIT_NAME)]
    return {task_id: dag.task_dict[task_id].pool for task_id in ("lane", *OTHER_TASKS)}


def test_lanes_run_in_the_pool_build_dags_names(migrations: Path) -> None:
    pools = _pools(migrations, lane_pool="mongo_writes")
    assert pools["lane"] == "mongo_writes"
    assert {pools[task] for task in OTHER_TASKS} == {DEFAULT_POOL}


def test_the_lane_pool_comes_from_the_environment_when_not_given(
    migrations: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(LANE_POOL_ENV, "migrations_pool")
    assert _pools(migrations)["lane"] == "migrations_pool"
    assert _pools(migrations, lane_pool="explicit")["lane"] == "explicit"


def test_without_a_pool_lanes_use_airflows_default_pool(migrations: Path) -> None:
    assert set(_pools(migrations).values()) == {DEFAULT_POOL}


def test_the_deploy_wait_reaches_the_lanes(migrations: Path) -> None:
    dag = build_dags(migrations, lane_deploy_wait=timedelta(minutes=2))[dag_id_for(SPLIT_NAME)]
    assert dag.task_dict["lane"].partial_kwargs["max_deploy_wait_seconds"] == 120.0
