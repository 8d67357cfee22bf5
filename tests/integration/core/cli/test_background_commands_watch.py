"""``migronaut background watch`` hosts the live drift watcher; ``watch-status`` shows it.

Real ``migronaut`` processes against the real replica set: one leads and one
stands by; ``kill -9`` the leader and the other takes over without missing a
write; SIGTERM or Ctrl-C stops a watcher cleanly (exit 0, leadership given up);
``watch-status`` shows leaders, lag and resume state, never the resume token.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core import Migronaut
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, seed_users, wait_until, write_background
from tests.support.cli import migronaut
from tests.support.watching import leader_pid, old_release_writing, old_shape

Db = Database[dict[str, Any]]
TTL_SECONDS = 2


@pytest.fixture
def kit(mongo_uri: str, db: Db, tmp_path: Path) -> Iterator[Migronaut]:
    """A completed split migration on users, and a migronaut.toml for the CLI."""
    (tmp_path / "migronaut.toml").write_text(
        f'uri = "{mongo_uri}"\ndatabase = "{db.name}"\nmigrations_dir = "migrations"\n'
        f'lock_ttl_seconds = {TTL_SECONDS}\nbackground_drift = "stream"\n'
    )
    migrations = tmp_path / "migrations"
    write_background(migrations, batch_size=100, max_parallel=2)
    seed_users(db, 50)
    db.users.create_index([("_v", 1), ("_id", 1)])
    with make_kit(mongo_uri, db, migrations, lock_ttl_seconds=TTL_SECONDS) as kit:
        kit.runs.up()
        assert kit_json.run(kit, SPLIT_NAME, concurrency=2)["status"] == "completed"
        yield kit


class WatchCommand:
    """``migronaut background watch`` in a child process (its own session, like a service)."""

    def __init__(self, cwd: Path, log: Path) -> None:
        self.log = log
        self.stderr = log.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "migronaut_core.cli", "background", "watch"],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            start_new_session=True,
        )
        self.pid = self.process.pid

    def said(self, text: str) -> bool:
        return text in self.log.read_text()

    def stop(self, signum: int) -> tuple[int, str]:
        self.process.send_signal(signum)
        out, _ = self.process.communicate(timeout=30)
        return self.process.returncode, out

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)
        self.stderr.close()
        print(f"--- watcher {self.pid} (exit {self.process.returncode}):")  # shown on failure
        print(self.log.read_text()[-3000:])


def test_watch_status_shows_the_leader_lag_and_resume_state_and_ctrl_c_stops(
    kit: Migronaut, db: Db, tmp_path: Path
) -> None:
    assert migronaut(tmp_path, "background", "watch-status", "--json").stdout.strip() == "[]"
    watcher = WatchCommand(tmp_path, tmp_path / "watch.log")
    try:
        wait_until(lambda: leader_pid(kit) == watcher.pid, 30, "the leader")
        db.users.insert_many([old_shape(5000 + i) for i in range(5)])
        wait_until(lambda: db.users.count_documents({"_v": 1}) == 0, 15, "the upgrades")
        wait_until(lambda: watcher.said("users: 5 upgraded by"), 10, "the upgrade line")
        time.sleep(2.5)  # an idle leader saves its position every 2 s

        shown = migronaut(tmp_path, "background", "watch-status", "--json")
        assert shown.returncode == 0, shown.stderr
        [row] = json.loads(shown.stdout)
        assert (row["collection"], row["state"], row["fresh"]) == ("users", "streaming", True)
        assert row["leader"]["pid"] == watcher.pid
        assert row["counters"]["upgraded"] == 5
        assert row["resume"]["saved"] is True
        assert row["resume"]["at"] is not None
        assert 0 <= row["resume"]["lag_seconds"] < 10
        raw = db.migronaut_background_watch.find_one({"_id": "users"})
        assert raw is not None
        assert raw["resume_token"]["_data"] not in shown.stdout and "_data" not in shown.stdout
        human = migronaut(tmp_path, "background", "watch-status", "--collection", "users")
        assert f"users: streaming, leader {raw['leader']['host']} pid {watcher.pid}" in human.stdout
        assert "s behind" in human.stdout and "5 upgraded" in human.stdout
        assert raw["resume_token"]["_data"] not in human.stdout

        code, out = watcher.stop(signal.SIGINT)
        assert code == 0, out
        assert "users: stopped, 5 upgraded by this process" in out
    finally:
        watcher.close()
    row = kit_json.watch_status(kit, "users")
    assert row["state"] == "stopped"
    lock = db.migronaut_lock.find_one({"_id": "watch:users"})
    assert lock is not None and lock["owner"] is None  # leadership given up, not left to expire
    assert "Oldname" not in watcher.log.read_text()


@pytest.mark.slow
def test_a_standby_cli_takes_over_from_a_killed_leader_and_sigterm_exits_0(
    kit: Migronaut, db: Db, tmp_path: Path
) -> None:
    first = WatchCommand(tmp_path, tmp_path / "first.log")
    second: WatchCommand | None = None
    try:
        wait_until(lambda: leader_pid(kit) == first.pid, 30, "the first leader")
        second = WatchCommand(tmp_path, tmp_path / "second.log")
        wait_until(lambda: second.said("users: standby"), 30, "the standby")
        assert leader_pid(kit) == first.pid

        os.kill(first.pid, signal.SIGKILL)
        first.process.wait(10)
        killed_at = time.monotonic()
        with old_release_writing(db, first_key=6000) as written:
            wait_until(lambda: leader_pid(kit) == second.pid, TTL_SECONDS + 15, "the takeover")
            takeover = time.monotonic() - killed_at
            time.sleep(1.0)
        print(f"takeover after {takeover:.1f}s")
        assert len(written) > 10
        wait_until(lambda: db.users.count_documents({"_v": 1}) == 0, 15, "the gap's upgrades")
        assert db.users.count_documents({"_id": {"$in": written}, "_v": 2}) == len(written)
        assert kit_json.status(kit, SPLIT_NAME)["status"] == "completed"

        code, out = second.stop(signal.SIGTERM)
        assert code == 0, out
        assert "users: stopped" in out
        row = kit_json.watch_status(kit, "users")
        assert (row["state"], row["leader"]["pid"]) == ("stopped", second.pid)
        assert row["counters"]["upgraded"] >= len(written)
    finally:
        first.close()
        if second is not None:
            second.close()
