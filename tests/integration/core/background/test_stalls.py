"""``next_stall_signal``: the async wait Airflow's stall trigger runs, against a real mongod.

A migration whose driver went away (its lease released or lapsed, nothing
recorded since) is signalled once the stall time has passed, by the same rule
the heal applies (``stalled_background``); the signal is noted in MongoDB, so a
new wait (a restarted triggerer) does not repeat it until a whole stall time
passed without a takeover; a live lease or a fresh coordinator step keeps it quiet.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.database import Database

from migronaut_core import (
    Migronaut,
    StallSignal,
    StallWatchSettings,
    next_stall_signal,
    stall_watch_settings,
)
from migronaut_core.config import BackgroundCollections
from migronaut_core.errors import ConfigInvalidError
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background

pytestmark = [pytest.mark.integration]

NAMES = BackgroundCollections.from_prefix("migronaut_background")
TTL_SECONDS = 2
STALL = 1.5
SETTINGS = stall_watch_settings(stall_seconds=STALL, poll_seconds=0.1)


@pytest.fixture
def kit(mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path) -> Iterator[Migronaut]:
    seed_users(db, 500)
    # 10 ms a document: a batch of 100 takes a second, so a working lane holds its lease.
    write_background(tmp_path / "migrations", batch_size=100, per_document_seconds=0.01)
    with make_kit(mongo_uri, db, tmp_path / "migrations", lock_ttl_seconds=TTL_SECONDS) as kit:
        kit.runs.up()
        yield kit


def abandoned(kit: Migronaut) -> None:
    """A driver that planned, worked one slice and went away: running, no lease held."""
    assert kit.background.coordinate(SPLIT_NAME).next == "process"
    assert kit.background.run_slice(SPLIT_NAME, slice_ms=100).outcome in ("yielded", "exhausted")


async def wait_signal(adb: AsyncDatabase[Any], timeout: float) -> StallSignal:
    return await asyncio.wait_for(next_stall_signal(adb, NAMES, SETTINGS), timeout)


@pytest.mark.anyio
async def test_an_abandoned_migration_is_signalled_once_the_stall_time_passed(
    kit: Migronaut, adb: AsyncDatabase[Any]
) -> None:
    abandoned(kit)
    started = time.monotonic()
    signal = await wait_signal(adb, 30)
    waited = time.monotonic() - started
    assert signal.migrations == (SPLIT_NAME,)
    assert signal.idle_seconds[SPLIT_NAME] >= STALL
    assert waited >= STALL - 0.3  # not before: its last checkpoint was just written
    # The rule the heal applies agrees.
    assert kit.background.stalled(stall_seconds=STALL) == [SPLIT_NAME]
    payload = signal.to_payload()
    assert payload["status"] == "stalled"
    assert payload["migrations"] == [SPLIT_NAME]
    assert set(payload) == {"status", "migrations", "idle_seconds"}


@pytest.mark.anyio
async def test_a_new_wait_does_not_repeat_a_signal_until_a_stall_time_passed_without_takeover(
    kit: Migronaut, adb: AsyncDatabase[Any]
) -> None:
    abandoned(kit)
    await wait_signal(adb, 30)
    fired = time.monotonic()
    # A restarted watch: the signal is noted in MongoDB, so nothing fires at once ...
    with pytest.raises(TimeoutError):
        await wait_signal(adb, STALL * 0.6)
    # ... but a takeover that never came is signalled again after a stall time.
    again = await wait_signal(adb, 30)
    assert again.migrations == (SPLIT_NAME,)
    assert time.monotonic() - fired >= STALL - 0.3
    noted = kit._runtime.db[NAMES.drift_events].find_one({"_id": {"stall": SPLIT_NAME}})
    assert noted is not None and noted["counters"]["fired"] == 2


@pytest.mark.anyio
async def test_a_takeover_step_quiets_it_and_a_new_stall_is_signalled_again(
    kit: Migronaut, adb: AsyncDatabase[Any]
) -> None:
    abandoned(kit)
    await wait_signal(adb, 30)
    # The takeover's coordinator step moves it: quiet for a whole stall time from then.
    kit.background.coordinate(SPLIT_NAME)
    stepped = time.monotonic()
    signal = await wait_signal(adb, 30)
    assert signal.migrations == (SPLIT_NAME,)
    assert time.monotonic() - stepped >= STALL - 0.3


@pytest.mark.anyio
async def test_a_live_lease_or_a_finished_migration_is_never_signalled(
    kit: Migronaut, adb: AsyncDatabase[Any]
) -> None:
    abandoned(kit)
    # A lane holding its lease (a slice of about 4 s) keeps it quiet past the stall time.
    slice_done = asyncio.get_running_loop().run_in_executor(
        None, lambda: kit.background.run_slice(SPLIT_NAME, slice_ms=10_000)
    )
    with pytest.raises(TimeoutError):
        await wait_signal(adb, STALL * 1.5)
    await slice_done
    assert kit_json.run(kit, SPLIT_NAME)["status"] == "completed"
    with pytest.raises(TimeoutError):
        await wait_signal(adb, STALL * 1.5)


@pytest.mark.anyio
async def test_lanes_waiting_for_a_window_are_not_signalled_until_it_opens(
    kit: Migronaut, adb: AsyncDatabase[Any]
) -> None:
    abandoned(kit)
    now = kit._runtime.wall_clock()
    opens = now + timedelta(seconds=STALL * 2)
    hold = {"reason": "window", "until": opens, "since": now, "at": now}
    kit._runtime.db[NAMES.state].update_one({"_id": SPLIT_NAME}, {"$set": {"hold": hold}})
    with pytest.raises(TimeoutError):
        await wait_signal(adb, STALL * 2)  # past the stall time, but the window is shut
    assert kit.background.stalled(stall_seconds=STALL) == []
    # Nobody came when it opened: a stall time after the opening, it is signalled.
    signal = await wait_signal(adb, 30)
    assert signal.migrations == (SPLIT_NAME,)


def test_bad_settings_are_refused_naming_the_option() -> None:
    for options, key in (
        ({"stall_seconds": 0.5}, "stall_seconds"),
        ({"stall_seconds": True}, "stall_seconds"),
        ({"poll_seconds": 0}, "poll_seconds"),
    ):
        with pytest.raises(ConfigInvalidError) as refused:
            stall_watch_settings(**options)
        assert refused.value.context == {"key": key}
    assert stall_watch_settings(stall_seconds=900) == StallWatchSettings(900.0, 30.0)
    assert stall_watch_settings(stall_seconds=5).poll_seconds == 1.0
