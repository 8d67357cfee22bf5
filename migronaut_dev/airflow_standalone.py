"""``airflow standalone`` on a free loopback port, driven through its REST API.

:class:`AirflowStandalone` is a context manager that starts ``airflow standalone``
(scheduler, dag-processor, api-server and triggerer with LocalExecutor on SQLite)
in its own session, waits for its REST API, and drives it through
:class:`~migronaut_dev.airflow_api.AirflowApi`. On exit it ends every process it
started. The end-to-end tests and :mod:`migronaut_dev.demo` use it.

Airflow itself only runs in the subprocess: this module needs ``httpx`` and
``psutil`` (both ship with Airflow), never the tests.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import psutil

from migronaut_dev.airflow_api import (
    DAG_FILE,
    FINISHED_RUN_STATES,
    PASSWORDS_FILE,
    TASK_PROCESS_TITLE,
    AirflowApi,
    AirflowHarnessError,
    airflow_environment,
    alive,
    install_dag_file,
    overlapping,
    parse_time,
    send_signal,
)
from migronaut_dev.endpoints import free_port

#: The name this harness's errors had before the cluster harness shared them.
AirflowStandaloneError = AirflowHarnessError

__all__ = [
    "DAG_FILE",
    "FINISHED_RUN_STATES",
    "PASSWORDS_FILE",
    "TASK_PROCESS_TITLE",
    "AirflowStandalone",
    "AirflowStandaloneError",
    "install_dag_file",
    "overlapping",
    "parse_time",
]


class AirflowStandalone(AirflowApi):
    """``airflow standalone`` on a free loopback port, driven through its REST API.

    :param home: its ``AIRFLOW_HOME`` (SQLite metadata DB, logs, generated password).
    :param dags_folder: the DAG files it parses.
    :param env: further environment for every Airflow process (e.g.
        ``MIGRONAUT_MIGRATIONS_DIR``, ``AIRFLOW_CONN_MIGRONAUT_DEFAULT``); wins over
        the settings chosen here. Inherited ``AIRFLOW*`` variables are dropped.
    :param port: the API server's port (default: a free one).
    :param start_timeout: seconds to wait for the API to answer.
    :param parallelism: LocalExecutor's worker processes.
    """

    def __init__(
        self,
        home: Path,
        dags_folder: Path,
        env: Mapping[str, str] | None = None,
        port: int | None = None,
        *,
        start_timeout: float = 180.0,
        parallelism: int = 8,
    ) -> None:
        super().__init__(home, port or free_port(), start_timeout)
        self.dags_folder = Path(dags_folder).resolve()
        self.log_path = self.home / "standalone.log"
        self.env = airflow_environment(self.home, self.dags_folder, self.port)
        self.env.update(
            {
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                "AIRFLOW__CORE__PARALLELISM": str(parallelism),
                **(env or {}),
            }
        )
        self._process: subprocess.Popen[bytes] | None = None
        #: Triggerers started by :meth:`start_triggerer` (standalone's own may be stopped).
        self._triggerers: list[subprocess.Popen[bytes]] = []
        self._seen: dict[int, psutil.Process] = {}

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> None:
        """Start ``airflow standalone`` and wait until its API answers and gives a token."""
        if self._process is not None:
            raise AirflowHarnessError("already started")
        self.home.mkdir(parents=True, exist_ok=True)
        self.dags_folder.mkdir(parents=True, exist_ok=True)
        airflow = Path(sys.executable).with_name("airflow")
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                [str(airflow), "standalone"],
                cwd=self.home,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            self._wait_until_healthy()
            self._connect()
        except BaseException as exc:
            if isinstance(exc, Exception):
                print(self.log_tail(), file=sys.stderr)
            self.stop()
            raise

    def _check_alive(self) -> None:
        if self._process is None:
            raise AirflowHarnessError("not started")
        code = self._process.poll()
        if code is not None:
            raise AirflowHarnessError(f"airflow standalone exited with status {code}")

    def _remember_processes(self) -> None:
        """Note every descendant: task runners leave the process group (their own)."""
        if self._process is None:
            return
        try:
            root = psutil.Process(self._process.pid)
            for child in [root, *root.children(recursive=True)]:
                self._seen.setdefault(child.pid, child)
        except psutil.Error:
            pass

    def processes(self) -> list[psutil.Process]:
        """The live processes of this Airflow: descendants, and any orphan with its home."""
        self._remember_processes()
        found = {pid: proc for pid, proc in self._seen.items() if alive(proc)}
        for proc in psutil.process_iter():
            if proc.pid in found or proc.pid == os.getpid():
                continue
            try:
                if proc.environ().get("AIRFLOW_HOME") == str(self.home):
                    found[proc.pid] = proc
            except psutil.Error:
                continue
        return list(found.values())

    def stop(self, timeout: float = 10.0) -> None:
        """End every process of this Airflow: SIGTERM to its session, then SIGKILL."""
        self._disconnect()
        if self._process is None:
            return
        procs = self.processes()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGTERM)
        for proc in procs:
            send_signal(proc, signal.SIGTERM)
        _, still = psutil.wait_procs(procs, timeout=timeout)
        leftovers = {proc.pid: proc for proc in [*still, *self.processes()] if alive(proc)}
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGKILL)
        for proc in leftovers.values():
            send_signal(proc, signal.SIGKILL)
        psutil.wait_procs(list(leftovers.values()), timeout=10.0)
        self._process.wait(timeout=10.0)
        self._process = None
        for triggerer in self._triggerers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                triggerer.wait(timeout=10.0)
        self._triggerers.clear()
        self._seen.clear()

    # -- the triggerer alone ------------------------------------------------------------

    def triggerer_processes(self) -> list[psutil.Process]:
        """The running ``airflow triggerer`` commands of this Airflow (their children aside)."""
        found = []
        for proc in self.processes():
            try:
                command = proc.cmdline()
            except psutil.Error:
                continue
            if len(command) >= 2 and command[-1] == "triggerer" and "airflow" in " ".join(command):
                found.append(proc)
        return found

    def stop_triggerer(self, sig: int = signal.SIGKILL, timeout: float = 30.0) -> int:
        """Stop every triggerer (with its children) by ``sig``; how many were stopped.

        ``airflow standalone`` does not start a stopped component again: call
        :meth:`start_triggerer`. With SIGKILL, a new triggerer takes the dead one's
        triggers only once its heartbeat is older than ``[triggerer]
        triggerer_health_check_threshold``.
        """
        triggerers = self.triggerer_processes()
        if not triggerers:
            raise AirflowStandaloneError("no triggerer is running")
        victims: dict[int, psutil.Process] = {}
        for proc in triggerers:
            with contextlib.suppress(psutil.Error):
                for child in [proc, *proc.children(recursive=True)]:
                    victims[child.pid] = child
        for proc in victims.values():
            send_signal(proc, sig)
        _, left = psutil.wait_procs(list(victims.values()), timeout=timeout)
        # `airflow standalone` never reaps a component that died: a zombie is gone.
        still = [proc for proc in left if alive(proc)]
        if still:
            raise AirflowStandaloneError(f"triggerer processes outlived signal {sig}: {still}")
        return len(triggerers)

    def start_triggerer(self) -> None:
        """Start one more ``airflow triggerer`` with this Airflow's environment.

        Its output goes to ``triggerer.log`` in the home; :meth:`stop` ends it.
        """
        self._check_alive()
        airflow = Path(sys.executable).with_name("airflow")
        with (self.home / "triggerer.log").open("ab") as log:
            self._triggerers.append(
                subprocess.Popen(
                    [str(airflow), "triggerer"],
                    cwd=self.home,
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

    def log_tail(self, lines: int = 80) -> str:
        """The last lines of the standalone log."""
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return f"(no log at {self.log_path})"
        tail = "\n".join(text[-lines:])
        return f"--- last {lines} lines of {self.log_path} ---\n{tail}\n---"
