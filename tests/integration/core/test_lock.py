"""The run lock under real concurrency: threads, processes, and a killed holder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core import Migronaut
from migronaut_core.errors import LockAlreadyHeldError, LockLostError
from migronaut_core.lock import MongoLock
from tests.support.runner import write_migration

NAMES = ["20240101000000_a", "20240102000000_b", "20240103000000_c"]


def _kit(mongo_uri: str, db: Database[dict[str, Any]], migrations: Path, **extra: Any) -> Migronaut:
    return Migronaut(uri=mongo_uri, database=db.name, migrations_dir=str(migrations), **extra)


def _cli(mongo_uri: str, db_name: str, migrations: Path, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "migronaut_core.cli",
        "--uri",
        mongo_uri,
        "--database",
        db_name,
        "--migrations-dir",
        str(migrations),
        *args,
    ]


def test_concurrent_threads_apply_each_migration_once(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MIGRONAUT_TEST_SLEEP", "0.3")
    for name in NAMES:
        write_migration(tmp_path, name)
    applied: list[str] = []
    failures: list[BaseException] = []
    start = threading.Barrier(4)

    def run() -> None:
        with _kit(mongo_uri, db, tmp_path) as kit:
            start.wait()
            try:
                result = kit.runs.up(wait_for_lock_seconds=30)
                applied.extend(item.name for item in result.migrations)
            except BaseException as exc:
                failures.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert sorted(applied) == NAMES
    assert {doc["_id"]: doc["n"] for doc in db.runs.find()} == dict.fromkeys(NAMES, 1)


def test_concurrent_processes_apply_each_migration_once(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    for name in NAMES:
        write_migration(tmp_path, name)
    env = {**os.environ, "MIGRONAUT_TEST_SLEEP": "0.3"}
    command = _cli(mongo_uri, db.name, tmp_path, "up", "--wait", "60", "--json")
    processes = [
        subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True) for _ in range(3)
    ]
    outputs = [process.communicate(timeout=120)[0] for process in processes]
    assert [process.returncode for process in processes] == [0, 0, 0]
    applied = [m["name"] for out in outputs for m in json.loads(out)["migrations"]]
    assert sorted(applied) == NAMES
    assert {doc["_id"]: doc["n"] for doc in db.runs.find()} == dict.fromkeys(NAMES, 1)


def test_a_second_run_without_wait_gets_lock_already_held(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    write_migration(tmp_path, NAMES[0])
    holder = MongoLock(db.migronaut_lock, "migrations", 60, requested_by="other-run")
    holder.acquire()
    try:
        with _kit(mongo_uri, db, tmp_path) as kit, pytest.raises(LockAlreadyHeldError) as raised:
            kit.runs.up()
        assert raised.value.context["holder"]["requested_by"] == "other-run"
        assert "other-run" in raised.value.message
        result = subprocess.run(
            _cli(mongo_uri, db.name, tmp_path, "up"), capture_output=True, text=True, check=False
        )
        assert result.returncode == LockAlreadyHeldError.exit_code
        assert "LockAlreadyHeldError" in result.stderr
    finally:
        holder.release()
    assert db.runs.count_documents({}) == 0


def test_a_killed_runs_lock_expires_and_the_next_run_proceeds(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    write_migration(
        tmp_path,
        NAMES[0],
        """
        import os, time

        def up(ctx):
            if os.environ.get("MIGRONAUT_TEST_HANG"):
                ctx.db.progress.insert_one({"started": True})
                time.sleep(3600)
            ctx.db.runs.update_one({"_id": ctx.name}, {"$inc": {"n": 1}}, upsert=True)
        """,
    )
    (tmp_path / "migronaut.toml").write_text("lock_ttl_seconds = 2\n")
    env = {**os.environ, "MIGRONAUT_TEST_HANG": "1"}
    command = _cli(mongo_uri, db.name, tmp_path, "--config", str(tmp_path / "migronaut.toml"), "up")
    crashed = subprocess.Popen(command, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while db.progress.count_documents({}) == 0:
            assert time.monotonic() < deadline, "the first run never started its migration"
            time.sleep(0.1)
    finally:
        os.killpg(crashed.pid, signal.SIGKILL)
        crashed.wait()
    with _kit(mongo_uri, db, tmp_path, lock_ttl_seconds=2) as kit:
        info = kit.runs.inspect_lock()
        assert info is not None
        result = kit.runs.up(wait_for_lock_seconds=20)
    assert [m.name for m in result.migrations] == [NAMES[0]]
    assert db.runs.find_one({"_id": NAMES[0]})["n"] == 1


def test_tokens_fence_a_stalled_holder(db: Database[dict[str, Any]]) -> None:
    first = MongoLock(db.migronaut_lock, "fenced", 1)
    first_token = first.acquire()
    time.sleep(1.3)  # expired by the server's clock
    second = MongoLock(db.migronaut_lock, "fenced", 30)
    second_token = second.acquire()
    assert second_token == first_token + 1
    assert not first.renew()
    with pytest.raises(LockLostError):
        first.assert_held()
    assert not first.release()
    info = second.inspect()
    assert info is not None
    assert info.held
    assert info.token == second_token
    second.release()
    third = MongoLock(db.migronaut_lock, "fenced", 30)
    assert third.acquire() == second_token + 1
    third.release()


def test_heartbeat_keeps_a_long_run_holding_its_lock(db: Database[dict[str, Any]]) -> None:
    lock = MongoLock(db.migronaut_lock, "long", 1.5)
    with lock:
        time.sleep(2.5)
        assert not lock.lost
        other = MongoLock(db.migronaut_lock, "long", 1.5)
        assert not other.try_acquire()
        lock.assert_held()
    assert MongoLock(db.migronaut_lock, "long", 1.5).try_acquire()


def test_racing_acquirers_get_exactly_one_winner(db: Database[dict[str, Any]]) -> None:
    winners: list[int] = []
    barrier = threading.Barrier(8)

    def race() -> None:
        lock = MongoLock(db.migronaut_lock, "race", 30)
        barrier.wait()
        if lock.try_acquire():
            winners.append(1)

    threads = [threading.Thread(target=race) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(winners) == 1


def test_on_lost_callbacks_fire_once_the_heartbeat_finds_the_lock_gone(
    db: Database[dict[str, Any]],
) -> None:
    lock = MongoLock(db.migronaut_lock, "background:x", ttl_seconds=0.3)
    lost = threading.Event()
    late: list[str] = []
    lock.on_lost(lost.set)
    with lock:
        assert not lost.wait(0.3)  # renewed: still held
        MongoLock(db.migronaut_lock, "background:x", ttl_seconds=0.3).force_release()
        assert lost.wait(5)
        assert lock.lost
        lock.on_lost(lambda: late.append("called"))  # registered after the loss: at once
    assert late == ["called"]
