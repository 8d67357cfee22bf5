"""BackgroundLanesSensor against a real replica set: poke, execute (both modes), events.

No Airflow metadata DB: operators are built outside a DAG, the connection comes from
an ``AIRFLOW_CONN_*`` variable, and ``execute`` gets an empty context.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred
from pymongo.database import Database

from migronaut_airflow.sensors.lanes import BackgroundLanesSensor, LanesWaitError
from migronaut_airflow.triggers.lanes import BackgroundLanesTrigger
from tests.support.lanes import (
    NAME,
    NAMES,
    PLAN,
    Document,
    captured_logs,
    logged_text,
    seed_hold,
    seed_partition,
    seed_state,
)

pytestmark = pytest.mark.airflow

Factory = Callable[..., BackgroundLanesSensor]
CONTEXT: Any = {}


@pytest.fixture
def make_sensor(migronaut_connection: str) -> Iterator[Factory]:
    """Build sensors on the test's database; their clients are closed afterwards."""
    built: list[BackgroundLanesSensor] = []

    def make(**overrides: Any) -> BackgroundLanesSensor:
        kwargs: dict[str, Any] = {
            "task_id": "wait_for_lanes",
            "migration": NAME,
            "generation": 1,
            "plan": PLAN,
            "mongo_conn_id": migronaut_connection,
            "poll_interval": 0.05,
        }
        kwargs.update(overrides)
        sensor = BackgroundLanesSensor(**kwargs)
        built.append(sensor)
        return sensor

    yield make
    for sensor in built:
        sensor.on_kill()


# -- arguments ---------------------------------------------------------------------------


def test_defaults_and_templated_fields() -> None:
    sensor = BackgroundLanesSensor(task_id="w", migration=NAME, generation=1, plan=PLAN)
    assert sensor.deferrable is True
    assert sensor.mongo_conn_id == "migronaut_default"
    assert sensor.database is None
    assert sensor.poke_interval == 2.0
    assert tuple(sensor.template_fields) == ("migration", "generation", "plan", "collection_prefix")
    assert BackgroundLanesSensor.SUCCESS_STATES == ("success",)
    assert BackgroundLanesSensor.FAILURE_STATES == ("error",)


def test_building_looks_nothing_up() -> None:
    sensor = BackgroundLanesSensor(
        task_id="w", migration=NAME, generation=1, plan=PLAN, mongo_conn_id="no_such_connection"
    )
    assert "hook" not in sensor.__dict__


def test_reschedule_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="reschedule"):
        BackgroundLanesSensor(
            task_id="w", migration=NAME, generation=1, plan=PLAN, mode="reschedule"
        )


# -- poke --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seed", "reason"),
    [
        ({"status": "paused"}, "left-running"),
        (None, "left-running"),
        ({"generation": 2}, "replanned"),
        ({"plan": "plan-b"}, "replanned"),
    ],
    ids=["paused", "unregistered", "new-generation", "new-plan"],
)
def test_poke_is_done_when_the_state_moved_on(
    db: Database[Document], make_sensor: Factory, seed: dict[str, Any] | None, reason: str
) -> None:
    if seed is not None:
        seed_state(db, **seed)
    seed_partition(db, lease="live")
    result = make_sensor().poke(CONTEXT)
    assert result
    assert result.xcom_value == reason


def test_poke_is_done_when_drained(db: Database[Document], make_sensor: Factory) -> None:
    seed_state(db)
    seed_partition(db, status="done")
    seed_partition(db, plan="plan-old", lease="live")
    result = make_sensor().poke(CONTEXT)
    assert result
    assert result.xcom_value == "drained"


def test_poke_waits_while_a_lease_is_live(db: Database[Document], make_sensor: Factory) -> None:
    seed_state(db)
    seed_partition(db, lease="live")
    seed_partition(db)
    sensor = make_sensor(no_lease_grace_seconds=0)
    assert not sensor.poke(CONTEXT)
    assert not sensor.poke(CONTEXT)


def test_poke_is_done_when_no_lease_stays_live_for_the_grace(
    db: Database[Document], make_sensor: Factory
) -> None:
    seed_state(db)
    seed_partition(db, lease="expired")
    sensor = make_sensor(no_lease_grace_seconds=0.3)
    assert not sensor.poke(CONTEXT)
    time.sleep(0.35)
    result = sensor.poke(CONTEXT)
    assert result
    assert result.xcom_value == "no-live-lease"


@pytest.mark.parametrize("hold", ["window", "health"])
def test_poke_waits_past_the_grace_while_the_lanes_hold_on_purpose(
    db: Database[Document], make_sensor: Factory, hold: str
) -> None:
    seed_state(db)
    seed_partition(db, lease="expired")
    seed_hold(db, hold)
    sensor = make_sensor(no_lease_grace_seconds=0.2)
    assert not sensor.poke(CONTEXT)
    time.sleep(0.3)
    assert not sensor.poke(CONTEXT)  # not taken for dead lanes
    db[NAMES.state].update_one({"_id": NAME}, {"$unset": {"hold": ""}})
    assert not sensor.poke(CONTEXT)  # the grace starts over when the hold ends
    time.sleep(0.3)
    assert sensor.poke(CONTEXT).xcom_value == "no-live-lease"


def test_a_hold_nobody_confirms_any_more_ends_the_wait_after_the_grace(
    db: Database[Document], make_sensor: Factory
) -> None:
    seed_state(db)
    seed_partition(db, lease="expired")
    seed_hold(db, "stale-health")
    sensor = make_sensor(no_lease_grace_seconds=0.2)
    assert not sensor.poke(CONTEXT)
    time.sleep(0.3)
    assert sensor.poke(CONTEXT).xcom_value == "no-live-lease"


def test_poke_takes_templated_strings(db: Database[Document], make_sensor: Factory) -> None:
    seed_state(db, generation=7)
    seed_partition(db, generation=7, status="done")
    result = make_sensor(generation="7").poke(CONTEXT)
    assert result.xcom_value == "drained"


# -- execute -----------------------------------------------------------------------------


def test_deferrable_execute_returns_at_once_when_already_over(
    db: Database[Document], make_sensor: Factory
) -> None:
    seed_state(db)
    seed_partition(db, status="done")
    assert make_sensor().execute(CONTEXT) == "drained"


def test_deferrable_execute_defers_while_lanes_run(
    db: Database[Document], make_sensor: Factory, migronaut_connection: str
) -> None:
    seed_state(db, generation=4)
    seed_partition(db, generation=4, lease="live")
    sensor = make_sensor(
        generation="4", no_lease_grace_seconds=5.0, execution_timeout=timedelta(minutes=3)
    )
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(CONTEXT)
    assert deferred.value.method_name == "execute_complete"
    assert deferred.value.timeout == timedelta(minutes=3)
    assert not deferred.value.kwargs
    trigger = deferred.value.trigger
    assert isinstance(trigger, BackgroundLanesTrigger)
    assert trigger.serialize()[1] == {
        "mongo_conn_id": migronaut_connection,
        "database": None,
        "migration": NAME,
        "generation": 4,
        "plan": PLAN,
        "collection_prefix": "migronaut_background",
        "poll_interval": 0.05,
        "no_lease_grace_seconds": 5.0,
    }
    assert sensor.hook.client is None  # the check's client is closed before deferring


def test_deferrable_execute_defers_outside_the_window_instead_of_ending(
    db: Database[Document], make_sensor: Factory
) -> None:
    seed_state(db)
    seed_partition(db, lease="expired")
    seed_hold(db, "window")
    sensor = make_sensor(no_lease_grace_seconds=0)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(CONTEXT)
    assert isinstance(deferred.value.trigger, BackgroundLanesTrigger)
    assert deferred.value.method_name == "execute_complete"


def test_deferral_timeout_defaults_to_the_sensor_timeout(
    db: Database[Document], make_sensor: Factory
) -> None:
    seed_state(db)
    seed_partition(db, lease="live")
    with pytest.raises(TaskDeferred) as deferred:
        make_sensor(timeout=600).execute(CONTEXT)
    assert deferred.value.timeout == timedelta(seconds=600)


def test_poke_mode_execute_returns_the_reason(db: Database[Document], make_sensor: Factory) -> None:
    seed_state(db)
    seed_partition(db)
    sensor = make_sensor(deferrable=False, no_lease_grace_seconds=0.2, poke_interval=0.05)
    assert sensor.execute(CONTEXT) == "no-live-lease"
    assert sensor.hook.client is None


# -- execute_complete --------------------------------------------------------------------


@pytest.mark.parametrize(
    "event",
    [
        None,
        "success",
        {"status": "error", "message": "ServerSelectionTimeoutError: no primary"},
        {"status": "done", "reason": "drained"},
        {"reason": "drained"},
        {"status": "success", "reason": "finished"},
    ],
    ids=["none", "not-a-dict", "error", "unknown-status", "no-status", "unknown-reason"],
)
def test_execute_complete_raises_on_a_bad_event(make_sensor: Factory, event: Any) -> None:
    with pytest.raises(LanesWaitError) as raised:
        make_sensor().execute_complete(CONTEXT, event)
    assert isinstance(raised.value, AirflowException)
    assert NAME in str(raised.value)


def test_execute_complete_error_carries_the_trigger_message(make_sensor: Factory) -> None:
    event = {"status": "error", "message": "ServerSelectionTimeoutError: no primary"}
    with pytest.raises(LanesWaitError, match="ServerSelectionTimeoutError: no primary"):
        make_sensor().execute_complete(CONTEXT, event)


@pytest.mark.parametrize("reason", ["drained", "left-running", "replanned", "no-live-lease"])
def test_execute_complete_returns_the_reason(make_sensor: Factory, reason: str) -> None:
    event = {"status": "success", "reason": reason, "migration": NAME}
    assert make_sensor().execute_complete(CONTEXT, event) == reason


# -- logs --------------------------------------------------------------------------------


def test_logs_name_the_reason_but_no_values_or_filters(
    db: Database[Document], make_sensor: Factory
) -> None:
    seed_state(db)
    seed_partition(db, status="done")
    with captured_logs() as entries:
        assert make_sensor().execute(CONTEXT) == "drained"
    logged = logged_text(entries)
    assert NAME in logged
    assert "drained" in logged
    assert PLAN not in logged
    assert "$in" not in logged
