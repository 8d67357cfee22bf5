"""The judgement behind Airflow's wait_for_lanes: each snapshot, each reason."""

from __future__ import annotations

import pytest

from migronaut_core.background.lanes.waiting import REASONS, UNREGISTERED, LanesWatch
from migronaut_core.background.store.lanes import LanesSnapshot


def watch(grace: float = 10.0) -> LanesWatch:
    return LanesWatch(generation=3, plan="p", no_lease_grace_seconds=grace)


@pytest.mark.parametrize(
    ("snapshot", "verdict"),
    [
        (LanesSnapshot(None, False), {"reason": "left-running", "migration_status": UNREGISTERED}),
        (
            LanesSnapshot("paused", True),
            {"reason": "left-running", "migration_status": "paused"},
        ),
        (LanesSnapshot("running", False), {"reason": "replanned"}),
        (LanesSnapshot("running", True, open_partitions=False), {"reason": "drained"}),
        (LanesSnapshot("running", True, open_partitions=True, live_lease=True), None),
    ],
)
def test_each_snapshot_gets_its_verdict(snapshot: LanesSnapshot, verdict: object) -> None:
    assert watch().judge(snapshot, now=0.0) == verdict


def test_open_partitions_without_a_live_lease_end_waiting_after_the_grace() -> None:
    orphaned = LanesSnapshot("running", True, open_partitions=True, live_lease=False)
    alive = LanesSnapshot("running", True, open_partitions=True, live_lease=True)
    judge = watch(grace=10.0)
    assert judge.judge(orphaned, now=100.0) is None
    assert judge.judge(orphaned, now=109.0) is None
    assert judge.judge(alive, now=109.5) is None  # a live lease restarts the grace
    assert judge.judge(orphaned, now=115.0) is None
    assert judge.judge(orphaned, now=125.0) == {"reason": "no-live-lease"}


def test_every_verdict_reason_is_listed() -> None:
    judge = watch(grace=0.0)
    snapshots = [
        LanesSnapshot(None, False),
        LanesSnapshot("running", False),
        LanesSnapshot("running", True, open_partitions=False),
        LanesSnapshot("running", True, open_partitions=True),
    ]
    reasons = {judge.judge(snapshot, now=0.0)["reason"] for snapshot in snapshots}  # type: ignore[index]
    assert reasons == set(REASONS)


def test_lanes_that_hold_on_purpose_keep_the_wait_going_past_the_grace() -> None:
    held = LanesSnapshot("running", True, open_partitions=True, live_lease=False, held=True)
    orphaned = LanesSnapshot("running", True, open_partitions=True, live_lease=False)
    judge = watch(grace=10.0)
    assert judge.judge(orphaned, now=100.0) is None
    assert judge.judge(held, now=109.0) is None  # a hold restarts the grace
    assert judge.judge(held, now=10_000.0) is None  # however long the window stays shut
    assert judge.judge(orphaned, now=10_005.0) is None
    assert judge.judge(orphaned, now=10_015.0) == {"reason": "no-live-lease"}
    drained = LanesSnapshot("running", True, open_partitions=False, held=True)
    assert judge.judge(drained, now=10_016.0) == {"reason": "drained"}
