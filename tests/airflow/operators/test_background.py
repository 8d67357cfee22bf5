"""The lane and heal operators against a real replica set: deploys, on_kill, stall takeover.

No Airflow metadata DB: the operator is built outside a DAG, the connection comes
from an ``AIRFLOW_CONN_*`` variable, and ``execute`` gets an empty context.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred
from pymongo.database import Database

from migronaut_airflow.operators.background import (
    BackgroundLaneOperator,
    HealBackgroundOperator,
    dag_id_for,
)
from migronaut_airflow.triggers.delay import DelayTrigger
from migronaut_core import Migronaut
from tests.support.background import SPLIT_NAME, make_kit, seed_users, wait_until, write_background
from tests.support.heal import FakeRuns

pytestmark = pytest.mark.airflow

CONTEXT: Any = {}
#: The lease TTL of every kit here: a claim sooner than this was released, not reaped.
TTL_SECONDS = 60


@pytest.fixture
def migrations(tmp_path: Path, migronaut_connection: str) -> Iterator[Path]:
    directory = tmp_path / "migrations"
    directory.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MIGRONAUT_MIGRATIONS_DIR", str(directory))
        yield directory


@pytest.fixture
def kit(mongo_uri: str, db: Database[dict[str, Any]], migrations: Path) -> Iterator[Migronaut]:
    with make_kit(mongo_uri, db, migrations, lock_ttl_seconds=TTL_SECONDS) as kit:
        yield kit


def _lane(**overrides: Any) -> BackgroundLaneOperator:
    options: dict[str, Any] = {
        "task_id": "lane",
        "migration": SPLIT_NAME,
        "migronaut_config": {"lock_ttl_seconds": TTL_SECONDS},
    }
    options.update(overrides)
    return BackgroundLaneOperator(**options)


def test_a_lane_defers_through_a_deploy_and_fails_clearly_past_its_bound(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 1_000)
    path = write_background(migrations, batch_size=100)
    kit.runs.up()
    assert kit.background.coordinate(SPLIT_NAME).next == "process"
    registered = path.read_text()
    path.write_text(registered + "\n# release 2\n")
    lane = _lane(max_deploy_wait_seconds=300)

    with pytest.raises(TaskDeferred) as deferred:
        lane.execute(CONTEXT)

    trigger = deferred.value.trigger
    assert isinstance(trigger, DelayTrigger)
    payload = trigger.serialize()[1]["payload"]
    assert payload["slices"] == 1
    since = payload["deferred_since"]
    assert abs(since - time.time()) < 30
    assert db.users.count_documents({"_v": 2}) == 0

    # Still within the bound: it defers again, keeping when the wait began.
    event = {"status": "success", **payload}
    with pytest.raises(TaskDeferred) as again:
        lane.execute_complete(CONTEXT, event)
    assert again.value.trigger.serialize()[1]["payload"]["deferred_since"] == since

    # Past the bound: the task fails, naming the migration and both checksums.
    with pytest.raises(AirflowFailException) as failed:
        lane.execute_complete(CONTEXT, {**event, "deferred_since": since - 301})
    message = str(failed.value)
    assert message.startswith("CHECKSUM_MISMATCH: ")
    assert SPLIT_NAME in message
    state = db.migronaut_background.find_one({"_id": SPLIT_NAME})
    assert state is not None
    assert state["checksum"][:12] in message
    assert "release 2" not in message

    # The deploy lands: the same lane works on.
    path.write_text(registered)
    result = lane.execute_complete(CONTEXT, event)
    assert result["outcome"] == "exhausted", result
    assert result["counters"]["migrated"] == 1_000
    lane.hook.close()


def test_on_kill_stops_the_slice_and_releases_its_lease_for_the_next_lane(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 1_500)
    # One slot: the next lane can claim only if the killed one let go.
    write_background(migrations, batch_size=50, max_parallel=1, per_document_seconds=0.002)
    kit.runs.up()
    assert kit.background.coordinate(SPLIT_NAME).next == "process"
    victim = _lane(slice_ms=600_000)
    results: list[dict[str, Any]] = []
    worker = threading.Thread(target=lambda: results.append(victim.execute(CONTEXT)))
    worker.start()
    wait_until(lambda: db.users.count_documents({"_v": 2}) >= 100, 30, "the lane to work")

    killed_at = time.monotonic()
    victim.on_kill()
    worker.join(timeout=30)
    assert not worker.is_alive()
    [stopped] = results
    assert stopped["outcome"] == "stopped"
    assert stopped["counters"]["migrated"] == db.users.count_documents({"_v": 2})
    assert db.migronaut_background_partitions.count_documents({"lease": {"$exists": True}}) == 0

    successor = _lane(slice_ms=200, max_slices=1)
    result = successor.execute(CONTEXT)
    reclaimed_within = time.monotonic() - killed_at
    print(f"\nthe next lane worked {reclaimed_within:.2f} s after on_kill")
    assert result["outcome"] == "yielded", result
    assert result["counters"]["migrated"] > 0
    assert reclaimed_within < TTL_SECONDS / 4  # released, not reaped after the TTL
    victim.hook.close()
    successor.hook.close()


def test_the_heal_takes_over_a_stalled_migration_whose_one_run_is_stuck(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 500)
    write_background(migrations, batch_size=100)
    kit.runs.up()
    assert kit.background.coordinate(SPLIT_NAME).next == "process"
    assert kit.background.run_slice(SPLIT_NAME, slice_ms=100).outcome in ("yielded", "exhausted")
    dag_id = dag_id_for(SPLIT_NAME)

    def heal(active: int, stall_seconds: float) -> list[str]:
        operator = HealBackgroundOperator(
            task_id="heal",
            stall_seconds=stall_seconds,
            migronaut_config={"lock_ttl_seconds": TTL_SECONDS},
        )
        try:
            return operator.execute({"ti": FakeRuns(active=active)})  # type: ignore[typeddict-item]
        finally:
            operator.hook.close()

    # Something moved within the stall time: its run is left alone, however many it has.
    assert heal(1, 60) == []
    assert heal(0, 60) == [dag_id]  # no run at all: the plain heal
    time.sleep(1.2)  # no lease, no checkpoint, no coordinator step since
    assert kit.background.stalled(stall_seconds=1) == [SPLIT_NAME]
    assert heal(1, 1) == [dag_id]  # one stuck run: a takeover run beside it
    assert heal(2, 1) == []  # a takeover already runs: never a third


def test_a_lane_outside_its_targets_window_defers_until_it_opens_instead_of_failing(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 300)
    write_background(migrations, batch_size=100)
    kit.runs.up()
    assert kit.background.coordinate(SPLIT_NAME).next == "process"
    opens = datetime.now(UTC) + timedelta(hours=2)
    shut = [{"from": f"{opens:%H:%M}", "to": f"{opens + timedelta(hours=1):%H:%M}"}]
    lane = _lane(migronaut_config={"lock_ttl_seconds": TTL_SECONDS, "background_windows": shut})

    with pytest.raises(TaskDeferred) as deferred:
        lane.execute(CONTEXT)

    trigger = deferred.value.trigger
    assert isinstance(trigger, DelayTrigger)
    assert trigger.seconds == 300  # looks again within 5 minutes, not in a poke loop
    assert trigger.serialize()[1]["payload"]["slices"] == 1
    assert db.users.count_documents({"_v": 2}) == 0
    state = db.migronaut_background.find_one({"_id": SPLIT_NAME})
    assert state is not None
    assert state["hold"]["reason"] == "window"
    lane.hook.close()
