"""Drift as events (the Airflow AssetWatcher's core) against a real replica set.

A completed background migration, then old-shape writes: :func:`next_drift_signal`
returns one value-free signal, its position saved first; a new wait (a triggerer
restarted) resumes after that position and misses nothing written meanwhile;
writes already healed move the position without a signal; a signal nobody acted
on fires again once ``refire_after_seconds`` have passed. The position store is
checked on its own too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.database import Database

from migronaut_core import Migronaut
from migronaut_core.background.drift import events as events_module
from migronaut_core.background.drift.events import (
    DriftSignal,
    drift_event_settings,
    next_drift_signal,
)
from migronaut_core.background.store.drift_events import (
    clear_drift_position_async,
    read_drift_position,
    read_drift_position_async,
    save_drift_position_async,
)
from migronaut_core.config import BackgroundCollections
from migronaut_core.errors import ConfigInvalidError
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.watching import unresumable_token

pytestmark = pytest.mark.anyio

NAMES = BackgroundCollections.from_prefix("migronaut_background")
#: A re-fire this far off never happens within a test: only the stream can signal.
NEVER = 3600.0
QUIET_SECONDS = 1.5


@pytest.fixture
def kit(mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path) -> Iterator[Migronaut]:
    """The split migration over 50 users, completed."""
    write_background(tmp_path / "migrations", batch_size=100, max_parallel=2)
    seed_users(db, 50)
    db.users.create_index([("_v", 1), ("_id", 1)])
    with make_kit(mongo_uri, db, tmp_path / "migrations") as kit:
        kit.runs.up()
        assert kit_json.run(kit, SPLIT_NAME, concurrency=2)["status"] == "completed"
        yield kit


def settings(refire: float = NEVER) -> Any:
    return drift_event_settings(
        refire_after_seconds=refire, refresh_seconds=0.3, await_ms=100, checkpoint_seconds=0.2
    )


def old_users(db: Database[dict[str, Any]], start: int, count: int) -> None:
    seed_users(db, count, start=start)


async def signal_within(wait: asyncio.Task[DriftSignal], seconds: float = 15.0) -> DriftSignal:
    return await asyncio.wait_for(wait, seconds)


async def started(adb: AsyncDatabase[Any], refire: float = NEVER) -> asyncio.Task[DriftSignal]:
    """A wait on ``users`` that has opened its stream (its first position is saved)."""
    wait = asyncio.create_task(next_drift_signal(adb, NAMES, "users", settings(refire)))
    for _ in range(100):
        if (await read_drift_position_async(adb, NAMES, "users")).resume_token is not None:
            return wait
        assert not wait.done(), wait
        await asyncio.sleep(0.05)
    raise AssertionError("the wait never saved its first position")


async def stop(wait: asyncio.Task[DriftSignal]) -> None:
    wait.cancel()
    with pytest.raises(asyncio.CancelledError):
        await wait


async def test_the_position_store_saves_counts_and_forgets(
    adb: AsyncDatabase[Any], db: Database[dict[str, Any]]
) -> None:
    empty = await read_drift_position_async(adb, NAMES, "users")
    assert (empty.resume_token, empty.fired_seconds_ago, empty.events, empty.fired) == (
        None,
        None,
        0,
        0,
    )
    await save_drift_position_async(adb, NAMES, "users", {"_data": "8200"}, events=3)
    saved = read_drift_position(db, NAMES, "users")
    assert saved.resume_token == {"_data": "8200"}
    assert (saved.fired_seconds_ago, saved.events, saved.fired) == (None, 3, 0)
    await save_drift_position_async(adb, NAMES, "users", None, events=2, fired=True)
    fired = await read_drift_position_async(adb, NAMES, "users")
    assert fired.resume_token == {"_data": "8200"}  # None keeps the saved token
    assert fired.fired_seconds_ago is not None and 0 <= fired.fired_seconds_ago < 5
    assert (fired.events, fired.fired) == (5, 1)
    await clear_drift_position_async(adb, NAMES, "users")
    cleared = await read_drift_position_async(adb, NAMES, "users")
    assert cleared.resume_token is None and cleared.fired == 1
    assert "users" in [row["_id"] for row in db[NAMES.drift_events].find()]


async def test_old_shape_writes_signal_once_with_names_and_counts_only(
    kit: Migronaut, adb: AsyncDatabase[Any], db: Database[dict[str, Any]]
) -> None:
    wait = await started(adb)
    await asyncio.sleep(QUIET_SECONDS)
    assert not wait.done(), "signalled with nothing drifted"

    old_users(db, 1000, 20)
    signal = await signal_within(wait)

    assert signal == DriftSignal("users", (SPLIT_NAME,), signal.events, "stream")
    assert 1 <= signal.events <= 20
    assert signal.to_payload() == {
        "status": "drift",
        "collection": "users",
        "migrations": [SPLIT_NAME],
        "events": signal.events,
        "source": "stream",
    }
    position = await read_drift_position_async(adb, NAMES, "users")
    assert position.fired == 1 and position.fired_seconds_ago is not None


async def test_a_steady_stream_of_old_shape_writes_is_probed_every_max_burst_events(
    kit: Migronaut,
    adb: AsyncDatabase[Any],
    db: Database[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(events_module, "MAX_BURST", 5)
    wait = await started(adb)
    old_users(db, 1000, 20)
    assert await signal_within(wait) == DriftSignal("users", (SPLIT_NAME,), 5, "stream")


async def test_a_new_wait_resumes_after_the_saved_position_and_misses_nothing(
    kit: Migronaut, adb: AsyncDatabase[Any], db: Database[dict[str, Any]]
) -> None:
    old_users(db, 1000, 5)
    first = await signal_within(await started(adb))
    assert first.migrations == (SPLIT_NAME,)
    # The "triggerer" is down: nothing waits while the old release writes 30 more.
    old_users(db, 2000, 30)

    again = await signal_within(
        asyncio.create_task(next_drift_signal(adb, NAMES, "users", settings()))
    )

    # The last fire is recent and re-fires are off: only the resumed stream could see them.
    assert again.source == "stream"
    assert again.events >= 30
    assert (await read_drift_position_async(adb, NAMES, "users")).fired == 2


async def test_writes_already_healed_move_the_position_without_a_signal(
    kit: Migronaut, adb: AsyncDatabase[Any], db: Database[dict[str, Any]]
) -> None:
    await stop(await started(adb))
    # Written in the old shape and healed again while nothing waited.
    old_users(db, 1000, 10)
    db.users.update_many({"_id": {"$gte": 1000}}, {"$set": {"_v": 2}})

    replay = asyncio.create_task(next_drift_signal(adb, NAMES, "users", settings()))
    await asyncio.sleep(QUIET_SECONDS)
    assert not replay.done(), "signalled writes that were already healed"
    await stop(replay)
    position = await read_drift_position_async(adb, NAMES, "users")
    assert (position.events, position.fired) == (10, 0)


async def test_a_signal_nobody_acted_on_fires_again_after_refire_seconds(
    kit: Migronaut, adb: AsyncDatabase[Any], db: Database[dict[str, Any]]
) -> None:
    wait = await started(adb, refire=1.0)
    old_users(db, 1000, 3)
    assert (await signal_within(wait)).source == "stream"

    again = await signal_within(
        asyncio.create_task(next_drift_signal(adb, NAMES, "users", settings(refire=1.0)))
    )
    assert again == DriftSignal("users", (SPLIT_NAME,), 0, "probe")

    kit.background.control(SPLIT_NAME, "retry")
    assert kit_json.run(kit, SPLIT_NAME, concurrency=2)["status"] == "completed"
    healed = asyncio.create_task(next_drift_signal(adb, NAMES, "users", settings(refire=1.0)))
    await asyncio.sleep(QUIET_SECONDS + 1.0)
    assert not healed.done(), "fired again after the documents were healed"
    await stop(healed)


async def test_a_fresh_start_probes_what_was_written_before_any_stream(
    kit: Migronaut, adb: AsyncDatabase[Any], db: Database[dict[str, Any]]
) -> None:
    old_users(db, 1000, 4)
    signal = await signal_within(
        asyncio.create_task(next_drift_signal(adb, NAMES, "users", settings()))
    )
    assert signal == DriftSignal("users", (SPLIT_NAME,), 0, "probe")


async def test_a_position_whose_history_is_gone_starts_afresh_and_probes(
    kit: Migronaut, adb: AsyncDatabase[Any], db: Database[dict[str, Any]]
) -> None:
    # Written while nobody waited; the saved token, moved back, is one the server cannot
    # resume from. A re-fire is not due: only the fresh start probes.
    with db.users.watch() as stream:
        old_users(db, 4000, 1)
        lost = unresumable_token(stream.next()["_id"])
    await save_drift_position_async(adb, NAMES, "users", lost, fired=True)

    signal = await signal_within(
        asyncio.create_task(next_drift_signal(adb, NAMES, "users", settings()))
    )

    assert signal == DriftSignal("users", (SPLIT_NAME,), 0, "probe")
    saved = await read_drift_position_async(adb, NAMES, "users")
    assert saved.resume_token is not None and saved.resume_token != lost


async def test_nothing_is_served_while_no_migration_of_the_collection_is_completed(
    mongo_uri: str, adb: AsyncDatabase[Any], db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    write_background(tmp_path / "migrations")
    seed_users(db, 10)
    with make_kit(mongo_uri, db, tmp_path / "migrations") as kit:
        kit.runs.up()  # registered, not run: its old-shape documents are its own work
        wait = asyncio.create_task(next_drift_signal(adb, NAMES, "users", settings()))
        await asyncio.sleep(QUIET_SECONDS)
        assert not wait.done()
        await stop(wait)


def test_settings_are_checked_before_anything_connects() -> None:
    with pytest.raises(ConfigInvalidError) as caught:
        drift_event_settings(refire_after_seconds=0)
    assert caught.value.context["key"] == "refire_after_seconds"
    with pytest.raises(ConfigInvalidError):
        drift_event_settings(await_ms=True)  # type: ignore[arg-type]
