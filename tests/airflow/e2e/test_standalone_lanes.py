"""Lanes under a real ``airflow standalone``: a pool caps them, and a lane task marked
failed gives its partition back at once.

One Airflow instance serves both tests. Its DAG file puts every lane in the pool
``migronaut_lanes`` (2 slots, created through the REST API before any run) and sets a
60 s lease TTL, so a partition claimed again within seconds was released by
``on_kill``, not reaped after its lease lapsed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.database import Database

from migronaut_airflow.operators.background import dag_id_for
from migronaut_core import Migronaut
from migronaut_dev.airflow_standalone import AirflowStandalone
from tests.support import kit_json
from tests.support.background import write_background
from tests.support.standalone import Ground, Standalone, running_standalone

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

POOL = "migronaut_lanes"
POOL_SLOTS = 2
TTL_SECONDS = 60
DAG_OPTIONS = (
    f"lane_pool={POOL!r}, lane_retry_delay=timedelta(seconds=1), no_lease_grace_seconds=5.0, "
    f"poll_interval=1.0, migronaut_config={{'lock_ttl_seconds': {TTL_SECONDS}}}, "
    # Paused at creation, as Airflow's default has it: these tests unpause what they run.
    "paused_upon_creation=None"
)
SLOW = """
import time

description = "Touch every {collection} document, slowly"

background = {{
    "collection": "{collection}",
    "from": 1,
    "to": 2,
    "batch_size": 20,
    "max_parallel": {max_parallel},
    "slice_ms": {slice_ms},
}}


def migrate(doc, ctx):
    time.sleep({per_document_seconds})
    doc["touched"] = doc.get("touched", 0) + 1
    return doc
"""
POOLED_NAME = "20240201000000_touch_orders"
#: 4,000: four partitions (a partition is planned per 1,000 documents), so four lanes are mapped.
POOLED_DOCUMENTS = 4_000
KILLED_NAME = "20240202000000_touch_invoices"
KILLED_DOCUMENTS = 900


@dataclass
class Setup:
    airflow: AirflowStandalone
    db: Database[dict[str, Any]]
    kit: Migronaut

    def wait_completed(self, name: str, timeout: float) -> dict[str, Any]:
        def completed() -> dict[str, Any] | None:
            status = dict(kit_json.status(self.kit, name) or {})
            assert status.get("status") not in ("failed", "cancelled"), status
            return status if status.get("status") == "completed" else None

        return dict(self.airflow.wait_until(completed, timeout, f"{name} did not complete"))

    def live_leases(self, name: str) -> int:
        return int((kit_json.status(self.kit, name) or {}).get("live_leases", 0))

    def start(self, name: str) -> str:
        dag_id = dag_id_for(name)
        self.airflow.wait_for_dag(dag_id)
        self.airflow.unpause(dag_id)
        return self.airflow.trigger(dag_id, {"reason": "e2e"})


def _seed(ground: Ground) -> None:
    db, migrations = ground.db, ground.migrations
    db.orders.insert_many([{"_id": i, "_v": 1} for i in range(POOLED_DOCUMENTS)])
    db.invoices.insert_many([{"_id": i, "_v": 1} for i in range(KILLED_DOCUMENTS)])
    for collection in ("orders", "invoices"):
        db[collection].create_index([("_v", 1), ("_id", 1)])
    pooled = SLOW.format(
        collection="orders", max_parallel=4, slice_ms=4_000, per_document_seconds=0.002
    )
    write_background(migrations, POOLED_NAME, body=pooled)
    # One slot and long slices: the lane holds its lease until it is killed.
    killed = SLOW.format(
        collection="invoices", max_parallel=1, slice_ms=600_000, per_document_seconds=0.01
    )
    write_background(migrations, KILLED_NAME, body=killed)


@pytest.fixture(scope="module")
def standalone(
    tmp_path_factory: pytest.TempPathFactory,
    mongo_uri: str,
    mongo_client: MongoClient[dict[str, Any]],
) -> Iterator[Standalone]:
    with running_standalone(
        tmp_path_factory,
        "standalone_lanes",
        mongo_uri,
        mongo_client,
        DAG_OPTIONS,
        seed=_seed,
        kit={"lock_ttl_seconds": TTL_SECONDS},
        # A loaded machine can take minutes to bring Airflow's processes up.
    ) as standalone:
        standalone.airflow.request(
            "POST",
            "/api/v2/pools",
            json={"name": POOL, "slots": POOL_SLOTS, "include_deferred": False},
        )
        yield standalone


@pytest.fixture(scope="module")
def setup(standalone: Standalone) -> Setup:
    return Setup(standalone.airflow, standalone.db, standalone.kit)


def test_a_pool_of_two_caps_four_lanes_at_two_and_the_migration_completes(setup: Setup) -> None:
    peak = {"leases": 0}
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.2):
            peak["leases"] = max(peak["leases"], setup.live_leases(POOLED_NAME))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    run_id = setup.start(POOLED_NAME)
    try:
        running_peak = 0
        deadline = time.monotonic() + 420
        while (kit_json.status(setup.kit, POOLED_NAME) or {}).get("status") != "completed":
            assert time.monotonic() < deadline, "the pooled migration did not complete"
            lanes = [
                ti
                for run in setup.airflow.dag_runs(dag_id_for(POOLED_NAME))
                for ti in setup.airflow.task_instances(dag_id_for(POOLED_NAME), run["dag_run_id"])
                if ti["task_id"] == "lane"
            ]
            running_peak = max(running_peak, sum(ti["state"] == "running" for ti in lanes))
            assert all(ti["pool"] == POOL for ti in lanes)
            time.sleep(0.3)
    finally:
        done.set()
        sampler.join(timeout=5)
    status = setup.wait_completed(POOLED_NAME, 10)
    mapped = setup.airflow.task_instances(dag_id_for(POOLED_NAME), run_id)
    print(
        f"\nlanes mapped in the first run: {sum(ti['task_id'] == 'lane' for ti in mapped)}; "
        f"peak running lane tasks {running_peak}, peak live leases {peak['leases']}"
    )
    assert sum(ti["task_id"] == "lane" for ti in mapped) == 4  # max_parallel lanes were asked
    assert peak["leases"] <= POOL_SLOTS
    assert running_peak <= POOL_SLOTS
    assert peak["leases"] == POOL_SLOTS  # and the pool was used to the full
    assert status["totals"]["migrated"] == POOLED_DOCUMENTS
    assert setup.db.orders.count_documents({"_v": 2, "touched": 1}) == POOLED_DOCUMENTS


def test_a_lane_marked_failed_releases_its_lease_for_the_next_claim_at_once(
    setup: Setup,
) -> None:
    airflow, dag_id = setup.airflow, dag_id_for(KILLED_NAME)
    run_id = setup.start(KILLED_NAME)

    def working_lane() -> dict[str, Any] | None:
        if setup.db.invoices.count_documents({"_v": 2}) < 100 or not setup.live_leases(KILLED_NAME):
            return None
        return next(
            (
                ti
                for ti in airflow.task_instances(dag_id, run_id)
                if ti["task_id"] == "lane" and ti["state"] == "running"
            ),
            None,
        )

    lane = airflow.wait_until(working_lane, 180, "no lane was working")
    marked_at = time.monotonic()
    airflow.request(
        "PATCH",
        f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/lane/{lane['map_index']}",
        json={"new_state": "failed"},
    )
    airflow.wait_until(
        lambda: setup.live_leases(KILLED_NAME) == 0, TTL_SECONDS, "the lease was never released"
    )
    released_within = time.monotonic() - marked_at
    stopped_at = setup.db.invoices.count_documents({"_v": 2})
    # One slot (max_parallel 1): this claim succeeds only because the lease was given back.
    successor = setup.kit.background.run_slice(KILLED_NAME, slice_ms=300)
    claimed_within = time.monotonic() - marked_at
    print(
        f"\nlane {lane['map_index']} marked failed with {stopped_at} migrated; lease released "
        f"after {released_within:.1f} s, claimed again after {claimed_within:.1f} s "
        f"({successor.outcome}, {successor.counters.get('migrated', 0)} migrated)"
    )
    assert successor.outcome in ("yielded", "exhausted"), successor
    assert successor.counters["migrated"] > 0
    assert claimed_within < TTL_SECONDS / 3  # released by on_kill, not reaped after the TTL
    airflow.request("PATCH", f"/api/v2/dags/{dag_id}", json={"is_paused": True})
    setup.kit.background.run(KILLED_NAME)  # finish here; the DAG is paused
    status = setup.wait_completed(KILLED_NAME, 60)
    assert status["totals"]["migrated"] == KILLED_DOCUMENTS
    assert setup.db.invoices.count_documents({"_v": 2, "touched": 1}) == KILLED_DOCUMENTS
