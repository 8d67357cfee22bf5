"""Airflow tests: a private AIRFLOW_HOME with a SQLite metadata DB, set before Airflow loads.

Airflow reads its configuration when it is first imported, so the environment is
prepared at import time of this conftest (before any test module imports Airflow),
and the metadata DB is migrated once per session. Connections are given as
``AIRFLOW_CONN_*`` environment variables.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from migronaut_dev.endpoints import airflow_connection

AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="migronaut-airflow-home-"))
DAGS_FOLDER = AIRFLOW_HOME / "dags"
DAGS_FOLDER.mkdir()
atexit.register(shutil.rmtree, AIRFLOW_HOME, ignore_errors=True)
os.environ.update(
    {
        "AIRFLOW_HOME": str(AIRFLOW_HOME),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "True",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        # dag.test() runs are triggered by "dag_test": a user who may edit DAGs, as the
        # control DAG's permission check asks of a run's triggering user.
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,dag_test:user",
        # The catalog and connection caches of this session, not the machine's.
        "AIRFLOW__MIGRONAUT__CACHE_DIR": str(AIRFLOW_HOME / "migronaut-cache"),
    }
)

DAG_FILE = """
import os
from migronaut_airflow.dags.factory import build_dags

globals().update(
    build_dags(
        os.environ["MIGRONAUT_MIGRATIONS_DIR"],
        slice_ms=300,
        lane_max_slices=int(os.environ.get("MIGRONAUT_TEST_LANE_MAX_SLICES", "0")) or None,
        no_lease_grace_seconds=2.0,
        poll_interval=0.5,
        migronaut_config={"lock_ttl_seconds": 4},
    )
)
"""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/airflow/" in str(item.path):
            item.add_marker(pytest.mark.airflow)


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """Migrate the SQLite metadata DB once per session."""
    airflow = Path(sys.executable).with_name("airflow")
    subprocess.run([str(airflow), "db", "migrate"], check=True, capture_output=True, timeout=300)
    return AIRFLOW_HOME


@pytest.fixture
def migronaut_connection(mongo_uri: str, db: object) -> Iterator[str]:
    """``AIRFLOW_CONN_MIGRONAUT_DEFAULT`` pointing at the test's database."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(
            "AIRFLOW_CONN_MIGRONAUT_DEFAULT",
            airflow_connection(mongo_uri, db.name),  # type: ignore[attr-defined]
        )
        yield "migronaut_default"


@pytest.fixture
def dags_folder(tmp_path: Path, airflow_db: Path) -> Iterator[Path]:
    """A DAG file in the dags folder that builds the DAGs of ``MIGRONAUT_MIGRATIONS_DIR``."""
    migrations = tmp_path / "migrations"
    migrations.mkdir()
    dag_file = DAGS_FOLDER / "migronaut_test_dags.py"
    dag_file.write_text(DAG_FILE)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MIGRONAUT_MIGRATIONS_DIR", str(migrations))
        yield migrations
    dag_file.unlink(missing_ok=True)
