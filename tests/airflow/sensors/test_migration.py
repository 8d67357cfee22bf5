"""BackgroundMigrationSensor, the deploy gate in a DAG, against a real mongod.

Operators are built outside a DAG; the target's connection comes from an
``AIRFLOW_CONN_*`` variable and its migrations folder from ``MIGRONAUT_MIGRATIONS_DIR``.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred
from pymongo.database import Database

from migronaut_airflow.sensors.migration import BackgroundMigrationSensor
from migronaut_airflow.triggers.gate import MigrationMilestoneTrigger
from migronaut_core.config import CONFIG_FILE
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background

CONTEXT: Any = {}
PREFIX = "deploy_bg"


@pytest.fixture
def registered(
    dags_folder: Path, migronaut_connection: str, mongo_uri: str, db: Database[dict[str, Any]]
) -> Path:
    """A pending background migration over 500 users, its collections under PREFIX."""
    (dags_folder.parent / CONFIG_FILE).write_text(f'background_collection = "{PREFIX}"\n')
    write_background(dags_folder)
    seed_users(db, 500)
    with make_kit(mongo_uri, db, dags_folder, background_collection=PREFIX) as kit:
        kit.runs.up()
    return dags_folder


def _drive(mongo_uri: str, db: Database[dict[str, Any]], migrations: Path) -> None:
    with make_kit(mongo_uri, db, migrations, background_collection=PREFIX) as kit:
        kit.background.run(SPLIT_NAME)


def _sensor(**overrides: Any) -> BackgroundMigrationSensor:
    return BackgroundMigrationSensor(
        **{"task_id": "gate", "migration": SPLIT_NAME, "poll_interval": 0.05, **overrides}
    )


def test_a_pending_migration_defers_on_the_target_s_collections_then_the_trigger_fires(
    registered: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    with pytest.raises(TaskDeferred) as deferred:
        _sensor().execute(CONTEXT)
    trigger = deferred.value.trigger
    assert isinstance(trigger, MigrationMilestoneTrigger)
    assert (trigger.collection_prefix, trigger.until) == (PREFIX, "completed")
    assert trigger.mongo_conn_id == "migronaut_default"

    driver = threading.Thread(target=_drive, args=(mongo_uri, db, registered))
    driver.start()

    async def first_event() -> dict[str, Any]:
        async for event in trigger.run():
            return dict(event.payload)
        raise AssertionError("no event")

    event = asyncio.run(asyncio.wait_for(first_event(), 120))
    driver.join()
    assert event == {
        "status": "success",
        "outcome": "reached",
        "migration_status": "completed",
        "migration": SPLIT_NAME,
    }
    assert _sensor().execute_complete(CONTEXT, event) == {
        "migration": SPLIT_NAME,
        "status": "completed",
    }
    assert db.users.count_documents({"_v": 2}) == 500


def test_a_completed_migration_passes_at_once_in_both_modes(
    registered: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    poking = _sensor(deferrable=False)
    assert poking.poke(CONTEXT).is_done is False
    _drive(mongo_uri, db, registered)
    assert poking.poke(CONTEXT).xcom_value == {"migration": SPLIT_NAME, "status": "completed"}
    assert _sensor().execute(CONTEXT)["status"] == "completed"


def test_a_cancelled_migration_fails_the_gate_without_retries(
    registered: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    with make_kit(mongo_uri, db, registered, background_collection=PREFIX) as kit:
        kit.background.control(SPLIT_NAME, "cancel", reason="not this release")
    with pytest.raises(AirflowFailException, match="is cancelled: it will not be completed"):
        _sensor().execute(CONTEXT)
    with pytest.raises(AirflowFailException, match="is unregistered"):
        _sensor(migration="20990101000000_never_registered").execute(CONTEXT)


@pytest.mark.parametrize(
    "event",
    [None, {}, {"status": "weird"}, {"status": "success", "outcome": "maybe"}],
)
def test_an_unusable_event_fails_the_task(event: Any) -> None:
    with pytest.raises(AirflowException):
        _sensor().execute_complete(CONTEXT, event)


def test_an_error_event_carries_the_trigger_s_message() -> None:
    with pytest.raises(AirflowException, match="ServerSelectionTimeoutError"):
        _sensor().execute_complete(
            CONTEXT, {"status": "error", "message": "ServerSelectionTimeoutError: down"}
        )


def test_an_unknown_milestone_is_refused_when_the_dag_is_parsed() -> None:
    with pytest.raises(ValueError, match="until must be one of migrated, completed, finalized"):
        _sensor(until="deployed")
