"""``airflow standalone`` on a free loopback port, driven through its REST API.

:class:`AirflowStandalone` is a context manager that starts ``airflow standalone``
(scheduler, dag-processor, api-server and triggerer with LocalExecutor on SQLite)
in its own session, waits for its REST API, and drives it: unpause, trigger, wait
for runs, list DAG runs and task instances (mapped ones too). On exit it ends every
process it started. The end-to-end tests and :mod:`migronaut_dev.demo` use it.

Airflow itself only runs in the subprocess: this module needs ``httpx`` and
``psutil`` (both ship with Airflow), never the tests.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

import httpx
import psutil

from migronaut_dev import REPO_ROOT
from migronaut_dev.endpoints import LOOPBACK, free_port

#: Where the simple auth manager of ``airflow standalone`` writes the admin password.
PASSWORDS_FILE = "simple_auth_manager_passwords.json.generated"
#: Run states a DAG run does not leave.
FINISHED_RUN_STATES = frozenset({"success", "failed"})
#: The process title Airflow's task runner takes: ``airflow worker -- <task instance id>``.
TASK_PROCESS_TITLE = "airflow worker -- {ti_id}"
#: The ready DAG file this project ships.
DAG_FILE = REPO_ROOT / "dags" / "migronaut_dags.py"
_FACTORY_IMPORT = "from migronaut_airflow.dags.factory import build_dags\n"


class AirflowStandaloneError(RuntimeError):
    """``airflow standalone`` did not start, died, or did not do what was asked in time."""


def parse_time(value: str | None) -> datetime | None:
    """A timestamp of the REST API (ISO 8601, ``Z`` or an offset), or None."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def overlapping(instances: Iterable[Mapping[str, Any]]) -> bool:
    """Whether at least two of these task instances ran at the same time."""
    spans = []
    for ti in instances:
        start, end = parse_time(ti.get("start_date")), parse_time(ti.get("end_date"))
        if start is not None and end is not None:
            spans.append((start, end))
    spans.sort()
    return any(later[0] < earlier[1] for earlier, later in itertools.pairwise(spans))


def install_dag_file(dags_folder: Path, options: str = "") -> Path:
    """Copy ``dags/migronaut_dags.py`` into ``dags_folder``; return the copy.

    :param options: keyword arguments for its ``build_dags`` call, as Python source
        (``timedelta`` is in scope), e.g. ``"poll_interval=1.0"``; none: a plain copy.
    """
    source = DAG_FILE.read_text(encoding="utf-8")
    if options:
        if source.count(_FACTORY_IMPORT) != 1:
            raise AirflowStandaloneError(f"{DAG_FILE} no longer imports build_dags as expected")
        wrapped = (
            "from datetime import timedelta\n"
            "from functools import partial\n\n"
            "from migronaut_airflow.dags.factory import build_dags as _build_dags\n\n"
            f"build_dags = partial(_build_dags, {options})\n"
        )
        source = source.replace(_FACTORY_IMPORT, wrapped)
    dags_folder.mkdir(parents=True, exist_ok=True)
    target = dags_folder / DAG_FILE.name
    target.write_text(source, encoding="utf-8")
    return target


class AirflowStandalone:
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
        self.home = Path(home).resolve()
        self.dags_folder = Path(dags_folder).resolve()
        self.port = port or free_port()
        self.url = f"http://{LOOPBACK}:{self.port}"
        self.log_path = self.home / "standalone.log"
        self.start_timeout = start_timeout
        self.env = self._environment(dict(env or {}), parallelism)
        self._process: subprocess.Popen[bytes] | None = None
        #: Triggerers started by :meth:`start_triggerer` (standalone's own may be stopped).
        self._triggerers: list[subprocess.Popen[bytes]] = []
        self._client: httpx.Client | None = None
        self._seen: dict[int, psutil.Process] = {}

    def _environment(self, extra: dict[str, str], parallelism: int) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if not key.startswith("AIRFLOW")}
        # `airflow standalone` starts its components as `airflow …` from PATH.
        bin_dir = str(Path(sys.executable).parent)
        env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", "")])
        env.update(
            {
                "AIRFLOW_HOME": str(self.home),
                "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                "AIRFLOW__CORE__PARALLELISM": str(parallelism),
                # Tasks reach the API server here; the default assumes port 8080.
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
                "AIRFLOW__API__HOST": LOOPBACK,
                "AIRFLOW__API__PORT": str(self.port),
                "AIRFLOW__API__WORKERS": "1",
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
                "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
                # Parse new DAG files within seconds, not minutes.
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
                "AIRFLOW__DAG_PROCESSOR__BUNDLE_REFRESH_CHECK_INTERVAL": "2",
                "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
                "AIRFLOW__SCHEDULER__JOB_HEARTBEAT_SEC": "2",
                "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
                "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "2",
                # A task supervisor may notice its task process exited only at its next
                # heartbeat (default 5 s). When a deferred task's trigger fires sooner and
                # the resumed try is already running, Airflow 3.3 takes that stale
                # "success" of the deferring try for an external kill and fails the task
                # (apache/airflow#72716). Heartbeating every second narrows that window.
                "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "1",
                "NO_COLOR": "1",
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(extra)
        return env

    # -- lifecycle --------------------------------------------------------------------

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(exc, Exception):
            print(self.log_tail(), file=sys.stderr)
        self.stop()

    def start(self) -> None:
        """Start ``airflow standalone`` and wait until its API answers and gives a token."""
        if self._process is not None:
            raise AirflowStandaloneError("already started")
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
            self._client = httpx.Client(
                base_url=self.url,
                headers={"Authorization": f"Bearer {self._token()}"},
                timeout=30.0,
            )
        except BaseException as exc:
            if isinstance(exc, Exception):
                print(self.log_tail(), file=sys.stderr)
            self.stop()
            raise

    def _wait_until_healthy(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while True:
            self._check_alive()
            self._remember_processes()
            try:
                answer = httpx.get(f"{self.url}/api/v2/monitor/health", timeout=5.0)
                if answer.status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AirflowStandaloneError(
                    f"the API server did not answer on {self.url} within {self.start_timeout:.0f}s"
                )
            time.sleep(1.0)

    def _token(self) -> str:
        deadline = time.monotonic() + 60.0
        passwords = self.home / PASSWORDS_FILE
        while not passwords.exists():
            if time.monotonic() > deadline:
                raise AirflowStandaloneError(f"{passwords} was not written")
            time.sleep(0.5)
        password = json.loads(passwords.read_text())["admin"]
        answer = httpx.post(
            f"{self.url}/auth/token",
            json={"username": "admin", "password": password},
            timeout=30.0,
        )
        answer.raise_for_status()
        return str(answer.json()["access_token"])

    def _check_alive(self) -> None:
        if self._process is None:
            raise AirflowStandaloneError("not started")
        code = self._process.poll()
        if code is not None:
            raise AirflowStandaloneError(f"airflow standalone exited with status {code}")

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
        found = {pid: proc for pid, proc in self._seen.items() if _alive(proc)}
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
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._process is None:
            return
        procs = self.processes()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGTERM)
        for proc in procs:
            _signal(proc, signal.SIGTERM)
        _, alive = psutil.wait_procs(procs, timeout=timeout)
        leftovers = {proc.pid: proc for proc in [*alive, *self.processes()] if _alive(proc)}
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGKILL)
        for proc in leftovers.values():
            _signal(proc, signal.SIGKILL)
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
            _signal(proc, sig)
        _, left = psutil.wait_procs(list(victims.values()), timeout=timeout)
        # `airflow standalone` never reaps a component that died: a zombie is gone.
        alive = [proc for proc in left if _alive(proc)]
        if alive:
            raise AirflowStandaloneError(f"triggerer processes outlived signal {sig}: {alive}")
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

    # -- REST -------------------------------------------------------------------------

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """Call the REST API; the JSON answer, or raise on an error status."""
        if self._client is None:
            raise AirflowStandaloneError("not started")
        self._check_alive()
        self._remember_processes()
        answer = self._client.request(method, path, **kwargs)
        if answer.is_error:
            raise AirflowStandaloneError(
                f"{method} {path}: HTTP {answer.status_code}: {answer.text[:500]}"
            )
        return answer.json() if answer.content else None

    def wait_for_dag(self, dag_id: str, timeout: float = 120.0) -> dict[str, Any]:
        """Wait until the dag processor has parsed ``dag_id``; its DAG resource."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return dict(self.request("GET", f"/api/v2/dags/{quote(dag_id)}"))
            except AirflowStandaloneError as exc:
                if "HTTP 404" not in str(exc) or time.monotonic() > deadline:
                    raise
            time.sleep(1.0)

    def unpause(self, dag_id: str) -> None:
        self.request("PATCH", f"/api/v2/dags/{quote(dag_id)}", json={"is_paused": False})

    def trigger(self, dag_id: str, conf: Mapping[str, Any] | None = None) -> str:
        """Start a DAG run now; its run id."""
        run = self.request(
            "POST",
            f"/api/v2/dags/{quote(dag_id)}/dagRuns",
            json={"logical_date": None, "conf": dict(conf or {})},
        )
        return str(run["dag_run_id"])

    def run_state(self, dag_id: str, run_id: str) -> str:
        run = self.request("GET", f"/api/v2/dags/{quote(dag_id)}/dagRuns/{quote(run_id)}")
        return str(run["state"])

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 120.0) -> str:
        """Wait until a DAG run has finished; its state (``success`` or ``failed``)."""
        return str(
            self.wait_until(
                lambda: (state := self.run_state(dag_id, run_id)) in FINISHED_RUN_STATES and state,
                timeout,
                f"DAG run {dag_id}/{run_id} did not finish",
            )
        )

    def dag_runs(self, dag_id: str) -> list[dict[str, Any]]:
        """Every run of ``dag_id``, oldest first."""
        answer = self.request(
            "GET",
            f"/api/v2/dags/{quote(dag_id)}/dagRuns",
            params={"limit": 1000, "order_by": "run_after"},
        )
        return list(answer["dag_runs"])

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        """Every task instance of a run, mapped ones included (``map_index`` ≥ 0)."""
        answer = self.request(
            "GET",
            f"/api/v2/dags/{quote(dag_id)}/dagRuns/{quote(run_id)}/taskInstances",
            params={"limit": 1000},
        )
        return list(answer["task_instances"])

    def task_tries(
        self, dag_id: str, run_id: str, task_id: str, map_index: int = -1
    ) -> list[dict[str, Any]]:
        """Every try of one task instance (earlier ones from its history), oldest first."""
        path = f"/api/v2/dags/{quote(dag_id)}/dagRuns/{quote(run_id)}/taskInstances/{task_id}"
        if map_index >= 0:
            path = f"{path}/{map_index}"
        answer = self.request("GET", f"{path}/tries")
        return sorted(answer["task_instances"], key=lambda ti: int(ti["try_number"]))

    def xcom(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        map_index: int = -1,
        key: str = "return_value",
    ) -> Any:
        """The value a task instance pushed (its return value by default)."""
        path = (
            f"/api/v2/dags/{quote(dag_id)}/dagRuns/{quote(run_id)}/taskInstances/"
            f"{task_id}/xcomEntries/{key}"
        )
        return self.request("GET", path, params={"map_index": map_index})["value"]

    def task_process(self, ti_id: str) -> psutil.Process | None:
        """The process running a task instance now (its task runner), if any."""
        title = TASK_PROCESS_TITLE.format(ti_id=ti_id)
        for proc in self.processes():
            try:
                if title in " ".join(proc.cmdline()):
                    return proc
            except psutil.Error:
                continue
        return None

    def wait_until(self, check: Callable[[], Any], timeout: float, what: str) -> Any:
        """Poll ``check`` every second until it returns something truthy; that value."""
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AirflowStandaloneError(f"{what} within {timeout:.0f}s")
            time.sleep(1.0)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _signal(proc: psutil.Process, sig: int) -> None:
    with contextlib.suppress(psutil.Error):
        proc.send_signal(sig)
