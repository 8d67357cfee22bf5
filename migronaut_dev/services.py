"""PostgreSQL and Redis on loopback, for the production-shaped local Airflow.

:class:`PostgresServer` runs a throwaway PostgreSQL cluster (``initdb`` into a
temporary directory, one database, trust authentication, loopback only) and
:class:`RedisServer` a Redis without persistence. Both are context managers that
stop what they started on exit, after a failure too. They use the servers of the
Debian packages ``postgresql`` and ``redis-server`` (``scripts/_venv.sh``
installs them); :func:`missing_services` names the packages that are missing.

PostgreSQL refuses to run as root: as root, every PostgreSQL command runs as the
``postgres`` user the package creates, in a directory that user owns.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

from migronaut_dev.endpoints import LOOPBACK, free_port
from migronaut_dev.lifecycle import StartsOnEnter

#: The user PostgreSQL runs as when this process is root (the Debian package's).
POSTGRES_USER = "postgres"
#: Where Debian installs the server programs of each PostgreSQL major version.
_DEBIAN_POSTGRES = Path("/usr/lib/postgresql")


class ServiceError(RuntimeError):
    """A server did not start, or a program it needs is not installed."""


def postgres_bin_dir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl`` (Debian's newest, else ``PATH``)."""
    versions = sorted(
        (path.parent for path in _DEBIAN_POSTGRES.glob("*/bin/pg_ctl")),
        key=lambda path: int(path.parent.name) if path.parent.name.isdigit() else 0,
    )
    if versions:
        return versions[-1]
    found = shutil.which("pg_ctl")
    return Path(found).resolve().parent if found else None


def missing_services() -> list[str]:
    """The Debian packages the cluster needs and this machine lacks."""
    missing = []
    if postgres_bin_dir() is None:
        missing.append("postgresql")
    if shutil.which("redis-server") is None:
        missing.append("redis-server")
    return missing


class PostgresServer(StartsOnEnter):
    """A PostgreSQL cluster on a free loopback port, with one database owned by ``user``.

    Its data and socket directory is a fresh temporary directory (removed on
    :meth:`stop`, its server log first copied to ``log_path``). Durability is off
    (``fsync``, ``synchronous_commit``): this is a test's metadata database.

    :param log_path: where the server log is kept after :meth:`stop`.
    :param database: the database to create; ``user`` is its owner and superuser.
    """

    def __init__(self, log_path: Path, database: str = "airflow", user: str = "airflow") -> None:
        self.log_path = Path(log_path)
        self.database = database
        self.user = user
        self.port = 0
        self._bin: Path | None = None
        self._dir: Path | None = None

    @property
    def url(self) -> str:
        """The SQLAlchemy URL of the database (psycopg2 driver), without the scheme."""
        return f"{self.user}@{LOOPBACK}:{self.port}/{self.database}"

    def start(self) -> None:
        """``initdb``, start the server, create the database."""
        self._bin = postgres_bin_dir()
        if self._bin is None:
            raise ServiceError("PostgreSQL is not installed (apt-get install postgresql)")
        self._dir = Path(tempfile.mkdtemp(prefix="migronaut-pg-"))
        self.port = free_port()
        try:
            if os.geteuid() == 0:
                owner = pwd.getpwnam(POSTGRES_USER)
                os.chown(self._dir, owner.pw_uid, owner.pw_gid)
            self._run("initdb", "-D", "data", "-U", self.user, "--auth=trust", "-E", "UTF8")
            settings = (
                f"-p {self.port} -k {self._dir} -c listen_addresses={LOOPBACK} "
                "-c max_connections=300 -c fsync=off -c synchronous_commit=off "
                "-c full_page_writes=off"
            )
            self._run("pg_ctl", "-D", "data", "-l", "server.log", "-w", "-o", settings, "start")
            self._run(
                "createdb", "-h", LOOPBACK, "-p", str(self.port), "-U", self.user, self.database
            )
        except BaseException:
            self.stop()
            raise

    def _run(self, program: str, *args: str) -> None:
        assert self._bin is not None and self._dir is not None
        root = os.geteuid() == 0
        answer = subprocess.run(
            [str(self._bin / program), *args],
            cwd=self._dir,
            user=POSTGRES_USER if root else None,
            env={"PATH": os.environ.get("PATH", ""), "LC_ALL": "C.UTF-8"},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if answer.returncode != 0:
            raise ServiceError(
                f"{program} failed ({answer.returncode}): {answer.stderr.strip()[-800:]}"
            )

    def processes(self) -> list[psutil.Process]:
        """The server's processes (the postmaster and its children) while it runs."""
        postmaster = self._postmaster()
        if postmaster is None:
            return []
        with contextlib.suppress(psutil.Error):
            return [postmaster, *postmaster.children(recursive=True)]
        return []

    def _postmaster(self) -> psutil.Process | None:
        if self._dir is None:
            return None
        try:
            pid = int((self._dir / "data" / "postmaster.pid").read_text().split()[0])
            return psutil.Process(pid)
        except (OSError, ValueError, IndexError, psutil.Error):
            return None

    def stop(self) -> None:
        """Stop the server (fast shutdown, SIGKILL if that fails) and remove its directory."""
        if self._dir is None:
            return
        postmaster = self._postmaster()
        if postmaster is not None:
            try:
                self._run("pg_ctl", "-D", "data", "-m", "fast", "-w", "-t", "30", "stop")
            except (ServiceError, subprocess.TimeoutExpired):
                with contextlib.suppress(psutil.Error):
                    postmaster.send_signal(signal.SIGKILL)
                    postmaster.wait(timeout=10)
        with contextlib.suppress(OSError):
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self._dir / "server.log", self.log_path)
        shutil.rmtree(self._dir, ignore_errors=True)
        self._dir = None


class RedisServer(StartsOnEnter):
    """A Redis on a free loopback port, without persistence, in its own session.

    :param log_path: its log file.
    """

    def __init__(self, log_path: Path) -> None:
        self.log_path = Path(log_path)
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{LOOPBACK}:{self.port}/0"

    def start(self) -> None:
        """Start ``redis-server`` and wait until it answers ``PING``."""
        program = shutil.which("redis-server")
        if program is None:
            raise ServiceError("Redis is not installed (apt-get install redis-server)")
        self.port = free_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._process = subprocess.Popen(
            [
                program,
                "--port",
                str(self.port),
                "--bind",
                LOOPBACK,
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.log_path.parent),
                "--logfile",
                str(self.log_path),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            self._wait_for_ping()
        except BaseException:
            self.stop()
            raise

    def _wait_for_ping(self) -> None:
        deadline = time.monotonic() + 30.0
        while True:
            assert self._process is not None
            if self._process.poll() is not None:
                raise ServiceError(f"redis-server exited ({self._process.returncode})")
            with (
                contextlib.suppress(OSError),
                socket.create_connection((LOOPBACK, self.port), timeout=2.0) as sock,
            ):
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return
            if time.monotonic() > deadline:
                raise ServiceError(f"redis-server did not answer on port {self.port}")
            time.sleep(0.2)

    def processes(self) -> list[psutil.Process]:
        if self._process is None or self._process.poll() is not None:
            return []
        with contextlib.suppress(psutil.Error):
            return [psutil.Process(self._process.pid)]
        return []

    def stop(self) -> None:
        """Shut it down (SIGTERM: no save, as configured; SIGKILL after 10 s)."""
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=10)
        self._process = None
