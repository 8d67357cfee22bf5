"""A migration Airflow itself holds is not a stall: no takeover run, a clear report.

Under a real ``airflow standalone`` and a real mongod, one slow migration (one
lane, short slices, its lanes in a pool of their own) with the stall watch on and
a short stall time. Twice it stands still longer than two stall periods, each
time for a reason of Airflow's own:

(a) its DAG is **paused** with the toggle mid-migration: the deferred lane is
    not scheduled again and its lease lapses;
(b) its lane pool has **0 free slots**: the lane waits ``scheduled`` for a slot.

Each time the stall trigger fires and ``migronaut_stalls`` runs, but its heal
starts nothing (the REST API counts the migration's DAG runs: none added, none
with the takeover's ``reason: stall``) and reports the migration held, saying
why (its XCom ``held``). Unpaused, then with the pool's slot back, the migration
completes. Only the stall watch could add runs here: the drift DAGs stay paused
and the sensor waits an hour for a live lease.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pytest
from pymongo import MongoClient
from pymongo.database import Database

from migronaut_airflow.dags.factory import STALLS_DAG_ID
from migronaut_airflow.operators.background import dag_id_for
from migronaut_core import Migronaut
from migronaut_core.config import BackgroundCollections
from migronaut_dev.airflow_standalone import AirflowStandalone, parse_time
from tests.support.airflow import stall_watch_connected
from tests.support.chaos import NAME, seed, write_migration
from tests.support.standalone import Ground, Standalone, running_standalone

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

DOCUMENTS = 2_000
#: 10 ms a document, slices of 2 s: the lane defers (and frees its slot) between slices.
DOC_SECONDS = 0.01
TTL_SECONDS = 4
STALL_SECONDS = 15
POOL = "held_lanes"
DAG_OPTIONS = (
    f"stall=timedelta(seconds={STALL_SECONDS}), no_lease_grace_seconds=3600.0, "
    f"poll_interval=1.0, migronaut_config={{'lock_ttl_seconds': {TTL_SECONDS}}}, "
    f"lane_pool={POOL!r}, "
    # Paused at creation: the drift DAGs, whose heal could start runs too, stay paused.
    "paused_upon_creation=None"
)
NAMES = BackgroundCollections.from_prefix("migronaut_background")


@dataclass
class Setup:
    airflow: AirflowStandalone
    client: MongoClient[dict[str, Any]]
    db: Database[dict[str, Any]]
    kit: Migronaut


def _seed(ground: Ground) -> None:
    seed(ground.db, DOCUMENTS)
    write_migration(
        ground.migrations,
        batch_size=100,
        max_parallel=1,
        doc_seconds=DOC_SECONDS,
        extra='"slice_ms": 2_000,',
    )


@pytest.fixture(scope="module")
def standalone(
    tmp_path_factory: pytest.TempPathFactory,
    mongo_uri: str,
    mongo_client: MongoClient[dict[str, Any]],
) -> Iterator[Standalone]:
    """A registered slow migration and Airflow with the stall watch and a lane pool."""
    with running_standalone(
        tmp_path_factory,
        "stall_held",
        mongo_uri,
        mongo_client,
        DAG_OPTIONS,
        seed=_seed,
        kit={"lock_ttl_seconds": TTL_SECONDS},
    ) as standalone:
        standalone.airflow.request(
            "POST",
            "/api/v2/pools",
            json={"name": POOL, "slots": 1, "include_deferred": False},
        )
        yield standalone


@pytest.fixture(scope="module")
def setup(standalone: Standalone, mongo_client: MongoClient[dict[str, Any]]) -> Setup:
    return Setup(standalone.airflow, mongo_client, standalone.db, standalone.kit)


def _migrated(setup: Setup) -> int:
    return setup.db.users.count_documents({"_v": 2})


def _set_pool_slots(setup: Setup, slots: int) -> None:
    setup.airflow.request(
        "PATCH",
        f"/api/v2/pools/{POOL}",
        params={"update_mask": "slots"},
        json={"pool": POOL, "slots": slots, "include_deferred": False},
    )


def _set_paused(setup: Setup, dag_id: str, paused: bool) -> None:
    setup.airflow.request("PATCH", f"/api/v2/dags/{quote(dag_id)}", json={"is_paused": paused})


def _stalls_runs_since(setup: Setup, moment: float) -> list[dict[str, Any]]:
    """``migronaut_stalls`` runs that started after ``moment`` and succeeded."""
    return [
        run
        for run in setup.airflow.dag_runs(STALLS_DAG_ID)
        if run["state"] == "success"
        and (started := parse_time(run.get("start_date"))) is not None
        and started.timestamp() > moment
    ]


def _held_for_two_stall_periods(setup: Setup, dag_id: str) -> list[dict[str, Any]]:
    """Wait until the watch signalled twice while held; each heal's report, oldest first.

    Meanwhile the migration's DAG gains no run: each heal started nothing.
    """
    airflow = setup.airflow
    runs_before = [run["dag_run_id"] for run in airflow.dag_runs(dag_id)]
    since = time.time()
    airflow.wait_until(
        lambda: setup.kit.background.stalled(stall_seconds=STALL_SECONDS) == [NAME],
        STALL_SECONDS + 60,
        "the migration never stood still",
    )
    heals = airflow.wait_until(
        lambda: (found := _stalls_runs_since(setup, since)) and len(found) >= 2 and found,
        3 * STALL_SECONDS + 90,
        "the stall watch did not signal twice",
    )
    held_for = time.time() - since
    reports = []
    for run in heals:
        assert airflow.xcom(STALLS_DAG_ID, run["dag_run_id"], "heal") == [], run
        reports.append(airflow.xcom(STALLS_DAG_ID, run["dag_run_id"], "heal", key="held"))
    runs_after = [run["dag_run_id"] for run in airflow.dag_runs(dag_id)]
    print(
        f"\nheld {held_for:.0f} s (stall {STALL_SECONDS} s): {len(heals)} migronaut_stalls "
        f"run(s), reports {[r.get(NAME) for r in reports]}, {dag_id} runs "
        f"{len(runs_before)} → {len(runs_after)}"
    )
    assert held_for > 2 * STALL_SECONDS
    assert runs_after == runs_before  # no takeover run queued
    return reports


def test_a_paused_dag_and_a_full_pool_are_held_not_stalled_then_the_migration_completes(
    setup: Setup,
) -> None:
    airflow, db = setup.airflow, setup.db
    dag_id = dag_id_for(NAME)
    for watched in (dag_id, STALLS_DAG_ID):
        airflow.wait_for_dag(watched)
        airflow.unpause(watched)
    for idle in ("migronaut_drift", "migronaut_drift_events"):
        assert airflow.wait_for_dag(idle)["is_paused"] is True
    airflow.wait_until(
        lambda: stall_watch_connected(setup.client), 120, "the stall trigger never connected"
    )
    airflow.trigger(dag_id, {"reason": "e2e held"})
    airflow.wait_until(lambda: _migrated(setup) >= 300, 180, "the lane never got going")

    # (a) Paused with the toggle mid-migration.
    _set_paused(setup, dag_id, True)
    paused_at = _migrated(setup)
    reports = _held_for_two_stall_periods(setup, dag_id)
    assert all(
        report[NAME] == {"dag_id": dag_id, "reason": "paused", "waiting": [], "pools": []}
        for report in reports
    ), reports
    assert _migrated(setup) < DOCUMENTS
    _set_paused(setup, dag_id, False)
    airflow.wait_until(
        lambda: _migrated(setup) >= paused_at + 300, 120, "unpaused, it did not go on"
    )

    # (b) Its lanes' pool has no free slot: the lane waits for one, scheduled.
    _set_pool_slots(setup, 0)
    reports = _held_for_two_stall_periods(setup, dag_id)
    for report in reports:
        assert report[NAME]["reason"] == "waiting_for_slot", reports
        assert "lane" in report[NAME]["waiting"] and POOL in report[NAME]["pools"], reports
    assert _migrated(setup) < DOCUMENTS
    _set_pool_slots(setup, 1)

    def completed() -> dict[str, Any] | None:
        state = db[NAMES.state].find_one({"_id": NAME}) or {}
        assert state.get("status") not in ("failed", "cancelled"), state
        return state if state.get("status") == "completed" else None

    airflow.wait_until(completed, 180, f"{NAME} did not complete")
    runs = airflow.wait_until(
        lambda: (
            (found := airflow.dag_runs(dag_id))
            and all(run["state"] in ("success", "failed") for run in found)
            and found
        ),
        120,
        f"{dag_id} kept running",
    )
    print(f"{dag_id} runs: {[(run['conf'].get('reason'), run['state']) for run in runs]}")
    # No takeover ever: every run was the first one or a round's own continuation.
    assert all(run["conf"].get("reason") != "stall" for run in runs), runs
    assert [run["state"] for run in runs] == ["success"] * len(runs), runs
    assert db.users.count_documents({"_v": 2}) == DOCUMENTS
    assert db.users.count_documents({"migrated_times": {"$ne": 1}, "_v": 2}) == 0
