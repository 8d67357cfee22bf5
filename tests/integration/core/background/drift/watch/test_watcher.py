"""The live drift watcher against a real replica set (and a standalone server).

A completed background migration, then an "old release" of the application that
keeps writing ``{_v: 1, name}``: the watcher upgrades those documents moments
later, resumes after a leader dies (``kill -9``) without missing a write, and
falls back to a probe when its resume token's history is gone.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.database import Database

from migronaut_core import Migronaut
from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.drift.watch import Watcher
from migronaut_core.errors import ConfigInvalidError
from tests.support import kit_json
from tests.support.background import (
    ADD_INITIALS,
    INITIALS_NAME,
    SPLIT_NAME,
    make_kit,
    seed_users,
    wait_until,
    write_background,
)
from tests.support.watching import leader_pid, old_release_writing, old_shape, unresumable_token

TTL_SECONDS = 2
REPO = Path(__file__).resolve().parents[6]
WATCH_ROWS = "migronaut_background_watch"


def completed_kit(mongo_uri: str, db: Database[dict[str, Any]], migrations: Path) -> Migronaut:
    """A kit whose split migration has completed (others in ``migrations`` registered)."""
    write_background(migrations, batch_size=100, max_parallel=2)
    seed_users(db, 50)
    db.users.create_index([("_v", 1), ("_id", 1)])
    kit = make_kit(mongo_uri, db, migrations, lock_ttl_seconds=TTL_SECONDS)
    kit.runs.up()
    assert kit_json.run(kit, SPLIT_NAME, concurrency=2)["status"] == "completed"
    return kit


@pytest.fixture
def kit(mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path) -> Iterator[Migronaut]:
    with completed_kit(mongo_uri, db, tmp_path / "migrations") as kit:
        yield kit


def streaming(watcher: Watcher) -> bool:
    return [row["state"] for row in watcher.status()] == ["streaming"]


def test_old_shape_writes_are_upgraded_moments_after_they_land(
    kit: Migronaut, db: Database[dict[str, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="migronaut_core")
    events: list[tuple[str, dict[str, Any]]] = []
    kit.background.on("background:drift", lambda name, payload: events.append((name, payload)))
    watcher = kit.drift.watch(refresh_seconds=1.0)
    try:
        assert watcher.running
        wait_until(lambda: streaming(watcher), what="the stream")
        # An old release inserts, replaces and updates documents in the old shape.
        db.users.insert_many([old_shape(1000 + i) for i in range(30)])
        db.users.replace_one({"_id": 0}, old_shape(0))
        db.users.update_one(
            {"_id": 1},
            {
                "$set": {"_v": 1, "name": "Oldname1 Oldsurname1"},
                "$unset": {"first": "", "last": ""},
            },
        )
        # A new release writes the new shape: left alone.
        new_shape = {"_id": 2000, "_v": 2, "first": "Newname", "last": "Newsurname"}
        db.users.insert_one(dict(new_shape))
        wait_until(lambda: db.users.count_documents({"_v": 1}) == 0, what="the upgrades")

        upgraded = db.users.find_one({"_id": 1005})
        assert upgraded == {"_id": 1005, "_v": 2, "first": "Oldname1005", "last": "Oldsurname1005"}
        assert db.users.find_one({"_id": 1}) == {
            "_id": 1,
            "_v": 2,
            "first": "Oldname1",
            "last": "Oldsurname1",
            "n": 1,
        }
        assert db.users.find_one({"_id": 2000}) == new_shape
        assert db.users.count_documents({"name": {"$exists": True}}) == 0

        row = wait_until(
            lambda: (r := kit_json.watch_status(kit, "users"))["counters"]["upgraded"] >= 32 and r,
            what="the saved counters",
        )
        assert row["state"] == "streaming"
        assert row["edges"] == [SPLIT_NAME]
        assert row["leader"]["pid"] == os.getpid()
        assert row["counters"]["events"] >= 32
        assert row["counters"]["errors"] == 0
        assert row["fresh"] is True
        assert row["last_event_at"] is not None
        local = watcher.status()[0]
        assert local["leading"] is True
        assert local["counters"]["upgraded"] == row["counters"]["upgraded"]
        # The resume token is stored, never shown.
        raw = db[WATCH_ROWS].find_one({"_id": "users"})
        assert raw is not None and "_data" in repr(raw["resume_token"])
        assert "_data" not in repr(row)
        assert "_data" not in repr(kit_json.watch_status(kit))
        assert "_data" not in repr(watcher.status())
        assert kit_json.watch_status(kit, "nothing_here") is None
        upgrades = [payload for _, payload in events if payload["action"] == "upgraded"]
        assert sum(payload["count"] for payload in upgrades) >= 32
        assert all(payload["collection"] == "users" for payload in upgrades)
    finally:
        watcher.stop()
    assert not watcher.running
    assert watcher.status()[0]["state"] == "stopped"
    assert kit_json.watch_status(kit, "users")["state"] == "stopped"
    lock = db.migronaut_lock.find_one({"_id": "watch:users"})
    assert lock is not None and lock["owner"] is None
    assert kit_json.status(kit, SPLIT_NAME)["status"] == "completed"
    # No document value reached a log line or an event.
    text = " ".join(record.getMessage() for record in caplog.records) + repr(events)
    assert "Oldname" not in text and "Oldsurname" not in text and "Newname" not in text


def test_old_shape_writes_racing_the_start_probe_reopen_nothing(
    kit: Migronaut, db: Database[dict[str, Any]]
) -> None:
    # The probe of a fresh start reads the collection as of the stream's start: what
    # an old release writes once the stream is open is the stream's, not drift.
    written: list[int] = []
    stop = threading.Event()

    def keep_writing() -> None:
        while db[WATCH_ROWS].count_documents({"resume_token": {"$exists": True}}) == 0:
            if stop.wait(0.001):
                return
        while not stop.is_set() and len(written) < 2000:
            key = 8000 + len(written)
            db.users.insert_one(old_shape(key))
            written.append(key)

    writer = threading.Thread(target=keep_writing, daemon=True)
    writer.start()
    try:
        with kit.drift.watch(refresh_seconds=1.0) as watcher:
            wait_until(lambda: streaming(watcher), what="the stream")
            wait_until(lambda: len(written) > 50, what="the old release")
            stop.set()
            writer.join(5)
            wait_until(
                lambda: db.users.count_documents({"_id": {"$gte": 8000}, "_v": 1}) == 0,
                what="the upgrades",
            )
    finally:
        stop.set()
    assert kit_json.status(kit, SPLIT_NAME)["status"] == "completed"


def test_a_chain_of_completed_migrations_is_applied_in_order(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    migrations = tmp_path / "migrations"
    write_background(migrations, INITIALS_NAME, body=ADD_INITIALS)
    cancel = CancelToken()
    with completed_kit(mongo_uri, db, migrations) as kit:
        with kit.drift.watch(refresh_seconds=0.5, cancel=cancel) as watcher:
            wait_until(lambda: streaming(watcher), what="the stream")
            assert kit_json.watch_status(kit, "users")["edges"] == [SPLIT_NAME]
            # The next migration completes while the watcher runs: it is served too.
            assert kit_json.run(kit, INITIALS_NAME)["status"] == "completed"
            wait_until(
                lambda: kit_json.watch_status(kit, "users")["edges"] == [SPLIT_NAME, INITIALS_NAME],
                what="the new edge",
            )
            db.users.insert_many([old_shape(3000), old_shape(3001)])
            # A document two versions behind and one a version behind.
            db.users.insert_one({"_id": 3002, "_v": 2, "first": "Ab", "last": "Cd"})
            wait_until(
                lambda: db.users.count_documents({"_id": {"$gte": 3000}, "_v": 3}) == 3,
                what="the chain",
            )
            assert kit_json.watch_status(kit, "users")["target"] == 3
            # The caller's cancel token stops it too, leadership given up.
            cancel.cancel("shutting down")
            wait_until(lambda: not watcher.running, what="the stop")
            wait_until(lambda: watcher.status()[0]["state"] == "stopped", what="the stream's end")
            assert kit_json.watch_status(kit, "users")["state"] == "stopped"
        assert db.users.find_one({"_id": 3000}) == {
            "_id": 3000,
            "_v": 3,
            "first": "Oldname3000",
            "last": "Oldsurname3000",
            "initials": "OO",
        }
        assert db.users.find_one({"_id": 3002})["initials"] == "AC"  # type: ignore[index]
        assert kit_json.status(kit, INITIALS_NAME)["status"] == "completed"


def test_a_document_the_transform_fails_on_is_counted_and_reported(
    kit: Migronaut, db: Database[dict[str, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    events: list[dict[str, Any]] = []
    kit.background.on("background:drift", lambda name, payload: events.append(payload))
    with kit.drift.watch(on_drift="report", refresh_seconds=1.0) as watcher:
        wait_until(lambda: streaming(watcher), what="the stream")
        db.users.insert_one({"_id": 7000, "_v": 1, "nickname": "Secretvalue"})  # no name
        db.users.insert_one(old_shape(7001))
        row = wait_until(
            lambda: (r := kit_json.watch_status(kit, "users"))["counters"]["errors"] == 1 and r,
            what="the error count",
        )
        assert row["counters"]["upgraded"] >= 1
        assert {
            "migration": SPLIT_NAME,
            "collection": "users",
            "source": "stream",
            "action": "failed",
            "count": 1,
        } in events
    assert db.users.find_one({"_id": 7000}) == {"_id": 7000, "_v": 1, "nickname": "Secretvalue"}
    assert db.users.find_one({"_id": 7001})["_v"] == 2  # type: ignore[index]
    assert kit_json.status(kit, SPLIT_NAME)["status"] == "completed"
    assert "Secretvalue" not in " ".join(record.getMessage() for record in caplog.records)


def test_lost_history_falls_back_to_a_probe_and_a_fresh_stream(
    kit: Migronaut, db: Database[dict[str, Any]]
) -> None:
    # Written while nobody watched: only the probe can find it. Its event's token,
    # moved back, is a token the server cannot resume from, as when history is gone.
    with db.users.watch() as probe:
        db.users.insert_one(old_shape(4000))
        lost = unresumable_token(probe.next()["_id"])
    db[WATCH_ROWS].insert_one({"_id": "users", "resume_token": lost, "state": "stopped"})
    events: list[dict[str, Any]] = []
    kit.background.on("background:drift", lambda name, payload: events.append(payload))
    with kit.drift.watch(on_drift="report", refresh_seconds=1.0) as watcher:
        wait_until(lambda: streaming(watcher), what="the fresh stream")
        raw = db[WATCH_ROWS].find_one({"_id": "users"})
        assert raw is not None and raw["resume_token"] != lost
        assert {
            "migration": SPLIT_NAME,
            "collection": "users",
            "source": "verify",
            "action": "reported",
        } in events
        # The fresh stream serves what comes next.
        db.users.insert_one(old_shape(4001))
        wait_until(lambda: db.users.find_one({"_id": 4001, "_v": 2}), what="the upgrade")
    # Reported only: still completed, the old document left for an operator.
    assert kit_json.status(kit, SPLIT_NAME)["status"] == "completed"
    assert db.users.find_one({"_id": 4000})["_v"] == 1  # type: ignore[index]


def test_the_watchers_action_defaults_to_background_on_drift(
    kit: Migronaut, mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    # Written while nobody watched: the probe of the fresh start finds it, and the
    # configured ``report`` (no ``on_drift`` given) leaves the migration completed.
    db.users.insert_one(old_shape(9000))
    events: list[dict[str, Any]] = []
    with make_kit(
        mongo_uri, db, tmp_path / "migrations", background_on_drift="report"
    ) as reporting:
        reporting.background.on("background:drift", lambda name, payload: events.append(payload))
        with reporting.drift.watch(refresh_seconds=1.0) as watcher:
            wait_until(lambda: streaming(watcher), what="the stream")
            wait_until(lambda: events, what="the probe's finding")
    assert events == [
        {"migration": SPLIT_NAME, "collection": "users", "source": "verify", "action": "reported"}
    ]
    assert kit_json.status(kit, SPLIT_NAME)["status"] == "completed"
    assert db.users.find_one({"_id": 9000})["_v"] == 1  # type: ignore[index]


def test_the_watcher_refuses_a_standalone_server(
    standalone_uri: str,
    tmp_path: Path,
) -> None:
    migrations = tmp_path / "migrations"
    write_background(migrations)
    with Migronaut(uri=standalone_uri, database="t", migrations_dir=str(migrations)) as kit:
        with pytest.raises(ConfigInvalidError, match="on_drift"):
            kit.drift.watch(on_drift="fix")
        with pytest.raises(ConfigInvalidError) as raised:
            kit.drift.watch()
        assert "poll" in raised.value.message
        assert "standalone" in raised.value.message
    with MongoClient(standalone_uri) as client:
        assert client.t.list_collection_names() == []  # refused before anything is written


# -- two processes ----------------------------------------------------------------------


class WatchProcess:
    """``watch_process.py`` in a child process, its latest printed status kept."""

    def __init__(self, mongo_uri: str, db_name: str, migrations: Path, log: Path) -> None:
        self.stderr = log.open("w")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.watch_process",
                mongo_uri,
                db_name,
                str(migrations),
                str(TTL_SECONDS),
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            start_new_session=True,
        )
        self.pid = self.process.pid
        self.latest: dict[str, Any] = {}
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.latest = json.loads(line)

    def shows(self, state: str, leading: bool) -> bool:
        return self.latest.get("status") == [
            {"collection": "users", "state": state, "leading": leading}
        ]

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)
        self.stderr.close()
        # Shown by pytest when the test failed.
        print(f"--- watcher {self.pid} (exit {self.process.returncode}):")
        print(Path(self.stderr.name).read_text()[-3000:])


@pytest.mark.slow
def test_a_standby_takes_over_from_a_killed_leader_and_misses_nothing(
    kit: Migronaut, mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    migrations = tmp_path / "migrations"
    first = WatchProcess(mongo_uri, db.name, migrations, tmp_path / "first.log")
    second: WatchProcess | None = None
    try:
        wait_until(lambda: leader_pid(kit) == first.pid, 20, "the first leader")
        second = WatchProcess(mongo_uri, db.name, migrations, tmp_path / "second.log")
        wait_until(lambda: second.shows("standby", False), 20, "the standby")
        assert first.shows("streaming", True)
        assert leader_pid(kit) == first.pid

        db.users.insert_many([old_shape(5000 + i) for i in range(10)])
        wait_until(
            lambda: kit_json.watch_status(kit, "users")["counters"]["upgraded"] == 10,
            what="the first upgrades",
        )

        # The leader dies; an old release keeps writing through the gap.
        os.kill(first.pid, signal.SIGKILL)
        first.process.wait(10)
        killed_at = time.monotonic()
        with old_release_writing(db, first_key=6000) as written:
            wait_until(lambda: leader_pid(kit) == second.pid, TTL_SECONDS + 10, "the takeover")
            takeover = time.monotonic() - killed_at
            time.sleep(1.0)
        print(f"takeover after {takeover:.1f}s")
        assert takeover < TTL_SECONDS + 6
        assert len(written) > 20

        # Everything written in the gap ends upgraded: the new leader resumed from the
        # dead one's position (a fresh start would have reopened the migration).
        wait_until(lambda: db.users.count_documents({"_v": 1}) == 0, 15, "the gap's upgrades")
        assert db.users.count_documents({"_id": {"$in": written}, "_v": 2}) == len(written)
        assert kit_json.status(kit, SPLIT_NAME)["status"] == "completed"
        wait_until(lambda: second.shows("streaming", True), what="the new leader's status")

        second.process.send_signal(signal.SIGTERM)
        assert second.process.wait(20) == 0
        row = kit_json.watch_status(kit, "users")
        assert row["state"] == "stopped"
        assert row["leader"]["pid"] == second.pid
        assert row["counters"]["upgraded"] >= 10 + len(written)
    finally:
        first.close()
        if second is not None:
            second.close()


def test_the_start_probe_reads_through_the_index_the_verify_probe_uses(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    # No {_v: 1, _id: 1} index, one led by _v: both probes hint it (never a guess).
    migrations = tmp_path / "migrations"
    write_background(migrations, batch_size=100, max_parallel=2)
    seed_users(db, 50)
    db.users.create_index([("_v", 1), ("n", 1)])
    with make_kit(mongo_uri, db, migrations, lock_ttl_seconds=TTL_SECONDS) as kit:
        kit.runs.up()
        assert kit_json.run(kit, SPLIT_NAME, concurrency=2)["status"] == "completed"
        db.command("profile", 2)
        try:
            with kit.drift.watch(refresh_seconds=1.0) as watcher:
                wait_until(lambda: streaming(watcher), what="the stream")
        finally:
            db.command("profile", 0)
    probes = list(
        db["system.profile"].find(
            {"ns": f"{db.name}.users", "command.readConcern.level": "snapshot"}
        )
    )
    assert probes
    assert all(probe["command"].get("hint") == {"_v": 1, "n": 1} for probe in probes)
