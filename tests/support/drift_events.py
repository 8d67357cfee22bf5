"""Event-driven drift healing, end to end, on any Airflow a driver runs.

The checks take the driver (``migronaut_dev.airflow_standalone.AirflowStandalone``
or any deployment with the same methods, e.g. a Celery cluster's), the
database and a kit, so the same body runs on ``airflow standalone`` and on a
production-shaped cluster. The Airflow must parse a DAG file built with
:data:`DRIFT_DAG_OPTIONS` (re-fires off, so only the change stream can heal,
and the poll DAG unscheduled, so nothing else heals) over a migrations
directory holding :data:`DRIFT_MIGRATION`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pymongo.database import Database

from migronaut_airflow.dags.factory import DRIFT_EVENTS_DAG_ID
from migronaut_airflow.operators.background import dag_id_for
from migronaut_core import Migronaut
from migronaut_core.background.store.drift_events import read_drift_position
from migronaut_core.config import BackgroundCollections
from tests.support import kit_json

DRIFT_NAME = "20240104000000_stamp_orders"
DRIFT_COLLECTION = "orders"
#: Documents migrated before any drift.
ORDERS = 1_000
#: Old-shape documents an old release writes after completion, each time.
DRIFTED = 100
DRIFT_MIGRATION = """
description = "Stamp every order with its new shape"

background = {
    "collection": "orders",
    "from": 1,
    "to": 2,
    "batch_size": 100,
    "max_parallel": 2,
}


def migrate(doc, ctx):
    doc["shape"] = "new"
    return doc
"""
#: ``build_dags`` keywords: no re-fire within a test, a trigger that notices a
#: completed migration within a second, and no scheduled poll.
DRIFT_DAG_OPTIONS = (
    "drift_schedule=None, "
    "drift_events={'refire_after_seconds': 3600.0, 'refresh_seconds': 1.0}, "
    "migronaut_config={'lock_ttl_seconds': 4}, "
    # Paused at creation, as Airflow's default has it: these tests unpause what they run.
    "paused_upon_creation=None"
)
#: ``[triggerer] triggerer_health_check_threshold`` for these tests: a killed
#: triggerer's triggers move to a new one within seconds.
TRIGGERER_ENV = {"AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "8"}
NAMES = BackgroundCollections.from_prefix("migronaut_background")


class AirflowDriver(Protocol):
    """What the checks need of a running Airflow."""

    def wait_for_dag(self, dag_id: str, timeout: float = ...) -> dict[str, Any]: ...
    def unpause(self, dag_id: str) -> None: ...
    def dag_runs(self, dag_id: str) -> list[dict[str, Any]]: ...
    def request(self, method: str, path: str, **kwargs: Any) -> Any: ...
    def wait_until(self, check: Callable[[], Any], timeout: float, what: str) -> Any: ...
    def stop_triggerer(self) -> int: ...
    def start_triggerer(self) -> None: ...


@dataclass
class DriftSetup:
    """A running Airflow, the database and a kit whose :data:`DRIFT_NAME` has completed."""

    airflow: AirflowDriver
    db: Database[dict[str, Any]]
    kit: Migronaut


def seed_completed(db: Database[dict[str, Any]], kit: Migronaut) -> None:
    """:data:`ORDERS` old-shape orders, migrated by :data:`DRIFT_NAME` (registered by ``up``)."""
    db.orders.insert_many([{"_id": i, "_v": 1, "n": i} for i in range(ORDERS)])
    db.orders.create_index([("_v", 1), ("_id", 1)])
    kit.runs.up()
    assert kit_json.run(kit, DRIFT_NAME, concurrency=2)["status"] == "completed"


def old_release_writes(db: Database[dict[str, Any]], start: int, count: int = DRIFTED) -> None:
    db.orders.insert_many([{"_id": start + i, "_v": 1, "n": start + i} for i in range(count)])


def enable_drift_healing(setup: DriftSetup, timeout: float = 180.0) -> None:
    """Unpause the drift-events DAG and the migration's DAG; wait for the stream's position."""
    for dag_id in (DRIFT_EVENTS_DAG_ID, dag_id_for(DRIFT_NAME)):
        setup.airflow.wait_for_dag(dag_id)
        setup.airflow.unpause(dag_id)
    setup.airflow.wait_until(
        lambda: read_drift_position(setup.db, NAMES, DRIFT_COLLECTION).resume_token is not None,
        timeout,
        "the drift trigger never opened its stream",
    )


def state(setup: DriftSetup) -> Mapping[str, Any]:
    found = setup.db[NAMES.state].find_one({"_id": DRIFT_NAME})
    assert found is not None
    return found


def wait_healed(setup: DriftSetup, expected: int, reopened_before: int, timeout: float) -> None:
    """Every order at version 2 and the migration completed again, reopened by a drift event."""

    def healed() -> bool:
        current = state(setup)
        assert current["status"] not in ("failed", "cancelled"), current["status"]
        return (
            current["status"] == "completed"
            and int(current.get("reopened", 0)) > reopened_before
            and setup.db.orders.count_documents({"_v": {"$ne": 2}}) == 0
        )

    setup.airflow.wait_until(healed, timeout, "the drifted orders were not healed")
    assert setup.db.orders.count_documents({}) == expected
    assert setup.db.orders.count_documents({"_v": 2, "shape": "new"}) == expected
    assert state(setup)["totals"]["migrated"] == expected


def drift_events(setup: DriftSetup) -> list[dict[str, Any]]:
    """The payloads of the drift triggers' asset events, oldest first."""
    answer = setup.airflow.request(
        "GET", "/api/v2/assets/events", params={"limit": 1000, "order_by": "timestamp"}
    )
    payloads = []
    for event in answer["asset_events"]:
        extra = event.get("extra") or {}
        if extra.get("from_trigger"):
            payloads.append(dict(extra["payload"]))
    return payloads


def wait_runs_finished(setup: DriftSetup, timeout: float = 120.0) -> None:
    for dag_id in (DRIFT_EVENTS_DAG_ID, dag_id_for(DRIFT_NAME)):
        setup.airflow.wait_until(
            lambda dag_id=dag_id: all(
                run["state"] in ("success", "failed") for run in setup.airflow.dag_runs(dag_id)
            ),
            timeout,
            f"{dag_id} kept running",
        )


def check_drift_is_healed_without_anyone_triggering(
    setup: DriftSetup, start: int = 1_000_000, timeout: float = 240.0
) -> None:
    """After completion, old-shape writes reopen the migration and every one is healed.

    Nothing is triggered by hand: the trigger's asset event starts the drift-events
    DAG, which reopens the migration and starts its DAG.
    """
    enable_drift_healing(setup)
    expected = setup.db.orders.count_documents({}) + DRIFTED
    before = int(state(setup).get("reopened", 0))
    fired_before = len(drift_events(setup))

    old_release_writes(setup.db, start)
    wait_healed(setup, expected, before, timeout)
    wait_runs_finished(setup)

    fired = drift_events(setup)[fired_before:]
    assert fired, "healed without a drift event"
    assert {event["collection"] for event in fired} == {DRIFT_COLLECTION}
    assert all(event["migrations"] == [DRIFT_NAME] for event in fired), fired
    assert set(fired[0]) == {"status", "collection", "migrations", "events", "source"}
    runs = setup.airflow.dag_runs(DRIFT_EVENTS_DAG_ID)
    assert any(run["run_type"] == "asset_triggered" for run in runs), runs
    assert all(run["state"] == "success" for run in runs), runs
    print(f"\nhealed {DRIFTED} drifted orders; drift events: {fired}; runs: {len(runs)}")


def check_drift_written_while_the_triggerer_is_down_is_healed(
    setup: DriftSetup, start: int = 2_000_000, down_seconds: float = 5.0, timeout: float = 240.0
) -> None:
    """Old-shape writes while no triggerer runs are healed once one starts again.

    Re-fires are off (:data:`DRIFT_DAG_OPTIONS`) and a position is saved, so only
    the change stream resumed after the stored token can see these writes.
    """
    enable_drift_healing(setup)
    wait_runs_finished(setup)
    expected = setup.db.orders.count_documents({}) + DRIFTED
    before = int(state(setup).get("reopened", 0))
    fired_before = len(drift_events(setup))
    position = read_drift_position(setup.db, NAMES, DRIFT_COLLECTION)

    assert setup.airflow.stop_triggerer() >= 1
    old_release_writes(setup.db, start)
    time.sleep(down_seconds)
    assert setup.db.orders.count_documents({"_v": 1}) == DRIFTED, "healed with no triggerer"
    assert len(drift_events(setup)) == fired_before
    setup.airflow.start_triggerer()

    wait_healed(setup, expected, before, timeout)
    wait_runs_finished(setup)
    fired = drift_events(setup)[fired_before:]
    assert fired, "healed without a drift event"
    assert all(event["source"] == "stream" for event in fired), fired
    # A stream started afresh would have seen none of the writes made while it was down.
    setup.airflow.wait_until(
        lambda: (
            read_drift_position(setup.db, NAMES, DRIFT_COLLECTION).events - position.events
            >= DRIFTED
        ),
        30,
        "the resumed stream did not read every write made while the triggerer was down",
    )
    assert read_drift_position(setup.db, NAMES, DRIFT_COLLECTION).fired > position.fired
    print(f"\nafter the triggerer restart: drift events {fired}")
