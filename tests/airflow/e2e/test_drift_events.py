"""Event-driven drift healing under a real ``airflow standalone`` and a real mongod.

After a background migration completed, an old release writes old-shape orders:
the collection's change-stream trigger (an ``AssetWatcher`` in the triggerer)
fires, ``migronaut_drift_events`` reopens the migration and starts its DAG, and
every order is healed — with nobody triggering anything. Then the same with the
triggerer killed while the writes happen and started again: the trigger resumes
after its stored position. The bodies live in :mod:`tests.support.drift_events`
so a Celery cluster's driver can run them too.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pymongo import MongoClient

from migronaut_dev.airflow_standalone import AirflowStandalone, install_dag_file
from migronaut_dev.endpoints import airflow_connection
from tests.support.airflow import log_tail_on_failure
from tests.support.background import make_kit, write_background
from tests.support.drift_events import (
    DRIFT_DAG_OPTIONS,
    DRIFT_MIGRATION,
    DRIFT_NAME,
    TRIGGERER_ENV,
    DriftSetup,
    check_drift_is_healed_without_anyone_triggering,
    check_drift_written_while_the_triggerer_is_down_is_healed,
    seed_completed,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def setup(
    tmp_path_factory: pytest.TempPathFactory,
    mongo_uri: str,
    mongo_client: MongoClient[dict[str, Any]],
) -> Iterator[DriftSetup]:
    """A completed migration over 1,000 orders, and Airflow with its drift-events DAG."""
    db = mongo_client[f"t_{uuid.uuid4().hex[:12]}"]
    root = tmp_path_factory.mktemp("drift-events")
    migrations = root / "migrations"
    try:
        write_background(migrations, DRIFT_NAME, body=DRIFT_MIGRATION)
        install_dag_file(root / "dags", DRIFT_DAG_OPTIONS)
        env = {
            "MIGRONAUT_MIGRATIONS_DIR": str(migrations),
            "AIRFLOW_CONN_MIGRONAUT_DEFAULT": airflow_connection(mongo_uri, db.name),
            **TRIGGERER_ENV,
        }
        with make_kit(mongo_uri, db, migrations) as kit:
            seed_completed(db, kit)
            with AirflowStandalone(
                root / "airflow", root / "dags", env, start_timeout=300
            ) as airflow:
                yield DriftSetup(airflow, db, kit)
        left = [" ".join(proc.cmdline()) for proc in airflow.processes()]
        assert not left, f"Airflow processes left behind: {left}"
    finally:
        mongo_client.drop_database(db.name)


@pytest.fixture(autouse=True)
def _airflow_log_on_failure(
    setup: DriftSetup, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> Iterator[None]:
    airflow = setup.airflow
    assert isinstance(airflow, AirflowStandalone)

    def triggerer_log() -> str:
        path = airflow.home / "triggerer.log"
        lines = path.read_text(errors="replace").splitlines()[-60:] if path.exists() else []
        return "\n--- the restarted triggerer's log ---\n" + "\n".join(lines)

    yield from log_tail_on_failure(airflow, request, capsys, triggerer_log)


def test_old_shape_writes_after_completion_are_healed_without_anyone_triggering(
    setup: DriftSetup,
) -> None:
    check_drift_is_healed_without_anyone_triggering(setup)


def test_writes_while_the_triggerer_is_down_are_healed_after_it_restarts(
    setup: DriftSetup,
) -> None:
    check_drift_written_while_the_triggerer_is_down_is_healed(setup)
