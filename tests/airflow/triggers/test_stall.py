"""The stall trigger, its asset and the migronaut_stalls DAG, without an Airflow server.

The trigger runs against the real replica set (``run()`` driven directly, as the
triggerer would) over a migration whose driver planned, worked one slice and
went away; the DAGs are built by ``build_dags`` from parsed files, as the dag
processor builds them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import Asset
from pymongo.database import Database

from migronaut_airflow.dags.factory import STALL_ENV, STALLS_DAG_ID, build_dags
from migronaut_airflow.operators.background import HealBackgroundOperator, dag_id_for
from migronaut_airflow.operators.takeover import MIGRATION_TASKS
from migronaut_airflow.triggers.stall import StalledMigrationTrigger
from migronaut_core import Migronaut
from migronaut_core.config import BackgroundCollections
from migronaut_core.errors import ConfigInvalidError
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.heal import FakeRuns

pytestmark = [pytest.mark.airflow]

CLASSPATH = "migronaut_airflow.triggers.stall.StalledMigrationTrigger"
NAMES = BackgroundCollections.from_prefix("migronaut_background")
#: A short lease, so an abandoned slice's lease is gone well before the stall time.
TTL_SECONDS = 1
STALL = 1.5


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def abandoned(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path, migronaut_connection: str
) -> Iterator[Migronaut]:
    """A driver that planned, worked one short slice and went away: running, no lease held."""
    seed_users(db, 500)
    db.users.create_index([("_v", 1), ("_id", 1)])
    # 10 ms a document: one slice of 100 ms leaves most of the work undone.
    write_background(tmp_path / "migrations", batch_size=100, per_document_seconds=0.01)
    with make_kit(mongo_uri, db, tmp_path / "migrations", lock_ttl_seconds=TTL_SECONDS) as kit:
        kit.runs.up()
        assert kit.background.coordinate(SPLIT_NAME).next == "process"
        assert kit.background.run_slice(SPLIT_NAME, slice_ms=100).outcome in (
            "yielded",
            "exhausted",
        )
        yield kit


def test_serialize_pins_classpath_and_kwargs() -> None:
    trigger = StalledMigrationTrigger(
        mongo_conn_id="mongo_prod",
        database="shop",
        collection_prefix="mig_bg",
        stall_seconds=120.0,
        poll_seconds=3.0,
    )
    classpath, kwargs = trigger.serialize()
    assert classpath == CLASSPATH
    assert kwargs == {
        "mongo_conn_id": "mongo_prod",
        "database": "shop",
        "collection_prefix": "mig_bg",
        "stall_seconds": 120.0,
        "poll_seconds": 3.0,
    }
    # What the triggerer rebuilds it from is what it serializes again (defaults included).
    assert StalledMigrationTrigger(**kwargs).serialize() == (classpath, kwargs)
    _, defaults = StalledMigrationTrigger(database=None).serialize()
    assert StalledMigrationTrigger(**defaults).serialize()[1] == defaults


@pytest.mark.parametrize(
    ("options", "key"),
    [
        ({"stall_seconds": 0.5}, "stall_seconds"),
        ({"stall_seconds": True}, "stall_seconds"),
        ({"stall_seconds": 30.0, "poll_seconds": 0}, "poll_seconds"),
        ({"stall_seconds": 30.0, "poll_seconds": 7200.0}, "poll_seconds"),
    ],
)
def test_bad_settings_are_refused_when_the_trigger_is_built(
    options: dict[str, Any], key: str
) -> None:
    with pytest.raises(ConfigInvalidError) as caught:
        StalledMigrationTrigger(database=None, **options)
    assert caught.value.context["key"] == key


@pytest.mark.anyio
async def test_run_yields_one_value_free_event_for_an_abandoned_migration_then_returns(
    abandoned: Migronaut,
    db: Database[dict[str, Any]],
    migronaut_connection: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="migronaut_core")
    caplog.set_level(logging.DEBUG, logger="airflow.task")
    trigger = StalledMigrationTrigger(
        mongo_conn_id=migronaut_connection, database=None, stall_seconds=STALL, poll_seconds=0.1
    )
    started = time.monotonic()
    events = trigger.run()
    event = await asyncio.wait_for(events.__anext__(), 30)
    waited = time.monotonic() - started
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(events.__anext__(), 5)

    assert event.payload == {
        "status": "stalled",
        "migrations": [SPLIT_NAME],
        "idle_seconds": {SPLIT_NAME: event.payload["idle_seconds"][SPLIT_NAME]},
    }
    assert event.payload["idle_seconds"][SPLIT_NAME] >= STALL
    assert waited >= STALL - 0.3  # not before: the slice's checkpoint was just written
    # The heal's rule agrees, and the signal was noted before it was handed on.
    assert abandoned.background.stalled(stall_seconds=STALL) == [SPLIT_NAME]
    noted = db[NAMES.drift_events].find_one({"_id": {"stall": SPLIT_NAME}})
    assert noted is not None and noted["counters"]["fired"] == 1
    # Names and durations only: no document value in the event, its log line or any log.
    described = trigger.describe(event.payload)
    assert described.startswith(f"Stalled: {SPLIT_NAME} (") and described.endswith(" s)")
    ours = [r for r in caplog.records if r.name.startswith(("migronaut", "airflow"))]
    logged = "\n".join([described, repr(event.payload), *(r.getMessage() for r in ours)])
    assert "First" not in logged and "Last" not in logged


@pytest.mark.anyio
async def test_run_stays_quiet_while_the_migration_is_within_its_stall_time(
    abandoned: Migronaut, migronaut_connection: str
) -> None:
    trigger = StalledMigrationTrigger(
        mongo_conn_id=migronaut_connection, database=None, stall_seconds=30.0, poll_seconds=0.1
    )
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(trigger.run().__anext__(), 2.0)


def test_the_factory_watches_the_state_collection_and_builds_migronaut_stalls(
    tmp_path: Path, db: Database[dict[str, Any]], migronaut_connection: str
) -> None:
    migrations = tmp_path / "migrations"
    write_background(migrations)

    dags = build_dags(migrations, stall=timedelta(seconds=42))

    stalls = dags[STALLS_DAG_ID]
    asset = stalls.timetable.asset_condition  # scheduled on the one asset itself
    assert isinstance(asset, Asset)
    assert asset.uri.startswith("mongodb://127.0.0.1:")
    assert asset.uri.endswith(f"/{db.name}/migronaut_background")
    (watcher,) = asset.watchers
    assert watcher.name == STALLS_DAG_ID
    assert isinstance(watcher.trigger, StalledMigrationTrigger)
    classpath, kwargs = watcher.trigger.serialize()
    assert classpath == CLASSPATH
    assert kwargs == {
        "mongo_conn_id": migronaut_connection,
        "database": None,
        "collection_prefix": "migronaut_background",
        "stall_seconds": 42.0,
        "poll_seconds": None,
    }
    assert [task.task_id for task in stalls.topological_sort()] == ["heal", "start_migrations"]
    heal = stalls.get_task("heal")
    assert isinstance(heal, HealBackgroundOperator)
    assert heal.stall_seconds == 42.0
    # The drift DAG's heal takes the same stall time.
    drift_heal = dags["migronaut_drift"].get_task("heal")
    assert isinstance(drift_heal, HealBackgroundOperator)
    assert drift_heal.stall_seconds == 42.0


def test_the_heals_name_the_pools_the_migration_dag_s_tasks_run_in(
    tmp_path: Path, migronaut_connection: str
) -> None:
    migrations = tmp_path / "migrations"
    write_background(migrations)
    dags = build_dags(
        migrations, lane_pool="mongo_writes", task_args={"coordinator": {"pool": "steps"}}
    )
    background = dags[dag_id_for(SPLIT_NAME)]
    expected = {task_id: background.get_task(task_id).pool for task_id in MIGRATION_TASKS}
    assert expected == {
        "coordinate": "steps",
        "lane": "mongo_writes",
        "wait_for_lanes": "default_pool",
        "continue": "steps",
    }
    for dag_id in (STALLS_DAG_ID, "migronaut_drift"):
        assert dags[dag_id].get_task("heal").pools == expected


def _stall_times(dags: dict[str, Any]) -> tuple[float, float, float]:
    (watcher,) = dags[STALLS_DAG_ID].timetable.asset_condition.watchers
    return (
        watcher.trigger.serialize()[1]["stall_seconds"],
        dags[STALLS_DAG_ID].get_task("heal").stall_seconds,
        dags["migronaut_drift"].get_task("heal").stall_seconds,
    )


def test_the_stall_time_comes_from_the_environment_when_not_given(
    tmp_path: Path, migronaut_connection: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    migrations = tmp_path / "migrations"
    write_background(migrations)
    monkeypatch.delenv(STALL_ENV, raising=False)
    assert _stall_times(build_dags(migrations)) == (900.0, 900.0, 900.0)

    monkeypatch.setenv(STALL_ENV, " 120 ")
    assert _stall_times(build_dags(migrations)) == (120.0, 120.0, 120.0)
    explicit = build_dags(migrations, stall=timedelta(seconds=42))
    assert _stall_times(explicit) == (42.0, 42.0, 42.0)

    for bad in ("soon", "0.5", "nan", "1e9"):
        monkeypatch.setenv(STALL_ENV, bad)
        with pytest.raises(ConfigInvalidError) as refused:
            build_dags(migrations)
        assert refused.value.context == {"key": STALL_ENV}
        assert bad not in str(refused.value)


def test_the_state_asset_follows_a_configured_prefix(
    tmp_path: Path, db: Database[dict[str, Any]], migronaut_connection: str
) -> None:
    migrations = tmp_path / "migrations"
    write_background(migrations)
    dags = build_dags(migrations, migronaut_config={"background_collection": "mig_bg"})
    asset = dags[STALLS_DAG_ID].timetable.asset_condition
    assert isinstance(asset, Asset)
    assert asset.uri.endswith(f"/{db.name}/mig_bg")
    (watcher,) = asset.watchers
    assert watcher.trigger.serialize()[1]["collection_prefix"] == "mig_bg"


def test_without_the_watch_or_a_readable_connection_no_migronaut_stalls(
    tmp_path: Path, migronaut_connection: str
) -> None:
    migrations = tmp_path / "migrations"
    write_background(migrations)
    assert STALLS_DAG_ID not in build_dags(migrations, stall_watch=False)
    assert STALLS_DAG_ID not in build_dags(migrations, mongo_conn_id="migronaut_no_such_connection")
    # Without the drift events, the stall watch still stands on its own.
    assert STALLS_DAG_ID in build_dags(migrations, drift_events=False)


def _heal(runs: FakeRuns, migrations: Path, stall_seconds: float = STALL) -> list[str]:
    operator = HealBackgroundOperator(
        task_id="heal",
        stall_seconds=stall_seconds,
        migrations_dir=str(migrations),
        pools={"lane": "mongo_writes"},
        migronaut_config={"lock_ttl_seconds": TTL_SECONDS},
    )
    try:
        return operator.execute({"ti": runs})  # type: ignore[typeddict-item]
    finally:
        operator.hook.close()


def _held_lines(logged: str) -> list[tuple[str, str]]:
    """The heal's "held by Airflow" lines: (level, line)."""
    return [
        ("warning" if "warn" in line.lower().split("heal:")[0] else "info", line)
        for line in logged.splitlines()
        if "held by Airflow" in line
    ]


@pytest.mark.parametrize(
    ("runs", "reason", "says"),
    [
        (FakeRuns(paused=True), "paused", "paused DAG"),
        (FakeRuns(waiting={"lane": 2}), "waiting_for_slot", "waiting for pool mongo_writes"),
        (FakeRuns(waiting={"coordinate": 1}), "waiting_for_slot", "waiting for pool default_pool"),
        (FakeRuns(queued=1), "run_queued", "its DAG run is queued"),
    ],
    ids=["paused", "lanes-in-a-full-pool", "coordinator-waiting", "run-queued"],
)
def test_a_stall_airflow_holds_is_reported_once_and_never_taken_over(
    abandoned: Migronaut,
    runs: FakeRuns,
    reason: str,
    says: str,
    capfd: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    migrations = tmp_path / "migrations"
    time.sleep(STALL)  # the slice's lease lapsed and nothing moved since
    assert abandoned.background.stalled(stall_seconds=STALL) == [SPLIT_NAME]
    capfd.readouterr()
    dag_id = dag_id_for(SPLIT_NAME)
    for _ in range(3):  # one stall signal after another: never a takeover run
        assert _heal(runs, migrations) == []
    report = runs.xcoms[-1][SPLIT_NAME]
    assert report["dag_id"] == dag_id and report["reason"] == reason
    assert [x[SPLIT_NAME]["reason"] for x in runs.xcoms] == [reason] * 3
    logged = "".join(capfd.readouterr())
    held = _held_lines(logged)
    # Warned once an episode (the later heals say it at info, below this session's level).
    assert [level for level, _ in held if level == "warning"] == ["warning"]
    assert says in held[0][1]
    assert "taking its run over" not in logged

    # Released (unpaused, a slot freed) yet still standing still: now it is stuck.
    assert _heal(FakeRuns(xcoms=runs.xcoms), migrations) == [dag_id]
    assert runs.xcoms[-1] == {}
    # Held again later: a new episode, warned about again.
    capfd.readouterr()
    assert _heal(FakeRuns(paused=True, xcoms=runs.xcoms), migrations) == []
    again = _held_lines("".join(capfd.readouterr()))
    assert [level for level, _ in again if level == "warning"] == ["warning"]


def test_the_heal_still_starts_and_takes_over_what_airflow_does_not_hold(
    abandoned: Migronaut, tmp_path: Path
) -> None:
    migrations = tmp_path / "migrations"
    dag_id = dag_id_for(SPLIT_NAME)
    # Within the stall time: a run is left alone; no run at all gets one, paused or not.
    assert _heal(FakeRuns(paused=True, waiting={"lane": 1}), migrations, stall_seconds=60) == []
    assert _heal(FakeRuns(active=0), migrations, stall_seconds=60) == [dag_id]
    assert _heal(FakeRuns(active=0, paused=True), migrations, stall_seconds=60) == [dag_id]
    time.sleep(STALL)
    # A stuck run (its tasks running or deferred, nothing waiting): taken over once.
    assert _heal(FakeRuns(), migrations) == [dag_id]
    assert _heal(FakeRuns(paused=None), migrations) == [dag_id]  # a DAG Airflow does not know
    assert _heal(FakeRuns(active=2), migrations) == []  # a takeover already runs: never a third


def test_migronaut_stalls_reports_a_queued_then_paused_migration_and_queues_nothing_more(
    dags_folder: Path,
    migronaut_connection: str,
    mongo_uri: str,
    db: Database[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """``dag.test()``: the heal asks Airflow through the Task SDK (DAG, runs, tasks)."""
    from airflow.models.dag import DagModel
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    from tests.support.dags import load_dags, xcom

    seed_users(db, 500)
    db.users.create_index([("_v", 1), ("_id", 1)])
    write_background(dags_folder, batch_size=100, per_document_seconds=0.01)
    with make_kit(mongo_uri, db, dags_folder, lock_ttl_seconds=TTL_SECONDS) as kit:
        kit.runs.up()
        assert kit.background.coordinate(SPLIT_NAME).next == "process"
        kit.background.run_slice(SPLIT_NAME, slice_ms=100)
    monkeypatch.setenv(STALL_ENV, "1")
    dags = load_dags()
    bg_dag = dag_id_for(SPLIT_NAME)
    with create_session() as session:  # earlier tests of this session ran this DAG id too
        session.query(DagRun).filter(DagRun.dag_id == bg_dag).delete()
    time.sleep(1.5)

    def heal() -> tuple[list[str], dict[str, Any], list[str]]:
        capfd.readouterr()
        run = dags[STALLS_DAG_ID].test()
        assert run.state == "success"
        warned = [
            line
            for line in "".join(capfd.readouterr()).splitlines()
            if "held by Airflow" in line and "warn" in line.split("heal:")[0]
        ]
        return xcom(run, "heal"), xcom(run, "heal", key="held"), warned

    def runs() -> list[str]:
        with create_session() as session:
            return [r.state for r in session.query(DagRun).filter(DagRun.dag_id == bg_dag)]

    # No run at all: the heal starts one (it stays queued: nobody schedules it here).
    assert heal()[0] == [bg_dag]
    assert runs() == ["queued"]
    # Still standing still, its one run queued: held, reported, nothing more queued.
    started, held, warned = heal()
    assert started == [] and runs() == ["queued"]
    assert held == {
        SPLIT_NAME: {"dag_id": bg_dag, "reason": "run_queued", "waiting": [], "pools": []}
    }
    assert len(warned) == 1 and "its DAG run is queued" in warned[0]
    # Paused with the toggle: a new episode, warned about once.
    with create_session() as session:
        session.query(DagModel).filter(DagModel.dag_id == bg_dag).update({"is_paused": True})
    for expect_warning in (True, False):
        started, held, warned = heal()
        assert started == [] and runs() == ["queued"]
        assert held[SPLIT_NAME]["reason"] == "paused"
        assert len(warned) == int(expect_warning)
        assert all("paused DAG" in line for line in warned)
