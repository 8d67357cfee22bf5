"""A production-shaped Airflow on loopback: Celery workers, PostgreSQL, Redis.

:class:`AirflowCluster` is a context manager that starts, in one directory:
PostgreSQL as the metadata database and Celery result backend, Redis as the
Celery broker, ``airflow db migrate``, then the api-server, scheduler,
dag-processor, triggerer and two (or more) Celery workers, each a process group
of its own. The workers have distinct Celery node names *and* distinct task
instance hostnames (``worker-1``, ``worker-2``: the REST API's ``hostname`` of a
task instance names the worker that ran it). It drives Airflow through
:class:`~migronaut_dev.airflow_api.AirflowApi`, as the standalone harness does,
and controls each process: :meth:`AirflowCluster.kill` (``kill -9`` of a worker,
say) and :meth:`AirflowCluster.restart`. On exit, after a failure or Ctrl-C too,
it stops everything it started.

``python -m migronaut_dev.airflow_cluster`` (``scripts/airflow_cluster.sh``)
starts one for a human and keeps it up until Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from migronaut_dev.airflow_api import (
    PASSWORDS_FILE,
    AirflowApi,
    AirflowHarnessError,
    airflow_environment,
    alive,
    install_dag_file,
    send_signal,
)
from migronaut_dev.endpoints import free_port
from migronaut_dev.services import PostgresServer, RedisServer

#: The environment variable a process's task-instance hostname is read from.
HOSTNAME_ENV = "MIGRONAUT_CLUSTER_HOSTNAME"
#: The Airflow processes besides the workers, in the order they start.
SERVICES = ("api-server", "scheduler", "dag-processor", "triggerer")
#: Seconds after which the scheduler fails a running task whose worker stopped
#: heartbeating (Airflow's default is 300): a killed worker's tasks are retried soon.
TASK_HEARTBEAT_TIMEOUT = 15
#: Seconds a task may stay queued before the scheduler requeues it: a killed worker
#: takes the tasks it had received but not started with it.
TASK_QUEUED_TIMEOUT = 30


def component_hostname() -> str:
    """The hostname Airflow records for this process (``[core] hostname_callable``).

    Every process of a cluster runs on one machine; each is given its own name in
    :data:`HOSTNAME_ENV` so that a task instance's ``hostname`` tells the workers apart.
    """
    return os.environ.get(HOSTNAME_ENV) or socket.getfqdn()


@dataclass
class ClusterProcess:
    """One Airflow process of a cluster (its group and descendants), which it may restart."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    #: Where in its log the current start begins (a restart appends).
    log_offset: int = 0
    seen: dict[int, psutil.Process] = field(default_factory=dict)

    def start(self, cwd: Path) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.argv,
                cwd=cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.seen = {}
        self.remember()

    def remember(self) -> None:
        """Note every descendant: task runners leave the process group (their own)."""
        if self.process is None:
            return
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(self.process.pid)
            for child in [root, *root.children(recursive=True)]:
                self.seen.setdefault(child.pid, child)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def live(self) -> list[psutil.Process]:
        self.remember()
        return [proc for proc in self.seen.values() if alive(proc)]

    def signal(self, sig: int) -> list[psutil.Process]:
        """Send ``sig`` to the process group and every descendant; those signalled."""
        targets = self.live()
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, sig)
        for proc in targets:
            send_signal(proc, sig)
        return targets

    def stop(self, timeout: float) -> None:
        """SIGTERM to all of it, SIGKILL to whatever is left after ``timeout`` seconds."""
        _, left = psutil.wait_procs(self.signal(signal.SIGTERM), timeout=timeout)
        if left or self.live():
            psutil.wait_procs(self.signal(signal.SIGKILL), timeout=10.0)
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=10.0)


class AirflowCluster(AirflowApi):
    """Airflow with the CeleryExecutor on PostgreSQL and Redis, on loopback.

    :param root: a directory for everything it writes: ``airflow/`` (its
        ``AIRFLOW_HOME``), ``logs/`` (one log per process, and the servers').
    :param dags_folder: the DAG files it parses.
    :param env: further environment for every Airflow process (e.g.
        ``MIGRONAUT_MIGRATIONS_DIR``, ``AIRFLOW_CONN_MIGRONAUT_DEFAULT``); wins over
        the settings chosen here.
    :param workers: how many Celery workers (``worker-1`` …).
    :param worker_concurrency: task slots of each worker.
    :param start_timeout: seconds to wait for the API server and the workers.
    """

    def __init__(
        self,
        root: Path,
        dags_folder: Path,
        env: Mapping[str, str] | None = None,
        *,
        workers: int = 2,
        worker_concurrency: int = 4,
        start_timeout: float = 240.0,
    ) -> None:
        root = Path(root).resolve()
        super().__init__(root / "airflow", free_port(), start_timeout)
        self.root = root
        self.dags_folder = Path(dags_folder).resolve()
        self.logs = root / "logs"
        self.extra_env = dict(env or {})
        self.worker_names = [f"worker-{index}" for index in range(1, workers + 1)]
        self.worker_concurrency = worker_concurrency
        self.postgres = PostgresServer(self.logs / "postgres.log")
        self.redis = RedisServer(self.logs / "redis.log")
        self.env: dict[str, str] = {}
        self._components: dict[str, ClusterProcess] = {}
        self._started = False

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> None:
        """Start the servers and every Airflow process; return once all of them serve."""
        if self._started:
            raise AirflowHarnessError("already started")
        self._started = True
        try:
            for path in (self.home, self.dags_folder, self.logs):
                path.mkdir(parents=True, exist_ok=True)
            self.postgres.start()
            self.redis.start()
            self.env = self._environment()
            self._migrate()
            for name in [*SERVICES, *self.worker_names]:
                self._components[name] = self._component(name)
                self._components[name].start(self.home)
            self._wait_until_healthy()
            self._connect()
            self._wait_for_workers()
        except BaseException as exc:
            if isinstance(exc, Exception):
                print(self.log_tail(), file=sys.stderr)
            self.stop()
            raise

    def _environment(self) -> dict[str, str]:
        database = self.postgres.url
        env = airflow_environment(self.home, self.dags_folder, self.port)
        env.update(
            {
                "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
                "AIRFLOW__CORE__PARALLELISM": "64",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"postgresql+psycopg2://{database}",
                "AIRFLOW__CELERY__BROKER_URL": self.redis.url,
                "AIRFLOW__CELERY__RESULT_BACKEND": f"db+postgresql://{database}",
                "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(self.worker_concurrency),
                # Every process signs and checks the same tokens.
                "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
                "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
                "AIRFLOW__CORE__HOSTNAME_CALLABLE": f"{__name__}.component_hostname",
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(TASK_HEARTBEAT_TIMEOUT),
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2",
                # A task a killed worker had received but not started stays queued until
                # this timeout requeues it (Airflow's default: 600 s, checked every 120 s).
                "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": str(TASK_QUEUED_TIMEOUT),
                "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT_CHECK_INTERVAL": "5",
                # A restarted scheduler or triggerer takes over its predecessor's work soon.
                "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "10",
                "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "5",
                "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "10",
                # A test's new DAG file is found within seconds.
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "3",
            }
        )
        env.update(self.extra_env)
        return env

    def _migrate(self) -> None:
        with (self.logs / "db-migrate.log").open("ab") as log:
            answer = subprocess.run(
                [self._airflow(), "db", "migrate"],
                cwd=self.home,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=self.start_timeout,
                check=False,
            )
        if answer.returncode != 0:
            raise AirflowHarnessError(
                f"airflow db migrate failed ({answer.returncode}); see {log.name}"
            )

    @staticmethod
    def _airflow() -> str:
        return str(Path(sys.executable).with_name("airflow"))

    def _component(self, name: str) -> ClusterProcess:
        argv = [self._airflow()]
        if name in self.worker_names:
            argv += [
                "celery",
                "worker",
                "--celery-hostname",
                f"{name}@{socket.gethostname()}",
                "--concurrency",
                str(self.worker_concurrency),
                "--pid",
                str(self.home / f"{name}.pid"),
                "--skip-serve-logs",
            ]
        else:
            argv.append(name)
        env = {**self.env, HOSTNAME_ENV: name}
        return ClusterProcess(name, argv, env, self.logs / f"{name}.log")

    def _wait_for_workers(self) -> None:
        """Wait until every worker says it is ready to take tasks."""
        deadline = time.monotonic() + self.start_timeout
        waiting = list(self.worker_names)
        while waiting:
            self._check_alive()
            waiting = [name for name in waiting if not self._worker_ready(name)]
            if waiting and time.monotonic() > deadline:
                raise AirflowHarnessError(f"{', '.join(waiting)} did not get ready")
            time.sleep(0.5)

    def _worker_ready(self, name: str) -> bool:
        """Whether the worker's log says ``<node> ready.`` since it (re)started."""
        component = self._components[name]
        marker = f"{name}@{socket.gethostname()} ready.".encode()
        with contextlib.suppress(OSError):
            return marker in component.log_path.read_bytes()[component.log_offset :]
        return False

    def _check_alive(self) -> None:
        if not self._started:
            raise AirflowHarnessError("not started")
        for name, component in self._components.items():
            if component.process is not None and component.process.poll() is not None:
                raise AirflowHarnessError(
                    f"{name} exited with status {component.process.returncode}; "
                    f"see {component.log_path}"
                )

    def _remember_processes(self) -> None:
        for component in self._components.values():
            component.remember()

    def processes(self) -> list[psutil.Process]:
        """Its live processes: Airflow's (with orphans that have its home), Redis, PostgreSQL."""
        found: dict[int, psutil.Process] = {}
        for component in self._components.values():
            found.update((proc.pid, proc) for proc in component.live())
        for proc in psutil.process_iter():
            if proc.pid in found or proc.pid == os.getpid():
                continue
            with contextlib.suppress(psutil.Error):
                if proc.environ().get("AIRFLOW_HOME") == str(self.home):
                    found[proc.pid] = proc
        for proc in [*self.redis.processes(), *self.postgres.processes()]:
            found[proc.pid] = proc
        return list(found.values())

    def stop(self, timeout: float = 15.0) -> None:
        """Stop everything it started: the Airflow processes, then Redis and PostgreSQL."""
        self._disconnect()
        try:
            for name in reversed(list(self._components)):
                self._components[name].signal(signal.SIGTERM)
            for component in self._components.values():
                component.stop(timeout)
            orphans = [
                proc
                for proc in self.processes()
                if proc not in self.redis.processes() + self.postgres.processes()
            ]
            for proc in orphans:
                send_signal(proc, signal.SIGKILL)
            psutil.wait_procs(orphans, timeout=10.0)
        finally:
            try:
                self.redis.stop()
            finally:
                self.postgres.stop()
                self._components.clear()
                self._started = False

    # -- per-process control ----------------------------------------------------------

    @property
    def names(self) -> list[str]:
        """The Airflow processes it runs: ``api-server``, …, ``worker-1``, ``worker-2``."""
        return list(self._components)

    def component(self, name: str) -> ClusterProcess:
        """Process ``name`` (``worker-1``, ``scheduler``, …): its Popen, its live processes."""
        try:
            return self._components[name]
        except KeyError:
            raise AirflowHarnessError(f"no process {name!r}; there are {self.names}") from None

    def kill(
        self, name: str, sig: int = signal.SIGKILL, timeout: float = 60.0
    ) -> list[psutil.Process]:
        """Send ``sig`` to process ``name``: its group and every descendant (task runners too).

        SIGKILL is a machine lost mid-task: nothing of it runs a ``finally``. SIGKILL,
        SIGTERM and SIGINT wait until all of it has exited (up to ``timeout``); from
        then on the process is down, not died, until :meth:`restart`. Returns the
        processes signalled.

        :raises AirflowHarnessError: it was still running after ``timeout``.
        """
        component = self.component(name)
        signalled = component.signal(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
            _, left = psutil.wait_procs(signalled, timeout=timeout)
            if left:
                raise AirflowHarnessError(f"{name} still runs {len(left)} process(es)")
            if component.process is not None:
                component.process.wait(timeout=10.0)
            component.process = None
        return signalled

    def restart(self, name: str, timeout: float = 15.0) -> None:
        """Stop process ``name`` (SIGTERM, SIGKILL after ``timeout``), start it again.

        Returns once it serves again: a worker once it is ready for tasks.
        """
        component = self.component(name)
        if component.running():
            component.stop(timeout)
        component.log_offset = (
            component.log_path.stat().st_size if component.log_path.exists() else 0
        )
        component.start(self.home)
        if name in self.worker_names:
            self._wait_for_workers()
        elif name == "api-server":
            self._wait_until_healthy()

    def stop_triggerer(self, sig: int = signal.SIGKILL) -> int:
        """Stop the triggerer by ``sig`` (a lost machine: SIGKILL); how many processes ended.

        The drift checks (:mod:`tests.support.drift_events`) drive any Airflow through
        this and :meth:`start_triggerer`, as they drive ``airflow standalone``.
        """
        return len(self.kill("triggerer", sig))

    def start_triggerer(self) -> None:
        """Start the stopped triggerer again."""
        self.restart("triggerer")

    def hostname(self, name: str) -> str:
        """The task-instance ``hostname`` of the processes named ``name``."""
        return self.component(name).env[HOSTNAME_ENV]

    def log_tail(self, lines: int = 60) -> str:
        """The end of every Airflow process's log."""
        parts = []
        for log in sorted(self.logs.glob("*.log")):
            with contextlib.suppress(OSError):
                text = log.read_text(errors="replace").splitlines()
                parts.append(f"--- last {lines} lines of {log} ---\n" + "\n".join(text[-lines:]))
        return "\n".join(parts) + "\n---"


def main(argv: list[str] | None = None) -> int:
    """Start a cluster for a human, serving the shipped DAG file, until Ctrl-C."""
    parser = argparse.ArgumentParser(prog="python -m migronaut_dev.airflow_cluster")
    parser.add_argument("--root", type=Path, help="directory for its files (default: a temp one)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=4, help="task slots per worker")
    args = parser.parse_args(argv)
    root = args.root or Path(tempfile.mkdtemp(prefix="migronaut-cluster-"))
    dags = root / "dags"
    install_dag_file(dags)

    def interrupted(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    # Inherited AIRFLOW* variables are dropped, connections given this way are kept.
    connections = {
        key: value for key, value in os.environ.items() if key.startswith("AIRFLOW_CONN_")
    }
    cluster = AirflowCluster(
        root, dags, connections, workers=args.workers, worker_concurrency=args.concurrency
    )
    try:
        with cluster:
            print(f"Airflow (CeleryExecutor) at {cluster.url}")
            print(f"  sign in as admin, password in {cluster.home / PASSWORDS_FILE}")
            print(f"  processes: {', '.join(cluster.names)}; logs in {cluster.logs}")
            print("  Ctrl-C stops everything")
            while True:
                time.sleep(1.0)
                cluster._check_alive()
    except KeyboardInterrupt:
        print("stopped")
    except AirflowHarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.root is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
