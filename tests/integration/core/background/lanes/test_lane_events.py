"""Lane events: stamped with the lane's run id (E-25), and a stopped slice still ends (E-20)."""

from __future__ import annotations

import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

from pymongo.database import Database

from migronaut_core import CancelToken, Migronaut
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, seed_users, wait_until, write_background

#: Events only a lane emits.
LANE_EVENTS = frozenset(
    {
        "background:slice:start",
        "background:batch",
        "background:throttle",
        "background:slice:end",
        "background:lease:lost",
    }
)


def _recorder(kit: Migronaut) -> list[tuple[str, dict[str, Any]]]:
    events: list[tuple[str, dict[str, Any]]] = []
    lock = threading.Lock()

    def listen(event: str, payload: dict[str, Any]) -> None:
        with lock:
            events.append((event, dict(payload)))

    kit.background.on("*", listen)
    return events


def test_events_of_two_concurrent_lanes_carry_each_lanes_run_id(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    # Slow documents keep each lane on its partition long enough for the other to claim one.
    write_background(
        migrations,
        batch_size=20,
        max_parallel=2,
        per_document_seconds=0.002,
        extra='"partitions": {"min_partition_docs": 50},',
    )
    seed_users(db, 400)
    kit.runs.up()
    events = _recorder(kit)

    kit.background.run(SPLIT_NAME, concurrency=2)

    assert kit_json.status(kit, SPLIT_NAME)["status"] == "completed"
    lane_events = [(event, payload) for event, payload in events if event in LANE_EVENTS]
    assert {event for event, _ in lane_events} >= {
        "background:slice:start",
        "background:batch",
        "background:slice:end",
    }
    assert all(isinstance(payload.get("run_id"), str) for _, payload in lane_events)
    # slice:start keeps its documented `owner`: the same id.
    starts = [payload for event, payload in lane_events if event == "background:slice:start"]
    assert all(payload["owner"] == payload["run_id"] for payload in starts)
    # Two lanes, told apart: each partition's batches and end carry the run id of the
    # lane that claimed it, and both lanes wrote batches.
    holder: dict[str, str] = {}
    batches: dict[str, int] = defaultdict(int)
    for event, payload in lane_events:
        if event == "background:slice:start":
            holder[payload["partition"]] = payload["run_id"]
        elif event in ("background:batch", "background:slice:end"):
            assert payload["run_id"] == holder[payload["partition"]]
            if event == "background:batch":
                batches[payload["run_id"]] += 1
    assert len(batches) == 2, batches
    # Events the coordinator emits are no lane's.
    assert all("run_id" not in payload for event, payload in events if event not in LANE_EVENTS)


RAISES_WHEN_STOPPED = """
import time

background = {"collection": "users", "from": 1, "to": 2, "batch_size": 10, "max_parallel": 1}


def migrate_batch(docs, ctx):
    # Long enough for the caller to stop the lane meanwhile; then the batch fails.
    time.sleep(0.6)
    raise RuntimeError("the batch raised while the lane was being stopped")
"""


def test_a_slice_stopped_while_its_batch_raised_ends_with_outcome_stopped(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    write_background(migrations, body=RAISES_WHEN_STOPPED)
    seed_users(db, 30)
    kit.runs.up()
    wait_until(lambda: kit.background.coordinate(SPLIT_NAME).next == "process", what="the plan")
    events = _recorder(kit)
    token = CancelToken()
    timers: list[threading.Timer] = []

    def stop_soon(event: str, payload: dict[str, Any]) -> None:
        timer = threading.Timer(0.15, token.cancel, args=("the caller stops the lane",))
        timers.append(timer)
        timer.start()

    kit.background.on("background:slice:start", stop_soon)

    result = kit.background.run_slice(SPLIT_NAME, cancel=token)

    for timer in timers:
        timer.join()
    assert result.outcome == "stopped"
    lane = [(event, payload) for event, payload in events if event in LANE_EVENTS]
    assert [event for event, _ in lane] == ["background:slice:start", "background:slice:end"]
    start, end = lane[0][1], lane[1][1]
    assert end["outcome"] == "stopped"
    assert end["partition"] == start["partition"]
    assert end["run_id"] == start["run_id"]
    # The stop is not the partition's fault: released, nothing charged.
    (partition,) = kit_json.partitions(kit, SPLIT_NAME)
    assert partition["slice_failures"] == 0
    assert partition["lease"] is None
    assert partition["status"] == "running"
