"""End to end under a real ``airflow standalone``: REST, LocalExecutor, a real mongod.

One Airflow instance (its start-up is the slow part) serves both tests: the DAG
file is a copy of ``dags/migronaut_dags.py`` with shorter waits and retry delays,
and each test drives its own background migration, on its own collection, only
through the REST API. The migrations are registered with the kit first, as
``migronaut up`` would.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psutil
import pytest
from pymongo import MongoClient
from pymongo.database import Database

from migronaut_airflow.operators.background import dag_id_for
from migronaut_core import Migronaut
from migronaut_dev.airflow_standalone import AirflowStandalone, overlapping
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, seed_users, write_background
from tests.support.standalone import Ground, Standalone, running_standalone

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

USERS = 20_000
ACCOUNTS = 2_400
SLOW_NAME = "20240102000000_touch_accounts_slowly"
#: 10 ms a document: three lanes take 8 s, in slices of up to 10 s.
SLOW_MIGRATION = """
import time

description = "Touch every account, slowly"

background = {
    "collection": "accounts",
    "from": 1,
    "to": 2,
    "batch_size": 25,
    "max_parallel": 3,
    "slice_ms": 10_000,
}


def migrate(doc, ctx):
    time.sleep(0.01)
    doc["touched"] = True
    return doc
"""
PAUSED_NAME = "20240103000000_touch_ledgers_slowly"
LEDGERS = 3_000
#: 1 s slices of 10 ms documents: a paused DAG's lanes stop at the next boundary.
PAUSED_MIGRATION = SLOW_MIGRATION.replace('"accounts"', '"ledgers"').replace(
    '"slice_ms": 10_000', '"slice_ms": 1_000'
)
#: What the DAG file copy passes to ``build_dags``: short waits, a short lease TTL
#: (a killed lane's lease lapses in 4 s) and 1 s before a lane's retry. Lanes take
#: their slice length from each migration.
DAG_OPTIONS = (
    "lane_retry_delay=timedelta(seconds=1), no_lease_grace_seconds=5.0, "
    "poll_interval=1.0, migronaut_config={'lock_ttl_seconds': 4}, "
    # Paused at creation, as Airflow's default has it: these tests unpause what they run.
    "paused_upon_creation=None"
)


@dataclass
class Setup:
    airflow: AirflowStandalone
    db: Database[dict[str, Any]]
    kit: Migronaut

    def status(self, name: str) -> dict[str, Any]:
        return dict(kit_json.status(self.kit, name))

    def wait_completed(self, name: str, timeout: float) -> dict[str, Any]:
        def completed() -> dict[str, Any] | None:
            status = self.status(name)
            assert status["status"] not in ("failed", "cancelled"), status
            return status if status["status"] == "completed" else None

        return dict(self.airflow.wait_until(completed, timeout, f"{name} did not complete"))

    def wait_runs_finished(self, dag_id: str, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Every run of ``dag_id`` once none is queued or running."""

        def finished() -> list[dict[str, Any]] | None:
            runs = self.airflow.dag_runs(dag_id)
            return runs if all(run["state"] in ("success", "failed") for run in runs) else None

        return list(self.airflow.wait_until(finished, timeout, f"{dag_id} kept running"))

    def lanes(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        return [ti for ti in self.airflow.task_instances(dag_id, run_id) if ti["task_id"] == "lane"]


def _seed(ground: Ground) -> None:
    db, migrations = ground.db, ground.migrations
    seed_users(db, USERS)
    db.users.create_index([("_v", 1), ("_id", 1)])
    db.accounts.insert_many([{"_id": i, "_v": 1} for i in range(ACCOUNTS)])
    db.accounts.create_index([("_v", 1), ("_id", 1)])
    # 0.5 s slices: lanes defer between them and resume from the real triggerer
    # (20,000 documents keep three lanes busy for longer than one slice, however fast).
    write_background(migrations, batch_size=100, max_parallel=3, extra='"slice_ms": 500,')
    write_background(migrations, SLOW_NAME, body=SLOW_MIGRATION)
    db.ledgers.insert_many([{"_id": i, "_v": 1} for i in range(LEDGERS)])
    write_background(migrations, PAUSED_NAME, body=PAUSED_MIGRATION)


@pytest.fixture(scope="module")
def standalone(
    tmp_path_factory: pytest.TempPathFactory,
    mongo_uri: str,
    mongo_client: MongoClient[dict[str, Any]],
) -> Iterator[Standalone]:
    """Two registered background migrations over seeded data, and Airflow running them."""
    # The kit's up registers both background migrations; their DAGs run them.
    with running_standalone(
        tmp_path_factory, "standalone", mongo_uri, mongo_client, DAG_OPTIONS, seed=_seed, kit={}
    ) as standalone:
        yield standalone


@pytest.fixture(scope="module")
def setup(standalone: Standalone) -> Setup:
    return Setup(standalone.airflow, standalone.db, standalone.kit)


def test_parallel_lanes_migrate_every_document(setup: Setup) -> None:
    airflow, dag_id = setup.airflow, dag_id_for(SPLIT_NAME)
    airflow.wait_for_dag(dag_id)
    airflow.unpause(dag_id)
    first = airflow.trigger(dag_id, {"reason": "e2e"})

    status = setup.wait_completed(SPLIT_NAME, timeout=180)
    runs = setup.wait_runs_finished(dag_id)

    assert status["totals"]["migrated"] == USERS, status["totals"]
    assert setup.db.users.count_documents({"_v": 2}) == USERS
    assert setup.db.users.count_documents({"name": {"$exists": True}}) == 0
    assert setup.db.users.find_one({"_id": 7}, {"_id": 0, "first": 1, "last": 1}) == {
        "first": "First7",
        "last": "Last7",
    }
    assert first in {run["dag_run_id"] for run in runs}
    assert [run["state"] for run in runs] == ["success"] * len(runs), runs
    lanes_by_run = {run["dag_run_id"]: setup.lanes(dag_id, run["dag_run_id"]) for run in runs}
    print(
        f"\n{len(runs)} run(s); lanes per run:",
        {
            run: [(ti["map_index"], ti["state"], ti["start_date"], ti["end_date"]) for ti in tis]
            for run, tis in lanes_by_run.items()
        },
    )
    assert {ti["map_index"] for ti in lanes_by_run[first]} == {0, 1, 2}
    assert any(overlapping(tis) for tis in lanes_by_run.values()), "no two lanes ran at once"
    slices = [
        airflow.xcom(dag_id, first, "lane", ti["map_index"])["slices"] for ti in lanes_by_run[first]
    ]
    assert sum(slices) > len(slices), f"no lane deferred between slices: {slices}"


def test_a_lane_killed_mid_slice_is_retried_and_totals_stay_exact(setup: Setup) -> None:
    airflow, dag_id = setup.airflow, dag_id_for(SLOW_NAME)
    airflow.wait_for_dag(dag_id)
    airflow.unpause(dag_id)
    airflow.trigger(dag_id, {"reason": "e2e kill"})

    def busy_lane() -> tuple[str, dict[str, Any], psutil.Process] | None:
        """A running lane whose task process is inside a slice while documents move."""
        if setup.db.accounts.count_documents({"_v": 2}) == 0:
            return None
        for run in airflow.dag_runs(dag_id):
            if run["state"] != "running":
                continue
            for ti in setup.lanes(dag_id, run["dag_run_id"]):
                process = airflow.task_process(ti["id"]) if ti["state"] == "running" else None
                if process is not None and _talks_to_mongodb(process):
                    return run["dag_run_id"], ti, process
        return None

    run_id, victim, process = airflow.wait_until(busy_lane, 120, "no lane was busy")
    assert victim["try_number"] == 1
    assert victim["pid"] in (None, process.pid)  # the task runner Airflow recorded
    migrated_before = setup.db.accounts.count_documents({"_v": 2})
    process.kill()  # SIGKILL: no finally, no release; the lease must lapse
    process.wait(timeout=10)
    assert setup.db.accounts.count_documents({"_v": 2}) < ACCOUNTS

    status = setup.wait_completed(SLOW_NAME, timeout=180)
    runs = setup.wait_runs_finished(dag_id)

    retried = next(
        ti for ti in setup.lanes(dag_id, run_id) if ti["map_index"] == victim["map_index"]
    )
    print(
        f"\nkilled lane {victim['map_index']} of {run_id} (pid {process.pid}) with "
        f"{migrated_before} documents migrated; now try {retried['try_number']}, "
        f"{retried['state']}; {len(runs)} run(s): {[run['state'] for run in runs]}"
    )
    assert retried["try_number"] > 1, retried
    assert retried["state"] == "success", retried
    tries = airflow.task_tries(dag_id, run_id, "lane", victim["map_index"])
    print("tries of the killed lane:", [(ti["try_number"], ti["state"]) for ti in tries])
    assert tries[0]["try_number"] == 1
    assert tries[0]["state"] == "failed", tries[0]  # the killed try, kept in the history
    assert [run["state"] for run in runs] == ["success"] * len(runs), runs
    assert status["totals"]["migrated"] == ACCOUNTS, status["totals"]
    assert setup.db.accounts.count_documents({"_v": 2, "touched": True}) == ACCOUNTS


def _talks_to_mongodb(process: psutil.Process) -> bool:
    """Whether a task runner is inside a slice: it has a TCP connection open.

    A task runner reaches Airflow only through its supervisor's socket pair, and a
    lane opens its MongoDB client for a slice and closes it before deferring.
    """
    try:
        listing = getattr(process, "net_connections", None) or process.connections  # psutil < 6
        connections = listing(kind="tcp")
    except psutil.Error:
        return False
    return any(conn.status == psutil.CONN_ESTABLISHED for conn in connections)


def test_pausing_the_dag_stops_its_lanes_at_the_next_slice_and_unpausing_continues(
    setup: Setup,
) -> None:
    airflow, dag_id = setup.airflow, dag_id_for(PAUSED_NAME)
    airflow.wait_for_dag(dag_id)
    airflow.unpause(dag_id)
    airflow.trigger(dag_id)

    def touched() -> int:
        return setup.db.ledgers.count_documents({"_v": 2})

    airflow.wait_until(lambda: touched() >= 300, 120, "the lanes never started")
    airflow.request("PATCH", f"/api/v2/dags/{dag_id}", json={"is_paused": True})
    # A lane finishes the slice it is in (1 s), then defers and is not scheduled again.
    airflow.wait_until(
        lambda: setup.status(PAUSED_NAME)["live_leases"] == 0, 60, "lanes kept going"
    )
    stopped_at = touched()
    time.sleep(8)
    assert touched() == stopped_at < LEDGERS
    airflow.unpause(dag_id)
    status = setup.wait_completed(PAUSED_NAME, timeout=240)
    assert status["totals"]["migrated"] == LEDGERS
    assert touched() == LEDGERS
