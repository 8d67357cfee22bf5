"""A lane frozen while Airflow thinks it runs is taken over by the stall watch, end to end.

Under a real ``airflow standalone`` and a real mongod: one lane (``max_parallel``
1, one long slice) works a slow migration while an application writes; its task
process is frozen (SIGSTOP). Its supervisor keeps heartbeating, so Airflow keeps
the task ``running`` forever, and the stuck run's sensor is told to wait an hour
for a live lease (``no_lease_grace_seconds``), so it does not rescue the run
either; ``migronaut_drift`` (whose heal would take the run over at its next
10-minute tick) stays paused. Only the stall watch is left: its trigger notices
the migration stood still for the stall time, ``migronaut_stalls`` starts a
takeover run with a newer round, and the migration completes, each document
migrated once, with no acknowledged application write lost. Thawed at last, the
frozen lane finds its lease gone and changes nothing.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
import pytest
from pymongo import MongoClient
from pymongo.database import Database

from migronaut_airflow.dags.factory import DRIFT_EVENTS_DAG_ID, STALLS_DAG_ID
from migronaut_airflow.operators.background import dag_id_for
from migronaut_core import Migronaut
from migronaut_core.config import BackgroundCollections
from migronaut_dev.airflow_standalone import AirflowStandalone, parse_time
from tests.support import kit_json
from tests.support.airflow import stall_watch_connected
from tests.support.app_writer import AppWriter
from tests.support.chaos import NAME, assert_nothing_lost, drive_remaining, seed, write_migration
from tests.support.standalone import Ground, Standalone, running_standalone

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

DOCUMENTS = 3_000
#: 10 ms a document: the one lane needs about 30 s, so the freeze lands mid-migration.
DOC_SECONDS = 0.01
#: Lease TTL: a frozen lane's lease lapses within seconds.
TTL_SECONDS = 5
STALL_SECONDS = 20
#: The drift DAG's tick, the only rescue before the stall watch.
DRIFT_TICK_SECONDS = 600
#: From the freeze to the migration completed: far below the drift tick.
RESCUE_BOUND_SECONDS = 180
DAG_OPTIONS = (
    f"stall=timedelta(seconds={STALL_SECONDS}), no_lease_grace_seconds=3600.0, "
    f"poll_interval=1.0, migronaut_config={{'lock_ttl_seconds': {TTL_SECONDS}}}, "
    # Paused at creation, as Airflow's default has it: the drift DAG must stay paused here.
    "paused_upon_creation=None"
)
#: The application writes until the migration is this far, then stops (the cluster
#: tests' pattern): the passes after that take the old-shape documents it inserted.
APP_WRITES_UNTIL = 0.9
NAMES = BackgroundCollections.from_prefix("migronaut_background")


@dataclass
class Setup:
    airflow: AirflowStandalone
    client: MongoClient[dict[str, Any]]
    db: Database[dict[str, Any]]
    kit: Migronaut
    migrations: Path
    mongo_uri: str


def _seed(ground: Ground) -> None:
    seed(ground.db, DOCUMENTS)
    # One lane, one slice that outlasts the migration: the lane holds its lease
    # (renewed every few seconds) from its first document until it is frozen.
    write_migration(
        ground.migrations,
        batch_size=100,
        max_parallel=1,
        doc_seconds=DOC_SECONDS,
        extra='"slice_ms": 600_000,',
    )


@pytest.fixture(scope="module")
def standalone(
    tmp_path_factory: pytest.TempPathFactory,
    mongo_uri: str,
    mongo_client: MongoClient[dict[str, Any]],
) -> Iterator[Standalone]:
    """A registered slow migration over :data:`DOCUMENTS` users, and Airflow with the watch."""
    with running_standalone(
        tmp_path_factory,
        "stall_takeover",
        mongo_uri,
        mongo_client,
        DAG_OPTIONS,
        seed=_seed,
        kit={"lock_ttl_seconds": TTL_SECONDS},
    ) as standalone:
        yield standalone


@pytest.fixture(scope="module")
def setup(standalone: Standalone, mongo_client: MongoClient[dict[str, Any]]) -> Setup:
    return Setup(
        standalone.airflow,
        mongo_client,
        standalone.db,
        standalone.kit,
        standalone.migrations,
        standalone.mongo_uri,
    )


def _talks_to_mongodb(process: psutil.Process) -> bool:
    """Whether a task runner is inside a slice: it has a TCP connection open.

    A task runner reaches Airflow only through its supervisor's socket pair.
    """
    try:
        listing = getattr(process, "net_connections", None) or process.connections  # psutil < 6
        connections = listing(kind="tcp")
    except psutil.Error:
        return False
    return any(conn.status == psutil.CONN_ESTABLISHED for conn in connections)


def _stall_events(setup: Setup) -> list[dict[str, Any]]:
    """The stall trigger's asset events (payload and timestamp), oldest first."""
    answer = setup.airflow.request(
        "GET", "/api/v2/assets/events", params={"limit": 1000, "order_by": "timestamp"}
    )
    return [
        {"payload": dict(event["extra"]["payload"]), "timestamp": event["timestamp"]}
        for event in answer["asset_events"]
        if (event.get("extra") or {}).get("from_trigger")
        and event["extra"]["payload"].get("status") == "stalled"
    ]


def _seconds_after(moment: datetime | str | None, start: float) -> float:
    """Seconds from the wall-clock time ``start`` to ``moment`` (an aware time or API string)."""
    when = parse_time(moment) if isinstance(moment, str) or moment is None else moment
    assert when is not None
    return when.timestamp() - start


def _documents(db: Database[dict[str, Any]]) -> list[dict[str, Any]]:
    return list(db.users.find().sort("_id", 1))


def test_a_frozen_lane_is_taken_over_by_the_stall_watch_long_before_the_drift_tick(
    setup: Setup,
) -> None:
    airflow, db, kit = setup.airflow, setup.db, setup.kit
    dag_id = dag_id_for(NAME)
    for watched in (dag_id, STALLS_DAG_ID):
        airflow.wait_for_dag(watched)
        airflow.unpause(watched)
    # Neither drift DAG may be what rescues the run: both stay paused.
    for idle in ("migronaut_drift", DRIFT_EVENTS_DAG_ID):
        assert airflow.wait_for_dag(idle)["is_paused"] is True
    airflow.wait_until(
        lambda: stall_watch_connected(setup.client), 120, "the stall trigger never connected"
    )

    app = AppWriter(setup.mongo_uri, db.name, DOCUMENTS, pause=0.005).start()
    frozen: psutil.Process | None = None
    thawed = False
    try:
        first_run = airflow.trigger(dag_id, {"reason": "e2e stall"})

        def busy_lane() -> tuple[dict[str, Any], psutil.Process] | None:
            """The first run's lane, running, with its task process inside its slice."""
            if db.users.count_documents({"_v": 2}) < 300:
                return None
            for ti in airflow.task_instances(dag_id, first_run):
                if ti["task_id"] != "lane" or ti["state"] != "running":
                    continue
                process = airflow.task_process(ti["id"])
                if process is not None and _talks_to_mongodb(process):
                    return ti, process
            return None

        lane, frozen = airflow.wait_until(busy_lane, 180, "no lane was working")
        supervisor = frozen.parent()
        assert supervisor is not None and supervisor.pid != frozen.pid
        frozen.send_signal(signal.SIGSTOP)  # the task process only, never its supervisor
        frozen_wall = time.time()
        airflow.wait_until(
            lambda: frozen.status() == psutil.STATUS_STOPPED, 10, "the lane did not stop"
        )
        assert lane["pid"] in (None, frozen.pid)  # the task runner Airflow recorded
        migrated_at_freeze = db.users.count_documents({"_v": 2})
        assert migrated_at_freeze < DOCUMENTS

        # The watch signals the stall (noted in MongoDB before the asset event) ...
        noted = airflow.wait_until(
            lambda: db[NAMES.drift_events].find_one({"_id": {"stall": NAME}}),
            STALL_SECONDS + 120,
            "the stall watch never signalled",
        )
        signalled_after = _seconds_after(noted["fired_at"], frozen_wall)
        # ... migronaut_stalls runs on the asset event and starts a takeover run.
        takeover = airflow.wait_until(
            lambda: next(
                (
                    run
                    for run in airflow.dag_runs(dag_id)
                    if run["dag_run_id"] != first_run and run.get("start_date")
                ),
                None,
            ),
            180,
            "no takeover run started",
        )
        takeover_after = _seconds_after(takeover["start_date"], frozen_wall)

        def far_enough() -> bool:
            state = db[NAMES.state].find_one({"_id": NAME}) or {}
            assert state.get("status") not in ("failed", "cancelled"), state
            migrated = db.users.count_documents({"_v": 2})
            return migrated >= DOCUMENTS * APP_WRITES_UNTIL or state.get("status") == "completed"

        airflow.wait_until(far_enough, RESCUE_BOUND_SECONDS, "the takeover did not get far")
        app.stop()

        def completed() -> dict[str, Any] | None:
            state = db[NAMES.state].find_one({"_id": NAME}) or {}
            assert state.get("status") not in ("failed", "cancelled"), state
            return state if state.get("status") == "completed" else None

        state = airflow.wait_until(completed, RESCUE_BOUND_SECONDS, f"{NAME} did not complete")
        completed_after = _seconds_after(state["completed_at"], frozen_wall)
        stalls_runs = airflow.dag_runs(STALLS_DAG_ID)
        stalls_started_after = [
            round(_seconds_after(run["start_date"], frozen_wall), 1)
            for run in stalls_runs
            if run.get("start_date")
        ]
        print(
            f"\nfroze lane {lane['map_index']} of {first_run} (pid {frozen.pid}, supervisor "
            f"{supervisor.pid}) with {migrated_at_freeze} of {DOCUMENTS} migrated; after the "
            f"freeze: stall signalled {signalled_after:.1f} s, migronaut_stalls run(s) started "
            f"{stalls_started_after} s, takeover run started {takeover_after:.1f} s, "
            f"completed {completed_after:.1f} s (stall time {STALL_SECONDS} s, lease TTL "
            f"{TTL_SECONDS} s, drift tick {DRIFT_TICK_SECONDS} s)"
        )

        # Not before the stall time, and the whole rescue far below the drift tick.
        # (its last checkpoint came at most a batch, about a second, before the freeze)
        assert signalled_after >= STALL_SECONDS - 3
        assert signalled_after < takeover_after < completed_after
        assert completed_after < RESCUE_BOUND_SECONDS < DRIFT_TICK_SECONDS

        # Airflow still thinks the frozen lane runs; it was the stall watch that rescued it.
        assert frozen.status() == psutil.STATUS_STOPPED
        assert supervisor.status() != psutil.STATUS_STOPPED
        stuck = next(
            ti
            for ti in airflow.task_instances(dag_id, first_run)
            if ti["task_id"] == "lane" and ti["map_index"] == lane["map_index"]
        )
        assert stuck["state"] == "running", stuck
        assert airflow.run_state(dag_id, first_run) == "running"
        assert any(run["run_type"] == "asset_triggered" for run in stalls_runs), stalls_runs
        assert takeover["conf"] == {"reason": "stall"}, takeover
        assert airflow.dag_runs("migronaut_drift") == []
        assert airflow.dag_runs(DRIFT_EVENTS_DAG_ID) == []
        events = _stall_events(setup)
        assert events, "no stall asset event"
        assert events[0]["payload"]["migrations"] == [NAME]
        assert set(events[0]["payload"]) == {"status", "migrations", "idle_seconds"}
        assert events[0]["payload"]["idle_seconds"][NAME] >= STALL_SECONDS
        assert all(_seconds_after(e["timestamp"], frozen_wall) > 0 for e in events), events
        # The takeover took a newer round: the stuck run's later steps bow out.
        stuck_round = airflow.xcom(dag_id, first_run, "coordinate", key="round")
        taken_round = airflow.xcom(dag_id, takeover["dag_run_id"], "coordinate", key="round")
        assert taken_round > stuck_round

        # Exact before the thaw: every migrated document counted once.
        view = dict(kit_json.status(kit, NAME) or {})
        migrated = db.users.count_documents({"_v": 2})
        assert view["totals"]["migrated"] == migrated
        assert db.users.count_documents({"migrated_times": {"$ne": 1}, "_v": 2}) == 0
        before_thaw = _documents(db)

        frozen.send_signal(signal.SIGCONT)
        thawed = True
    finally:
        if frozen is not None and not thawed:
            frozen.send_signal(signal.SIGCONT)
        with contextlib.suppress(AssertionError):
            app.stop()

    # Thawed, the lane finds its lease gone; its run ends, its round superseded.
    assert frozen is not None
    _, still = psutil.wait_procs([frozen], timeout=120)
    assert not still, "the thawed lane's task process did not end"
    runs = airflow.wait_until(
        lambda: (
            (found := airflow.dag_runs(dag_id))
            and all(run["state"] in ("success", "failed") for run in found)
            and found
        ),
        180,
        f"{dag_id} kept running",
    )
    stuck_continue = airflow.xcom(dag_id, first_run, "continue")
    print(
        f"after the thaw: stuck lane {airflow.xcom(dag_id, first_run, 'lane', lane['map_index'])}"
        f", its continue {stuck_continue['next']}; {len(runs)} run(s) of {dag_id}: "
        f"{[(run['conf'].get('reason'), run['state']) for run in runs]}"
    )
    # Its closing step starts nothing: the migration completed (``done``), or, had the
    # takeover still been working, its round was no longer the latest (``superseded``).
    assert stuck_continue["next"] == "superseded" or stuck_continue == {
        **stuck_continue,
        "next": "done",
        "status": "completed",
    }, stuck_continue
    assert [run["state"] for run in runs] == ["success"] * len(runs), runs
    # Its late writes changed nothing: every document and the totals as before.
    assert _documents(db) == before_thaw
    assert dict(kit_json.status(kit, NAME) or {})["totals"] == view["totals"]
    assert all(run["state"] == "success" for run in airflow.dag_runs(STALLS_DAG_ID))

    # An insert after the last pass counted none is drift (the design reopens it).
    reopened = drive_remaining(setup.mongo_uri, db.name, setup.migrations)
    final = assert_nothing_lost(db, setup.mongo_uri, setup.migrations, app, DOCUMENTS)
    print(
        f"totals {final['totals']}; app writes {app.acknowledged} (inserted "
        f"{len(app.inserted)}, refused {app.refused}); reopened after completion: {reopened}"
    )
    assert final["totals"]["migrated"] == DOCUMENTS + len(app.inserted)
