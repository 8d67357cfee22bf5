"""The drift trigger, its assets and the migronaut_drift_events DAG, without an Airflow server.

The trigger runs against the real replica set (``run()`` driven directly, as the
triggerer would); the DAGs are built by ``build_dags`` from parsed files, as the
dag processor builds them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk import Asset, AssetAny
from pymongo.database import Database

from migronaut_airflow.dags.factory import (
    DRIFT_EVENTS_DAG_ID,
    DriftEventOptions,
    build_dags,
)
from migronaut_airflow.operators.drift import drift_event_collections
from migronaut_airflow.targets import dag_id_for
from migronaut_airflow.triggers.drift import CollectionDriftTrigger
from migronaut_core import Migronaut, read_catalog
from migronaut_core.background.store.drift_events import read_drift_position
from migronaut_core.config import BackgroundCollections
from migronaut_core.errors import ConfigInvalidError
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background

pytestmark = [pytest.mark.airflow]

CLASSPATH = "migronaut_airflow.triggers.drift.CollectionDriftTrigger"
NAMES = BackgroundCollections.from_prefix("migronaut_background")
STEP_MIGRATION = """
background = {"mode": "step", "from": 1, "to": 2}


def step(ctx):
    return {"checkpoint": None, "done": True}
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def completed(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path, migronaut_connection: str
) -> Iterator[Migronaut]:
    write_background(tmp_path / "migrations", batch_size=100, max_parallel=2)
    seed_users(db, 20)
    db.users.create_index([("_v", 1), ("_id", 1)])
    with make_kit(mongo_uri, db, tmp_path / "migrations") as kit:
        kit.runs.up()
        assert kit_json.run(kit, SPLIT_NAME)["status"] == "completed"
        yield kit


def test_serialize_pins_classpath_and_kwargs() -> None:
    trigger = CollectionDriftTrigger(
        mongo_conn_id="mongo_prod",
        database="shop",
        collection="orders",
        collection_prefix="mig_bg",
        refire_after_seconds=60.0,
        refresh_seconds=2.0,
    )
    classpath, kwargs = trigger.serialize()
    assert classpath == CLASSPATH
    assert kwargs == {
        "mongo_conn_id": "mongo_prod",
        "database": "shop",
        "collection": "orders",
        "collection_prefix": "mig_bg",
        "refire_after_seconds": 60.0,
        "refresh_seconds": 2.0,
    }
    assert CollectionDriftTrigger(**kwargs).serialize() == (classpath, kwargs)


def test_bad_settings_are_refused_when_the_trigger_is_built() -> None:
    with pytest.raises(ConfigInvalidError) as caught:
        CollectionDriftTrigger(database=None, collection="orders", refresh_seconds=0)
    assert caught.value.context["key"] == "refresh_seconds"


@pytest.mark.anyio
async def test_run_yields_one_value_free_event_on_old_shape_writes_then_returns(
    completed: Migronaut,
    db: Database[dict[str, Any]],
    migronaut_connection: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    trigger = CollectionDriftTrigger(
        mongo_conn_id=migronaut_connection, database=None, collection="users", refresh_seconds=0.2
    )
    events = trigger.run()
    pending = asyncio.ensure_future(events.__anext__())
    for _ in range(200):
        if read_drift_position(db, NAMES, "users").resume_token is not None:
            break
        await asyncio.sleep(0.05)
    assert not pending.done()
    caplog.set_level(logging.DEBUG, logger="migronaut_core")
    caplog.set_level(logging.DEBUG, logger="airflow.task")
    seed_users(db, 7, start=5000)  # an old release writes the old shape

    event = await asyncio.wait_for(pending, 15)
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(events.__anext__(), 5)

    assert event.payload == {
        "status": "drift",
        "collection": "users",
        "migrations": [SPLIT_NAME],
        "events": event.payload["events"],
        "source": "stream",
    }
    assert 1 <= event.payload["events"] <= 7
    ours = [r for r in caplog.records if r.name.startswith(("migronaut", "airflow"))]
    logged = "\n".join(record.getMessage() for record in ours)
    assert "users" in logged
    assert "First5000" not in logged and "Last5000" not in logged


@pytest.mark.anyio
async def test_run_rides_out_an_unreachable_server_without_firing() -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(
            "AIRFLOW_CONN_MIGRONAUT_NOWHERE",
            "mongo://127.0.0.1:1/nowhere?serverSelectionTimeoutMS=200&connectTimeoutMS=200",
        )
        trigger = CollectionDriftTrigger(
            mongo_conn_id="migronaut_nowhere", database=None, collection="users"
        )
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(trigger.run().__anext__(), 2.0)


def test_drift_event_collections_reads_only_drift_triggers_events() -> None:
    def event(extra: dict[str, Any] | None) -> SimpleNamespace:
        return SimpleNamespace(extra=extra)

    drift = {"status": "drift", "collection": "orders", "migrations": ["m"], "events": 3}
    events = {
        "a": [
            event({"from_trigger": True, "payload": drift}),
            event({"from_trigger": True, "payload": {**drift, "collection": "users"}}),
            event({"from_trigger": True, "payload": drift}),
        ],
        "b": [
            event(None),  # a lane's outlet event
            event({"payload": {**drift, "collection": "lanes_said_so"}}),
            event({"from_trigger": True, "payload": {"status": "error", "collection": "x"}}),
        ],
    }
    assert drift_event_collections(events) == ["orders", "users"]
    assert drift_event_collections({}) == []


def test_the_factory_builds_one_watched_asset_per_collection_for_lanes_and_drift_events(
    tmp_path: Path, migronaut_connection: str
) -> None:
    migrations = tmp_path / "migrations"
    write_background(migrations)
    write_background(migrations, "20240102000000_more_users", extra='"filter": {"x": 1},')
    write_background(migrations, "20240103000000_steps", body=STEP_MIGRATION)
    catalog = read_catalog(migrations)
    assert {entry.name: entry.collection for entry in catalog.background} == {
        "20240103000000_steps": None,
        SPLIT_NAME: "users",
        "20240102000000_more_users": "users",
    }

    dags = build_dags(migrations, drift_events={"refire_after_seconds": 60.0})

    events_dag = dags[DRIFT_EVENTS_DAG_ID]
    condition = events_dag.timetable.asset_condition
    assert isinstance(condition, AssetAny)
    (asset,) = condition.objects
    assert isinstance(asset, Asset)
    assert asset.uri.startswith("mongodb://127.0.0.1:") and asset.uri.endswith("/users")
    (watcher,) = asset.watchers
    classpath, kwargs = watcher.trigger.serialize()
    assert classpath == CLASSPATH
    assert kwargs["collection"] == "users" and kwargs["refire_after_seconds"] == 60.0
    for name in (SPLIT_NAME, "20240102000000_more_users"):
        lane = dags[dag_id_for(name)].get_task("lane")
        assert [outlet.uri for outlet in lane.outlets] == [asset.uri]
    assert dags[dag_id_for("20240103000000_steps")].get_task("lane").outlets == []
    assert [task.task_id for task in events_dag.topological_sort()] == [
        "verify",
        "heal",
        "start_migrations",
    ]


def test_without_a_readable_connection_or_when_off_no_assets_and_no_drift_events_dag(
    tmp_path: Path, migronaut_connection: str
) -> None:
    migrations = tmp_path / "migrations"
    write_background(migrations)
    assert DRIFT_EVENTS_DAG_ID not in build_dags(migrations, drift_events=False)
    unknown = build_dags(migrations, mongo_conn_id="migronaut_no_such_connection")
    assert DRIFT_EVENTS_DAG_ID not in unknown
    assert unknown[dag_id_for(SPLIT_NAME)].get_task("lane").outlets == []
    given = build_dags(
        migrations,
        mongo_conn_id="migronaut_no_such_connection",
        database="shop",
        drift_events=DriftEventOptions(host="mongo.internal", port=27018),
    )
    (asset,) = given[DRIFT_EVENTS_DAG_ID].timetable.asset_condition.objects
    assert asset.uri == "mongodb://mongo.internal:27018/shop/users"
