"""End to end on Celery workers, PostgreSQL and Redis, with an application writing throughout.

One cluster (two Celery workers, ``worker-1`` and ``worker-2``) serves every test;
each test runs its own migration on its own database through the REST API, kills
or restarts what it is about, and ends with the same check: every document
migrated exactly once, totals to match, no acknowledged application write lost,
every DAG run succeeded (:meth:`tests.support.cluster.Scenario.finish`).
Transforms are slowed per document where timing matters, so a fault lands
mid-slice however fast the machine.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.cluster import Cluster, LaneSampler, Scenario

pytestmark = [pytest.mark.timeout(420)]

#: The migration of the fault tests: 4 ms a document, 50 a batch, 5 s slices — a
#: lane is inside a slice most of the time, and the work outlasts a fault.
FAULT_MIGRATION: dict[str, Any] = {
    "documents": 3_000,
    "doc_seconds": 0.004,
    "batch_size": 50,
    "extra": '"slice_ms": 5000,',
}


@pytest.fixture
def scenarios(airflow_cluster: Cluster) -> Iterator[list[Scenario]]:
    """The scenarios a test made, closed (database dropped, DAG paused) afterwards."""
    made: list[Scenario] = []
    yield made
    for scenario in made:
        scenario.close()


def test_lanes_of_50000_documents_run_on_both_workers(
    airflow_cluster: Cluster, scenarios: list[Scenario]
) -> None:
    scenario = airflow_cluster.scenario(
        "spread", documents=50_000, doc_seconds=0.0, batch_size=500, extra='"slice_ms": 15000,'
    )
    scenarios.append(scenario)
    started = time.monotonic()
    with LaneSampler(scenario, interval=1.0) as sampler:
        first = scenario.start()
        view, runs = scenario.finish()

    airflow = airflow_cluster.airflow
    lanes = [ti for run in runs for ti in scenario.lanes(run["dag_run_id"])]
    hostnames = {ti["hostname"] for ti in lanes} | sampler.hostnames
    print(
        f"migrated in {time.monotonic() - started:.0f}s; lane hostnames {sorted(hostnames)}; "
        f"most lanes running at once {sampler.most_running} ({sampler.samples} samples)"
    )
    assert {ti["map_index"] for ti in scenario.lanes(first)} == {0, 1, 2, 3}
    workers = {airflow.hostname(name) for name in airflow.worker_names}
    assert workers <= hostnames, f"lanes ran only on {hostnames}"
    assert sampler.most_running > 2, "never more than two lanes ran at once"
    assert view["totals"]["migrated"] >= 50_000


def test_a_killed_worker_s_lanes_are_retried_on_the_other_worker(
    airflow_cluster: Cluster, scenarios: list[Scenario]
) -> None:
    airflow = airflow_cluster.airflow
    scenario = airflow_cluster.scenario("kill", **FAULT_MIGRATION)
    scenarios.append(scenario)
    victim, survivor = airflow.worker_names
    scenario.start()

    def busy_lane_on_victim() -> tuple[str, dict[str, Any]] | None:
        """A lane running on the victim whose task process is alive now."""
        if scenario.migrated() == 0:
            return None
        for run_id in scenario.running_runs():
            for ti in scenario.lanes(run_id):
                if ti["state"] == "running" and ti["hostname"] == airflow.hostname(victim):
                    process = airflow.task_process(ti["id"])
                    if process is not None and process in airflow.component(victim).live():
                        return run_id, ti
        return None

    try:
        run_id, lane = airflow.wait_until(busy_lane_on_victim, 120, f"no lane ran on {victim}")
        killed = airflow.kill(victim, signal.SIGKILL)
        migrated_at_kill = scenario.migrated()
        view, _ = scenario.finish()
    finally:
        airflow.restart(victim)

    tries = airflow.task_tries(scenario.dag_id, run_id, "lane", lane["map_index"])
    print(
        f"killed {victim} ({len(killed)} processes) with lane {lane['map_index']} of {run_id} "
        f"mid-slice, {migrated_at_kill} documents migrated; its tries: "
        f"{[(ti['try_number'], ti['state'], ti['hostname']) for ti in tries]}"
    )
    assert migrated_at_kill < scenario.seeded
    assert tries[0]["hostname"] == airflow.hostname(victim)
    assert tries[0]["state"] == "failed", tries[0]
    assert tries[-1]["try_number"] > 1
    assert tries[-1]["state"] == "success", tries[-1]
    assert tries[-1]["hostname"] == airflow.hostname(survivor), tries[-1]
    assert view["totals"]["migrated"] >= scenario.seeded


def test_a_triggerer_restart_while_the_sensor_and_lanes_are_deferred(
    airflow_cluster: Cluster, scenarios: list[Scenario]
) -> None:
    airflow = airflow_cluster.airflow
    # Three times the documents: each lane has several 3 s slices of work, so the
    # triggerer goes down mid-run however the lanes were spread (with 3,000 a lane's
    # share could end in its first slice and the migration finish before the kill).
    scenario = airflow_cluster.scenario(
        "triggerer", **{**FAULT_MIGRATION, "documents": 9_000, "extra": '"slice_ms": 3000,'}
    )
    scenarios.append(scenario)
    first = scenario.start()

    def sensor_deferred() -> bool:
        return scenario.migrated() > 0 and scenario.task(first, "wait_for_lanes")["state"] == (
            "deferred"
        )

    def deferred_lanes() -> list[dict[str, Any]]:
        """The lanes deferred between slices, once the sensor is deferred too."""
        if scenario.task(first, "wait_for_lanes")["state"] != "deferred":
            return []
        return [ti for ti in scenario.lanes(first) if ti["state"] == "deferred"]

    try:
        airflow.wait_until(sensor_deferred, 120, "the sensor did not defer")
        airflow.kill("triggerer", signal.SIGTERM)
        # Nothing resumes a deferred task now: lanes that end a slice stay deferred.
        waiting = airflow.wait_until(deferred_lanes, 60, "no lane deferred")
        stalled_at = scenario.migrated()
    finally:
        airflow.restart("triggerer")
    view, runs = scenario.finish()

    finished = {ti["map_index"]: ti for ti in scenario.lanes(first)}
    print(
        f"triggerer down with the sensor and lanes {[ti['map_index'] for ti in waiting]} "
        f"deferred, {stalled_at} documents migrated; {len(runs)} run(s)"
    )
    assert stalled_at < scenario.seeded
    assert scenario.task(first, "wait_for_lanes")["state"] == "success"
    assert all(finished[ti["map_index"]]["state"] == "success" for ti in waiting), finished
    assert view["totals"]["migrated"] >= scenario.seeded


def test_a_scheduler_killed_and_restarted_mid_run(
    airflow_cluster: Cluster, scenarios: list[Scenario]
) -> None:
    airflow = airflow_cluster.airflow
    scenario = airflow_cluster.scenario("scheduler", **FAULT_MIGRATION)
    scenarios.append(scenario)
    first = scenario.start()

    def lanes_running() -> bool:
        states = [ti["state"] for ti in scenario.lanes(first)]
        return scenario.migrated() > 0 and "running" in states

    airflow.wait_until(lanes_running, 120, "no lane ran")
    try:
        airflow.kill("scheduler", signal.SIGKILL)
        killed_at = scenario.migrated()
        time.sleep(3)
    finally:
        airflow.restart("scheduler")
    view, runs = scenario.finish()

    print(f"scheduler killed with {killed_at} documents migrated; {len(runs)} run(s)")
    assert killed_at < scenario.seeded
    assert view["totals"]["migrated"] >= scenario.seeded


POOL = "migronaut_lanes_test"


def test_a_pool_of_two_slots_caps_four_lanes_at_two(
    airflow_cluster: Cluster, scenarios: list[Scenario]
) -> None:
    airflow = airflow_cluster.airflow
    airflow.request(
        "POST",
        "/api/v2/pools",
        json={"name": POOL, "slots": 2, "description": "cluster test", "include_deferred": False},
    )
    try:
        scenario = airflow_cluster.scenario(
            "pool",
            **{**FAULT_MIGRATION, "extra": '"slice_ms": 2000,'},
            dag_options=f"lane_pool={POOL!r}",
        )
        scenarios.append(scenario)
        with LaneSampler(scenario, interval=0.2) as sampler:
            first = scenario.start()
            view, _ = scenario.finish()
    finally:
        airflow.request("DELETE", f"/api/v2/pools/{POOL}")

    lanes = scenario.lanes(first)
    print(
        f"most lanes running at once {sampler.most_running} ({sampler.samples} samples); "
        f"pools of the lanes {sorted({ti['pool'] for ti in lanes})}"
    )
    assert {ti["map_index"] for ti in lanes} == {0, 1, 2, 3}
    assert {ti["pool"] for ti in lanes} == {POOL}
    assert sampler.most_running == 2
    assert view["totals"]["migrated"] >= scenario.seeded
