"""Local mongod replica sets: what tests rely on, failover, the CLI, and no leftovers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from pymongo import MongoClient
from pymongo.database import Database
from pymongo.errors import PyMongoError

from migronaut_dev.mongod import LocalReplicaSet, ServerHandle, start_replica_set


def _gone(pid: int | None) -> bool:
    """True once ``pid`` has exited (an unreaped zombie counts as exited)."""
    assert pid is not None
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def _wait_gone(pid: int | None, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while not _gone(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def _client(uri: str, **options: Any) -> MongoClient[dict[str, Any]]:
    return MongoClient(uri, **options)


@pytest.fixture(scope="module")
def single() -> Iterator[LocalReplicaSet]:
    with start_replica_set(1) as replica_set:
        yield replica_set


@pytest.fixture
def client(single: LocalReplicaSet) -> Iterator[MongoClient[dict[str, Any]]]:
    with _client(single.uri, serverSelectionTimeoutMS=20_000) as mongo:
        yield mongo


def test_session_fixtures_give_a_writable_database(
    mongo_server: ServerHandle, db: Database[dict[str, Any]], request: pytest.FixtureRequest
) -> None:
    assert mongo_server.source in ("env", "docker", "bundled")
    db.things.insert_one({"_id": 1})
    assert db.things.count_documents({}) == 1
    assert request.node.get_closest_marker("integration") is not None


def test_single_node_set_is_writable_and_local(
    single: LocalReplicaSet, client: MongoClient[dict[str, Any]]
) -> None:
    (member,) = single.members
    assert member.host == "127.0.0.1"
    assert single.uri == f"mongodb://127.0.0.1:{member.port}/?replicaSet={single.name}"
    assert "directConnection" not in single.uri
    assert single.primary_index() == 0
    assert client.admin.command("hello")["setName"] == single.name
    client.t_dev.items.insert_one({"_id": "a"})
    assert client.t_dev.items.find_one({"_id": "a"}) == {"_id": "a"}
    assert member.log_path.is_file()
    assert member.log_path.parent == member.dbpath.parent


def test_multi_document_transaction_commits(client: MongoClient[dict[str, Any]]) -> None:
    items = client.t_dev_tx.items
    with client.start_session() as session, session.start_transaction():
        items.insert_one({"_id": 1}, session=session)
        items.insert_one({"_id": 2}, session=session)
        assert items.count_documents({}) == 0  # not visible outside before commit
    assert items.count_documents({}) == 2


def test_change_stream_sees_an_insert(client: MongoClient[dict[str, Any]]) -> None:
    items = client.t_dev_cs.items
    with items.watch(max_await_time_ms=200) as stream:
        items.insert_one({"_id": "x"})
        deadline = time.monotonic() + 10
        change = None
        while change is None and time.monotonic() < deadline:
            change = stream.try_next()
    assert change is not None
    assert change["operationType"] == "insert"


def test_fail_points_are_enabled(client: MongoClient[dict[str, Any]]) -> None:
    client.admin.command(
        "configureFailPoint", "failCommand", mode={"times": 1}, data={"failCommands": ["ping"]}
    )
    client.admin.command("configureFailPoint", "failCommand", mode="off")


def test_kill_and_restart_keeps_port_and_data(
    single: LocalReplicaSet, client: MongoClient[dict[str, Any]]
) -> None:
    member = single.members[0]
    port, old_pid = member.port, member.pid
    client.t_dev_restart.items.insert_one({"_id": 1})
    single.kill(0)
    assert _gone(old_pid)
    single.restart(0)
    assert member.port == port
    assert member.pid != old_pid
    assert single.wait_for_primary(30) == 0
    assert client.t_dev_restart.items.count_documents({}) == 1


def test_stop_leaves_no_process_and_no_temp_dir() -> None:
    replica_set = start_replica_set(1)
    pid, root = replica_set.members[0].pid, replica_set.members[0].dbpath.parent
    replica_set.stop()
    replica_set.stop()  # idempotent
    assert _gone(pid)
    assert not root.exists()


def test_mongod_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import sys, time
        from migronaut_dev.mongod import start_replica_set
        rs = start_replica_set(1)
        print(rs.members[0].pid, rs.members[0].dbpath.parent, flush=True)
        time.sleep(120)
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=tmp_path
    )
    mongod_pid = None
    try:
        assert parent.stdout is not None
        pid_text, root_text = parent.stdout.readline().split(maxsplit=1)
        mongod_pid, root = int(pid_text), Path(root_text.strip())
        assert not _gone(mongod_pid)
        parent.kill()
        parent.wait()
        assert _wait_gone(mongod_pid)
        assert root.is_dir()  # nobody ran stop(): the next start sweeps it away
        start_replica_set(1).stop()
        assert not root.exists()
    finally:
        parent.kill()
        parent.wait()
        if mongod_pid is not None and not _gone(mongod_pid):
            os.kill(mongod_pid, signal.SIGKILL)


def _cli(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "migronaut_dev.mongod", *args, "--state-dir", str(state_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_cli_start_uri_stop_round_trip_keeps_data(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    state_file = state_dir / "devserver.json"
    try:
        started = _cli(state_dir, "start")
        assert started.returncode == 0, started.stderr
        uri = started.stdout.strip()
        state = json.loads(state_file.read_text())
        assert state["uri"] == uri
        assert Path(state["dbpath"]).is_relative_to(state_dir / "mongod")
        assert not _gone(state["pid"])

        assert _cli(state_dir, "uri").stdout.strip() == uri
        again = _cli(state_dir, "start")
        assert again.stdout.strip() == uri
        assert json.loads(state_file.read_text())["pid"] == state["pid"]  # reused
        status = json.loads(_cli(state_dir, "status").stdout)
        assert status["running"] is True
        assert status["port"] == state["port"]

        with _client(uri) as mongo:
            mongo.t_dev_cli.items.insert_one({"_id": "kept"})

        stopped = _cli(state_dir, "stop")
        assert stopped.returncode == 0, stopped.stderr
        assert _gone(state["pid"])
        assert not state_file.exists()
        assert _cli(state_dir, "uri").returncode == 1

        restarted = _cli(state_dir, "start")
        assert restarted.returncode == 0, restarted.stderr
        assert restarted.stdout.strip() == uri  # same port, it was free
        with _client(uri) as mongo:
            assert mongo.t_dev_cli.items.count_documents({}) == 1
        second_pid = json.loads(state_file.read_text())["pid"]
        assert _cli(state_dir, "stop").returncode == 0
        assert _gone(second_pid)
    finally:
        if state_file.exists():  # a failed assertion must not leave a detached mongod
            pid = json.loads(state_file.read_text()).get("pid")
            if isinstance(pid, int) and not _gone(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_three_members_fail_over_when_the_primary_dies(
    replica_set_3: Callable[..., LocalReplicaSet],
) -> None:
    replica_set = replica_set_3()
    assert replica_set.wait_for_primary(30) == 0  # the higher priority wins first
    pids = [m.pid for m in replica_set.members]
    with _client(replica_set.uri, serverSelectionTimeoutMS=5_000) as mongo:
        items = mongo.t_dev_failover.items
        items.insert_one({"_id": "before"})
        replica_set.kill(0)
        deadline = time.monotonic() + 30
        while True:
            try:
                # Idempotent, in case an attempt that raised had been applied.
                items.update_one({"_id": "after"}, {"$set": {"n": 1}}, upsert=True)
                break
            except PyMongoError:
                if time.monotonic() >= deadline:
                    raise
        assert replica_set.primary_index() in (1, 2)
        assert items.count_documents({}) == 2
    replica_set.stop()
    assert all(_gone(pid) for pid in pids)
