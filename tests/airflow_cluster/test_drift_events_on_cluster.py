"""Event-driven drift healing on the Celery cluster: the same checks as on standalone.

A completed migration's collection is watched by its change-stream trigger in the
cluster's triggerer; old-shape writes reopen the migration and Celery workers heal
every one, with nobody triggering anything — then again with the triggerer killed
while the writes happen and started afterwards (the trigger resumes after its
stored position). The bodies are :mod:`tests.support.drift_events`'s, which
``tests/airflow/e2e/test_drift_events.py`` runs on ``airflow standalone``. This
module runs after the other cluster tests: its DAG file (every migronaut DAG of its
own migrations directory and database) stays in the cluster's dags folder.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.support.background import make_kit, write_background
from tests.support.cluster import Cluster
from tests.support.drift_events import (
    DRIFT_DAG_OPTIONS,
    DRIFT_MIGRATION,
    DRIFT_NAME,
    DriftSetup,
    check_drift_is_healed_without_anyone_triggering,
    check_drift_written_while_the_triggerer_is_down_is_healed,
    seed_completed,
)

pytestmark = [pytest.mark.timeout(600)]

#: Every migronaut DAG of the drift migrations directory, on the drift database.
DAG_FILE = """
from migronaut_airflow.dags.factory import build_dags

globals().update(build_dags({migrations!r}, database={database!r}, {options}))
"""


@pytest.fixture(scope="module")
def setup(airflow_cluster: Cluster) -> Iterator[DriftSetup]:
    """A completed migration over 1,000 orders, and the drift-events DAG on the cluster."""
    db = airflow_cluster.client[f"cluster_drift_{uuid.uuid4().hex[:8]}"]
    root = airflow_cluster.root / "drift-events"
    migrations = root / "migrations"
    try:
        write_background(migrations, DRIFT_NAME, body=DRIFT_MIGRATION)
        with make_kit(airflow_cluster.mongo_uri, db, migrations) as kit:
            seed_completed(db, kit)
            dag_file = airflow_cluster.airflow.dags_folder / "migronaut_cluster_drift.py"
            dag_file.write_text(
                DAG_FILE.format(
                    migrations=str(migrations), database=db.name, options=DRIFT_DAG_OPTIONS
                )
            )
            yield DriftSetup(airflow_cluster.airflow, db, kit)
    finally:
        airflow_cluster.client.drop_database(db.name)


def test_old_shape_writes_after_completion_are_healed_on_celery_workers(
    setup: DriftSetup,
) -> None:
    check_drift_is_healed_without_anyone_triggering(setup)


def test_writes_while_the_cluster_s_triggerer_is_down_are_healed_after_it_restarts(
    setup: DriftSetup,
) -> None:
    check_drift_written_while_the_triggerer_is_down_is_healed(setup)
