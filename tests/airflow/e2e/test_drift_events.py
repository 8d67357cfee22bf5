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

from collections.abc import Iterator
from typing import Any

import pytest
from pymongo import MongoClient

from tests.support.background import write_background
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
from tests.support.standalone import Standalone, running_standalone

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def standalone(
    tmp_path_factory: pytest.TempPathFactory,
    mongo_uri: str,
    mongo_client: MongoClient[dict[str, Any]],
) -> Iterator[Standalone]:
    """A completed migration over 1,000 orders, and Airflow with its drift-events DAG."""
    with running_standalone(
        tmp_path_factory,
        "drift-events",
        mongo_uri,
        mongo_client,
        DRIFT_DAG_OPTIONS,
        seed=lambda ground: write_background(ground.migrations, DRIFT_NAME, body=DRIFT_MIGRATION),
        kit={},
        with_kit=lambda ground: seed_completed(ground.db, ground.kit),
        env=TRIGGERER_ENV,
    ) as standalone:
        yield standalone


@pytest.fixture(scope="module")
def setup(standalone: Standalone) -> DriftSetup:
    return DriftSetup(standalone.airflow, standalone.db, standalone.kit)


def more_on_failure(standalone: Standalone, request: pytest.FixtureRequest) -> str:
    """After a failed test (tests/airflow/e2e/conftest.py): the end of the triggerer's log."""
    path = standalone.airflow.home / "triggerer.log"
    lines = path.read_text(errors="replace").splitlines()[-60:] if path.exists() else []
    return "\n--- the restarted triggerer's log ---\n" + "\n".join(lines)


def test_old_shape_writes_after_completion_are_healed_without_anyone_triggering(
    setup: DriftSetup,
) -> None:
    check_drift_is_healed_without_anyone_triggering(setup)


def test_writes_while_the_triggerer_is_down_are_healed_after_it_restarts(
    setup: DriftSetup,
) -> None:
    check_drift_written_while_the_triggerer_is_down_is_healed(setup)
