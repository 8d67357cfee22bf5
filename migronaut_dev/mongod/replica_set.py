"""Local replica sets of ``mongod`` processes on loopback ports.

:func:`start_replica_set` runs one to seven ``mongod`` processes on free ports of
127.0.0.1 as a replica set, so transactions and change streams work, and returns a
:class:`LocalReplicaSet` that can kill, freeze, restart and stop its members (the
chaos tests rely on those). One concept, kept whole: starting, configuring and
steering the set share its members' state.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pymongo import MongoClient
from pymongo.errors import OperationFailure, PyMongoError

from migronaut_core.errors import ConfigInvalidError
from migronaut_dev.endpoints import LOOPBACK, free_port
from migronaut_dev.errors import ServerUnavailableError
from migronaut_dev.lifecycle import StopsOnExit
from migronaut_dev.mongod.binary import find_mongod
from migronaut_dev.mongod.plumbing import (
    answers,
    die_with_parent_preexec,
    direct_client,
    is_writable_primary,
    pid_alive,
    port_is_free,
    read_json,
    write_json,
)

logger = logging.getLogger(__name__)

_MAX_MEMBERS = 7  # the most voting members a replica set may have
_MIN_CACHE_GB = 0.25  # mongod refuses anything smaller
_EXIT_NET_ERROR = 48  # mongod's exit status when it cannot listen
_PORT_ATTEMPTS = 5
_SET_META_FILE = "replica_set.json"
_TEMP_PREFIX = "migronaut-mongod-"
_OWNER_FILE = "owner.pid"


@dataclass(eq=False, repr=False)
class Member:
    """One ``mongod`` of a :class:`LocalReplicaSet`.

    ``host``, ``port``, ``dbpath`` and ``log_path`` never change; ``pid`` is that of
    the latest process (it changes on :meth:`LocalReplicaSet.restart`).
    """

    index: int
    host: str
    port: int
    dbpath: Path
    log_path: Path
    _process: subprocess.Popen[bytes] | None = field(default=None)

    def __repr__(self) -> str:
        return (
            f"Member(index={self.index}, address={self.address!r}, pid={self.pid}, "
            f"dbpath={str(self.dbpath)!r})"
        )

    @property
    def pid(self) -> int | None:
        """Process id of the latest ``mongod`` started for this member."""
        return self._process.pid if self._process is not None else None

    @property
    def address(self) -> str:
        """``host:port``, as written in the replica set configuration."""
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        """Whether the member's process has not exited (it may still be frozen)."""
        return self._process is not None and self._process.poll() is None

    @property
    def output_path(self) -> Path:
        """File that receives what ``mongod`` prints before its log is open."""
        return self.log_path.with_suffix(".out")


class LocalReplicaSet(StopsOnExit):
    """A replica set of local ``mongod`` processes, made by :func:`start_replica_set`.

    The URI names every member and the set, so pymongo follows failovers. Use it as
    a context manager, or call :meth:`stop`; stopping twice is harmless.
    """

    def __init__(
        self,
        *,
        name: str,
        members: list[Member],
        binary: Path,
        cache_size_gb: float,
        die_with_parent: bool,
        election_timeout_ms: int,
        startup_timeout: float,
        owned_dirs: Sequence[Path] = (),
    ) -> None:
        self.name = name
        self.members = members
        self.binary = binary
        self.cache_size_gb = cache_size_gb
        self.die_with_parent = die_with_parent
        self.election_timeout_ms = election_timeout_ms
        self.startup_timeout = startup_timeout
        self._owned_dirs = list(owned_dirs)
        self._stopped = False

    def __repr__(self) -> str:
        return f"LocalReplicaSet(name={self.name!r}, ports={[m.port for m in self.members]})"

    @property
    def uri(self) -> str:
        """Connection string naming every member and ``replicaSet``."""
        hosts = ",".join(m.address for m in self.members)
        return f"mongodb://{hosts}/?replicaSet={self.name}"

    # -- state ------------------------------------------------------------------

    def primary_index(self) -> int | None:
        """Return the index of the member that is a writable primary now, if any."""
        for member in self.members:
            if member.running and is_writable_primary(member.host, member.port):
                return member.index
        return None

    def wait_for_primary(self, timeout: float = 60.0) -> int:
        """Wait until a member is a writable primary and return its index.

        :raises ServerUnavailableError: no writable primary within ``timeout``
            seconds; the message ends with the tail of each member's log.
        """
        deadline = time.monotonic() + timeout
        while True:
            index = self.primary_index()
            if index is not None:
                return index
            if time.monotonic() >= deadline:
                raise ServerUnavailableError(
                    f"replica set {self.name!r} has no writable primary after {timeout:.0f}s"
                    + self._log_tails(),
                    {"ports": [m.port for m in self.members]},
                )
            time.sleep(0.2)

    # -- chaos ------------------------------------------------------------------

    def kill(self, index: int, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to member ``index``; nothing happens if it is not running.

        For ``SIGKILL``, ``SIGTERM`` and ``SIGINT`` this returns once the process is
        gone (a clean shutdown that takes over ``startup_timeout`` s ends in SIGKILL);
        other signals, such as ``SIGSTOP``, are sent and left to act.
        """
        member = self._member(index)
        process = member._process
        if process is None or process.poll() is not None:
            return
        process.send_signal(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
            if sig != signal.SIGKILL:
                process.send_signal(signal.SIGCONT)
            try:
                process.wait(self.startup_timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        logger.info("signalled mongod pid=%s port=%s", process.pid, member.port)

    def restart(self, index: int) -> None:
        """Start member ``index`` again, on the same port and dbpath.

        A running member is shut down cleanly first. Returns once the member answers;
        it does not wait for an election (see :meth:`wait_for_primary`).

        :raises ServerUnavailableError: the port was taken meanwhile, or ``mongod``
            did not come up.
        """
        self._check_not_stopped()
        member = self._member(index)
        if member.running:
            _terminate(member, self.startup_timeout)
        self._spawn(member)
        if not self._await_up(member, time.monotonic() + self.startup_timeout):
            raise ServerUnavailableError(
                f"port {member.port} was taken while member {index} was down"
                + self._log_tails([member]),
                {"port": member.port},
            )

    # -- lifecycle --------------------------------------------------------------

    def stop(self, timeout: float = 30.0) -> None:
        """Shut every member down cleanly, killing those that take over ``timeout`` s.

        Removes the temporary directories this set created (never a caller's
        ``data_dir``). Idempotent.
        """
        if self._stopped:
            return
        self._stopped = True
        started = time.monotonic()
        alive = [m for m in self.members if m.running]
        for member in alive:
            _signal_member(member, signal.SIGCONT)  # a frozen member cannot shut down
            _signal_member(member, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for member in alive:
            assert member._process is not None
            try:
                member._process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.warning("mongod pid=%s ignored SIGTERM; killing it", member.pid)
                member._process.kill()
                member._process.wait()
        for directory in self._owned_dirs:
            shutil.rmtree(directory, ignore_errors=True)
        logger.info(
            "stopped replica set on ports %s in %.1fs",
            [m.port for m in self.members],
            time.monotonic() - started,
        )

    # -- internals --------------------------------------------------------------

    def _member(self, index: int) -> Member:
        if not 0 <= index < len(self.members):
            raise ConfigInvalidError(
                f"member index {index} out of range 0..{len(self.members) - 1}",
                {"key": "index"},
            )
        return self.members[index]

    def _check_not_stopped(self) -> None:
        if self._stopped:
            raise ConfigInvalidError("this replica set was stopped", {"key": "replica_set"})

    def _spawn(self, member: Member) -> None:
        member.dbpath.mkdir(parents=True, exist_ok=True)
        args = [
            str(self.binary),
            "--port",
            str(member.port),
            "--bind_ip",
            member.host,
            "--dbpath",
            str(member.dbpath),
            "--replSet",
            self.name,
            "--wiredTigerCacheSizeGB",
            f"{self.cache_size_gb:g}",
            "--setParameter",
            "enableTestCommands=1",
            "--setParameter",
            "diagnosticDataCollectionEnabled=false",
            # Quiesce on SIGTERM for 1 s, not 15 s: test sets have no clients to drain.
            "--setParameter",
            "shutdownTimeoutMillisForSignaledShutdown=1000",
            "--nounixsocket",
            "--logpath",
            str(member.log_path),
            "--logappend",
        ]
        with member.output_path.open("ab") as output:
            member._process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                # Only prctl() and getppid() run in the child: async-signal-safe enough.
                preexec_fn=die_with_parent_preexec() if self.die_with_parent else None,  # noqa: PLW1509
            )
        logger.info(
            "spawned mongod pid=%s port=%s dbpath=%s", member.pid, member.port, member.dbpath
        )

    def _await_up(self, member: Member, deadline: float) -> bool:
        """Wait until ``member`` answers; False if its port turned out to be taken."""
        process = member._process
        assert process is not None
        started = time.monotonic()
        while True:
            status = process.poll()
            if status is not None:
                if status == _EXIT_NET_ERROR or "Address already in use" in _tail(member):
                    return False
                raise ServerUnavailableError(
                    f"mongod on port {member.port} exited with status {status} while starting"
                    + self._log_tails([member]),
                    {"port": member.port, "log_path": str(member.log_path)},
                )
            if answers(member.host, member.port):
                logger.info(
                    "mongod pid=%s port=%s up in %.1fs",
                    process.pid,
                    member.port,
                    time.monotonic() - started,
                )
                return True
            if time.monotonic() >= deadline:
                raise ServerUnavailableError(
                    f"mongod on port {member.port} did not answer within "
                    f"{self.startup_timeout:.0f}s" + self._log_tails([member]),
                    {"port": member.port, "log_path": str(member.log_path)},
                )
            time.sleep(0.1)

    def _start_members(self, deadline: float) -> None:
        for member in self.members:
            self._spawn(member)
        taken = {m.port for m in self.members}
        for member in self.members:
            for _attempt in range(_PORT_ATTEMPTS):
                if self._await_up(member, deadline):
                    break
                member.port = free_port(taken)
                taken.add(member.port)
                logger.info("port race; member %s retries on port %s", member.index, member.port)
                self._spawn(member)
            else:
                raise ServerUnavailableError(
                    f"no free port for member {member.index} after {_PORT_ATTEMPTS} attempts",
                    {"port": member.port},
                )

    def _configure(self, deadline: float) -> None:
        """Initiate the set, or fix the hosts of an existing one whose ports moved."""
        first = self.members[0]
        wanted = [m.address for m in self.members]
        try:
            with direct_client(first.host, first.port, timeout_ms=5000) as client:
                # The stored config, not replSetGetStatus: that one says "not yet
                # initialized" while a restarted member is still loading its config.
                stored = client.local["system.replset"].find_one()
                if stored is None:
                    client.admin.command("replSetInitiate", self._initial_config())
                    return
                hosts = [m["host"] for m in stored["members"]]
                if hosts == wanted:
                    return
                if len(hosts) != len(wanted):
                    raise ConfigInvalidError(
                        f"the data holds a {len(hosts)}-member replica set, "
                        f"not {len(wanted)} members",
                        {"key": "members"},
                    )
                for entry, address in zip(stored["members"], wanted, strict=True):
                    entry["host"] = address
                stored["version"] = int(stored["version"]) + 1
                stored.pop("term", None)
                self._force_reconfig(client, stored, deadline)
                logger.info("replica set hosts moved to ports %s", [m.port for m in self.members])
        except PyMongoError as exc:
            raise ServerUnavailableError(
                f"could not configure replica set {self.name!r} on port {first.port}: "
                f"{type(exc).__name__}" + self._log_tails([first]),
                {"port": first.port},
            ) from exc

    @staticmethod
    def _force_reconfig(
        client: MongoClient[dict[str, Any]], config: dict[str, Any], deadline: float
    ) -> None:
        while True:
            try:
                client.admin.command("replSetReconfig", config, force=True)
                return
            except OperationFailure:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)  # still loading the old config

    def _hurry_first_election(self, deadline: float) -> None:
        """Ask member 0 to stand for election now instead of after a timeout."""
        if len(self.members) == 1:
            return  # a lone member elects itself at once
        first = self.members[0]
        while time.monotonic() < deadline and self.primary_index() is None:
            try:
                with direct_client(first.host, first.port, timeout_ms=1000) as client:
                    client.admin.command("replSetStepUp")
                    return
            except PyMongoError:
                time.sleep(0.2)  # not yet a secondary, or an election is under way

    def _initial_config(self) -> dict[str, Any]:
        several = len(self.members) > 1
        return {
            "_id": self.name,
            "members": [
                {
                    "_id": m.index,
                    "host": m.address,
                    # Member 0 wins the first election; every member stays electable.
                    "priority": 2 if several and m.index == 0 else 1,
                }
                for m in self.members
            ],
            "settings": {"electionTimeoutMillis": self.election_timeout_ms},
        }

    def _log_tails(self, members: Sequence[Member] | None = None) -> str:
        parts = []
        for member in members if members is not None else self.members:
            parts.append(f"\n--- tail of {member.log_path} ---\n{_tail(member)}")
        return "".join(parts)


def start_replica_set(
    members: int = 1,
    *,
    data_dir: Path | None = None,
    cache_size_gb: float = _MIN_CACHE_GB,
    die_with_parent: bool = True,
    name: str = "rs0",
    binary: Path | None = None,
    election_timeout_ms: int = 5000,
    startup_timeout: float = 60.0,
) -> LocalReplicaSet:
    """Start a replica set of ``members`` local ``mongod`` processes and return it.

    Returns once a member is a writable primary. Each member listens on a free port
    of 127.0.0.1 and keeps its data in ``<data_dir>/db-<i>`` and its log in
    ``<data_dir>/mongod-<i>.log``. Without ``data_dir`` a temporary directory is
    used and removed by :meth:`LocalReplicaSet.stop`. With a ``data_dir`` that held
    a set before, the set restarts on its data and on its old ports when free.

    :param members: 1 to 7; with more than one, member 0 becomes the first primary.
    :param data_dir: where data persists; the caller owns it.
    :param cache_size_gb: WiredTiger cache per member (mongod's minimum is 0.25).
    :param die_with_parent: on Linux, have the kernel SIGKILL each ``mongod`` when
        the thread that started it dies, so a killed test run leaves nothing behind.
        Start sets you keep from the main thread.
    :param name: replica set name, part of the URI.
    :param binary: ``mongod`` to run; :func:`find_mongod` by default.
    :param election_timeout_ms: the set's ``electionTimeoutMillis``; lower means
        faster failover in tests.
    :param startup_timeout: seconds allowed for each startup phase.
    :raises ConfigInvalidError: an argument is out of range, or ``data_dir`` holds a
        different set.
    :raises ServerUnavailableError: no binary, or ``mongod`` did not come up; the
        message ends with the tail of its log.
    """
    if not 1 <= members <= _MAX_MEMBERS:
        raise ConfigInvalidError(
            f"members must be between 1 and {_MAX_MEMBERS}, got {members}", {"key": "members"}
        )
    if cache_size_gb < _MIN_CACHE_GB:
        raise ConfigInvalidError(
            f"cache_size_gb must be at least {_MIN_CACHE_GB}", {"key": "cache_size_gb"}
        )
    if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
        raise ConfigInvalidError("name may hold only letters, digits, '_' and '-'", {"key": "name"})
    mongod = binary if binary is not None else find_mongod()
    owned: list[Path] = []
    if data_dir is None:
        _sweep_orphaned_temp_dirs()
        root = Path(tempfile.mkdtemp(prefix=_TEMP_PREFIX))
        (root / _OWNER_FILE).write_text(str(os.getpid()))
        owned.append(root)
        previous_ports: list[int] = []
    else:
        root = Path(data_dir).resolve()
        root.mkdir(parents=True, exist_ok=True)
        previous_ports = _read_set_meta(root, name, members)

    taken: set[int] = set()
    member_list = []
    for index in range(members):
        port = previous_ports[index] if previous_ports else 0
        if not port or port in taken or not port_is_free(port):
            port = free_port(taken)
        taken.add(port)
        member_list.append(
            Member(
                index=index,
                host=LOOPBACK,
                port=port,
                dbpath=root / f"db-{index}",
                log_path=root / f"mongod-{index}.log",
            )
        )
    replica_set = LocalReplicaSet(
        name=name,
        members=member_list,
        binary=mongod,
        cache_size_gb=cache_size_gb,
        die_with_parent=die_with_parent,
        election_timeout_ms=election_timeout_ms,
        startup_timeout=startup_timeout,
        owned_dirs=owned,
    )
    started = time.monotonic()
    try:
        replica_set._start_members(time.monotonic() + startup_timeout)
        replica_set._configure(time.monotonic() + startup_timeout)
        replica_set._hurry_first_election(time.monotonic() + startup_timeout)
        replica_set.wait_for_primary(startup_timeout)
    except BaseException:
        replica_set.stop(timeout=10.0)
        raise
    if data_dir is not None:
        write_json(root / _SET_META_FILE, {"name": name, "ports": [m.port for m in member_list]})
    logger.info(
        "replica set of %s on ports %s ready in %.1fs",
        members,
        [m.port for m in member_list],
        time.monotonic() - started,
    )
    return replica_set


def _sweep_orphaned_temp_dirs() -> None:
    """Remove temp dirs of sets whose creator died without stopping them.

    A directory is left alone while the process that created it lives or any
    ``mongod`` still holds one of its dbpaths.
    """
    for root in Path(tempfile.gettempdir()).glob(f"{_TEMP_PREFIX}*"):
        try:
            owner = int((root / _OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # not made by this module
        if pid_alive(owner) or any(
            _lock_holder_alive(lock) for lock in root.glob("db-*/mongod.lock")
        ):
            continue
        shutil.rmtree(root, ignore_errors=True)
        logger.info("removed orphaned %s", root)


def _lock_holder_alive(lock: Path) -> bool:
    try:
        text = lock.read_text().strip()
    except OSError:
        return False
    return text.isdigit() and pid_alive(int(text))


def _read_set_meta(root: Path, name: str, members: int) -> list[int]:
    """Return the ports a set in ``root`` used last time ([] for a fresh directory)."""
    meta = read_json(root / _SET_META_FILE)
    if meta is None:
        return []
    if meta.get("name") != name or len(meta.get("ports", [])) != members:
        raise ConfigInvalidError(
            f"{root} holds replica set {meta.get('name')!r} with "
            f"{len(meta.get('ports', []))} members, not {name!r} with {members}",
            {"key": "data_dir"},
        )
    return [int(p) for p in meta["ports"]]


def _signal_member(member: Member, sig: signal.Signals) -> None:
    if member._process is not None and member._process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            member._process.send_signal(sig)


def _terminate(member: Member, timeout: float) -> None:
    process = member._process
    if process is None or process.poll() is not None:
        return
    _signal_member(member, signal.SIGCONT)
    _signal_member(member, signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _tail(member: Member, limit: int = 4000) -> str:
    chunks = []
    for path in (member.output_path, member.log_path):
        try:
            with path.open("rb") as handle:
                handle.seek(0, os.SEEK_END)
                handle.seek(max(0, handle.tell() - limit))
                text = handle.read().decode("utf-8", "replace").strip()
        except OSError:
            continue
        if text:
            chunks.append(text)
    return "\n".join(chunks) or "(empty)"
