"""BackgroundLanesTrigger against a real replica set: its contract and each way it fires.

No Airflow metadata DB: the connection comes from an ``AIRFLOW_CONN_*`` variable and
``run()`` is driven directly under ``asyncio.wait_for`` (async tests run through
anyio's pytest plugin, on asyncio).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_airflow.triggers.lanes import BackgroundLanesTrigger, error_message
from migronaut_core.background.lanes.waiting import REASONS, LanesWatch
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

pytestmark = [pytest.mark.airflow, pytest.mark.anyio]

#: Long enough for a real poll, short enough for a test that expects no event.
QUIET_SECONDS = 0.6


# -- fixtures ----------------------------------------------------------------------------


@pytest.fixture
def anyio_backend() -> str:
    """Async tests run on asyncio, as the triggerer does."""
    return "asyncio"


@pytest.fixture
def unreachable_connection() -> Iterator[str]:
    """A ``mongo`` connection to a port nothing listens on, failing fast."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(
            "AIRFLOW_CONN_MIGRONAUT_UNREACHABLE",
            "mongo://127.0.0.1:1/nowhere?serverSelectionTimeoutMS=300&connectTimeoutMS=300",
        )
        yield "migronaut_unreachable"


def make_trigger(conn_id: str, **overrides: Any) -> BackgroundLanesTrigger:
    kwargs: dict[str, Any] = {
        "mongo_conn_id": conn_id,
        "database": None,
        "migration": NAME,
        "generation": 1,
        "plan": PLAN,
        "poll_interval": 0.05,
        "no_lease_grace_seconds": 30.0,
    }
    kwargs.update(overrides)
    return BackgroundLanesTrigger(**kwargs)


async def first_event(trigger: BackgroundLanesTrigger, timeout: float = 10.0) -> Any:
    """The payload of the trigger's first event; the trigger must yield nothing after it."""
    events = trigger.run()
    event = await asyncio.wait_for(events.__anext__(), timeout)
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(events.__anext__(), timeout)
    return event.payload


async def no_event_within(trigger: BackgroundLanesTrigger, seconds: float) -> None:
    events = trigger.run()
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(events.__anext__(), seconds)
    await events.aclose()


# -- contract ----------------------------------------------------------------------------


def test_serialize_pins_classpath_and_kwargs() -> None:
    trigger = BackgroundLanesTrigger(
        mongo_conn_id="c",
        database="d",
        migration=NAME,
        generation=3,
        plan=PLAN,
        collection_prefix="mb",
        poll_interval=1.5,
        no_lease_grace_seconds=12.0,
    )
    classpath, kwargs = trigger.serialize()
    assert classpath == "migronaut_airflow.triggers.lanes.BackgroundLanesTrigger"
    assert kwargs == {
        "mongo_conn_id": "c",
        "database": "d",
        "migration": NAME,
        "generation": 3,
        "plan": PLAN,
        "collection_prefix": "mb",
        "poll_interval": 1.5,
        "no_lease_grace_seconds": 12.0,
    }
    assert BackgroundLanesTrigger(**kwargs).serialize() == (classpath, kwargs)


def test_serialize_keeps_defaults_and_a_missing_database() -> None:
    _, kwargs = BackgroundLanesTrigger(
        mongo_conn_id="c", database=None, migration=NAME, generation=0, plan=PLAN
    ).serialize()
    assert kwargs["database"] is None
    assert kwargs["collection_prefix"] == "migronaut_background"
    assert kwargs["poll_interval"] == 2.0
    assert kwargs["no_lease_grace_seconds"] == 30.0


def test_arguments_are_keyword_only_and_checked() -> None:
    with pytest.raises(TypeError):
        BackgroundLanesTrigger("c", None, NAME, 1, PLAN)  # type: ignore[misc]
    with pytest.raises(ValueError, match="poll_interval"):
        make_trigger("c", poll_interval=0)
    with pytest.raises(ValueError, match="no_lease_grace_seconds"):
        make_trigger("c", no_lease_grace_seconds=-1)


def test_watch_grace_restarts_after_a_live_lease() -> None:
    watch = LanesWatch(generation=1, plan=PLAN, no_lease_grace_seconds=10)
    assert watch.judge_partitions(open_partitions=True, live_lease=False, now=0) is None
    assert watch.judge_partitions(open_partitions=True, live_lease=True, now=9) is None
    assert watch.judge_partitions(open_partitions=True, live_lease=False, now=15) is None
    assert watch.judge_partitions(open_partitions=True, live_lease=False, now=25) == {
        "reason": "no-live-lease"
    }


def test_error_message_is_short_and_redacts_credentials() -> None:
    message = error_message(RuntimeError("mongodb://user:secret@host:1/" + "x" * 1000))
    assert message.startswith("RuntimeError: mongodb://***@host:1/")
    assert "secret" not in message
    assert len(message) < 400


# -- firing conditions -----------------------------------------------------------------


@pytest.mark.parametrize("status", ["paused", "completed", "cancelled", "failed"])
async def test_fires_when_the_migration_left_running(
    db: Database[Document], migronaut_connection: str, status: str
) -> None:
    seed_state(db, status=status)
    seed_partition(db, lease="live")
    payload = await first_event(make_trigger(migronaut_connection))
    assert payload == {
        "status": "success",
        "reason": "left-running",
        "migration_status": status,
        "migration": NAME,
    }


async def test_fires_when_the_migration_is_unregistered(
    db: Database[Document], migronaut_connection: str
) -> None:
    seed_partition(db, lease="live")
    payload = await first_event(make_trigger(migronaut_connection))
    assert payload == {
        "status": "success",
        "reason": "left-running",
        "migration_status": "unregistered",
        "migration": NAME,
    }


@pytest.mark.parametrize(
    "state", [{"generation": 2}, {"plan": "plan-b"}], ids=["generation", "plan-token"]
)
async def test_fires_when_replanned(
    db: Database[Document], migronaut_connection: str, state: dict[str, Any]
) -> None:
    seed_state(db, **state)
    seed_partition(db, lease="live")
    payload = await first_event(make_trigger(migronaut_connection))
    assert payload == {"status": "success", "reason": "replanned", "migration": NAME}


async def test_fires_when_drained(db: Database[Document], migronaut_connection: str) -> None:
    seed_state(db)
    seed_partition(db, status="done")
    seed_partition(db, status="failed")
    # Open partitions of other plans or generations do not count.
    seed_partition(db, plan="plan-old", lease="live")
    seed_partition(db, generation=0)
    payload = await first_event(make_trigger(migronaut_connection))
    assert payload == {"status": "success", "reason": "drained", "migration": NAME}


async def test_fires_when_draining_while_it_waits(
    db: Database[Document], migronaut_connection: str
) -> None:
    seed_state(db)
    seed_partition(db, status="running", lease="live")
    task = asyncio.ensure_future(first_event(make_trigger(migronaut_connection)))
    await asyncio.sleep(0.3)
    assert not task.done()
    db[NAMES.partitions].update_many({}, {"$set": {"status": "done"}, "$unset": {"lease": ""}})
    payload = await asyncio.wait_for(task, 10)
    assert payload["reason"] == "drained"


@pytest.mark.parametrize("lease", [None, "expired"])
async def test_fires_when_no_lease_stays_live_for_the_grace(
    db: Database[Document], migronaut_connection: str, lease: str | None
) -> None:
    seed_state(db)
    seed_partition(db, lease=lease)
    seed_partition(db, status="running", lease=lease)
    loop = asyncio.get_running_loop()
    started = loop.time()
    payload = await first_event(make_trigger(migronaut_connection, no_lease_grace_seconds=0.3))
    assert loop.time() - started >= 0.3
    assert payload == {"status": "success", "reason": "no-live-lease", "migration": NAME}


async def test_keeps_polling_while_a_lease_is_live(
    db: Database[Document], migronaut_connection: str
) -> None:
    seed_state(db)
    seed_partition(db, lease="live")
    seed_partition(db)
    await no_event_within(
        make_trigger(migronaut_connection, no_lease_grace_seconds=0.1), QUIET_SECONDS
    )


async def test_keeps_polling_outside_the_window_and_fires_once_the_lanes_drain(
    db: Database[Document], migronaut_connection: str
) -> None:
    seed_state(db)
    seed_partition(db, lease="expired")
    seed_hold(db, "window")
    trigger = make_trigger(migronaut_connection, no_lease_grace_seconds=0.1)
    task = asyncio.ensure_future(first_event(trigger))
    await asyncio.sleep(QUIET_SECONDS)
    assert not task.done()  # the grace passed several times over: no event
    db[NAMES.state].update_one({"_id": NAME}, {"$unset": {"hold": ""}})
    db[NAMES.partitions].update_many({}, {"$set": {"status": "done"}, "$unset": {"lease": ""}})
    payload = await asyncio.wait_for(task, 10)
    assert payload == {"status": "success", "reason": "drained", "migration": NAME}


async def test_keeps_polling_within_the_grace(
    db: Database[Document], migronaut_connection: str
) -> None:
    seed_state(db)
    seed_partition(db)
    await no_event_within(make_trigger(migronaut_connection), QUIET_SECONDS)


async def test_reads_the_given_database_and_prefix(
    db: Database[Document], migronaut_connection: str, mongo_client: Any
) -> None:
    other = mongo_client[f"{db.name}_x"]
    try:
        other["lanes_state"].insert_one(
            {"_id": NAME, "status": "running", "generation": 1, "plan": {"token": PLAN}}
        )
        # The connection's own database has no state: this would fire left-running.
        payload = await first_event(
            make_trigger(migronaut_connection, database=other.name, collection_prefix="lanes_state")
        )
        assert payload["reason"] == "drained"
    finally:
        mongo_client.drop_database(other.name)


# -- errors ------------------------------------------------------------------------------


async def test_unknown_connection_fires_one_error_event() -> None:
    payload = await first_event(make_trigger("migronaut_no_such_connection"))
    assert payload["status"] == "error"
    assert payload["migration"] == NAME
    assert payload["message"].startswith("AirflowNotFoundException: ")
    assert set(payload) == {"status", "message", "migration"}


async def test_unreachable_server_fires_one_error_event(unreachable_connection: str) -> None:
    payload = await first_event(make_trigger(unreachable_connection))
    assert payload["status"] == "error"
    assert payload["message"].startswith("ServerSelectionTimeoutError: ")
    assert set(payload) == {"status", "message", "migration"}


# -- logs --------------------------------------------------------------------------------


async def test_logs_name_the_reason_but_no_values_or_filters(
    db: Database[Document], migronaut_connection: str
) -> None:
    seed_state(db)
    seed_partition(db, status="done")
    with captured_logs() as entries:
        payload = await first_event(make_trigger(migronaut_connection))
    assert payload["reason"] in REASONS
    logged = logged_text(entries)
    assert NAME in logged
    assert "drained" in logged
    assert PLAN not in logged
    assert "$in" not in logged


async def test_logs_an_error_by_type_only(unreachable_connection: str) -> None:
    with captured_logs() as entries:
        await first_event(make_trigger(unreachable_connection))
    logged = logged_text(entries)
    assert "ServerSelectionTimeoutError" in logged
    assert "127.0.0.1" not in logged
