"""What both local Airflow harnesses share: their settings and driving one through REST.

:class:`AirflowApi` is the base of :class:`~migronaut_dev.airflow_standalone.AirflowStandalone`
(``airflow standalone``: LocalExecutor on SQLite) and
:class:`~migronaut_dev.airflow_cluster.AirflowCluster` (Celery workers on PostgreSQL
and Redis). It signs in to the API server as the simple auth manager's admin and
drives it: unpause, trigger, wait for runs, list DAG runs, task instances (mapped
ones too) and their tries, read XComs, find a task's process. A subclass starts the
processes and says which are its own (:meth:`AirflowApi.processes`).
:func:`airflow_environment` is the environment both give every Airflow process.

Airflow itself only runs in subprocesses: this module needs ``httpx`` and
``psutil`` (both ship with Airflow), never Airflow.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

import httpx
import psutil

from migronaut_dev import REPO_ROOT
from migronaut_dev.endpoints import LOOPBACK, free_port
from migronaut_dev.lifecycle import StartsOnEnter

#: Where the simple auth manager writes the admin password (in ``AIRFLOW_HOME``).
PASSWORDS_FILE = "simple_auth_manager_passwords.json.generated"
#: Run states a DAG run does not leave.
FINISHED_RUN_STATES = frozenset({"success", "failed"})
#: The process title Airflow's task runner takes: ``airflow worker -- <task instance id>``.
TASK_PROCESS_TITLE = "airflow worker -- {ti_id}"
#: The ready DAG file this project ships.
DAG_FILE = REPO_ROOT / "dags" / "migronaut_dags.py"
_FACTORY_IMPORT = "from migronaut_airflow.dags.factory import build_all_dags\n"


class AirflowHarnessError(RuntimeError):
    """A local Airflow did not start, died, or did not do what was asked in time."""


def parse_time(value: str | None) -> datetime | None:
    """A timestamp of the REST API (ISO 8601, ``Z`` or an offset), or None."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def overlapping(instances: Iterable[Mapping[str, Any]]) -> bool:
    """Whether at least two of these task instances ran at the same time."""
    return most_at_once(instances) >= 2


def most_at_once(instances: Iterable[Mapping[str, Any]]) -> int:
    """The most of these task instances that ran at the same time (by start and end dates).

    A task instance without both dates is not counted; one that ended as another
    started did not overlap it.
    """
    edges: list[tuple[datetime, int]] = []
    for ti in instances:
        start, end = parse_time(ti.get("start_date")), parse_time(ti.get("end_date"))
        if start is not None and end is not None:
            edges += [(start, 1), (end, -1)]
    running = most = 0
    for _, step in sorted(edges):  # an end sorts before a start at the same instant
        running += step
        most = max(most, running)
    return most


def install_dag_file(dags_folder: Path, options: str = "") -> Path:
    """Copy ``dags/migronaut_dags.py`` into ``dags_folder``; return the copy.

    :param options: keyword arguments for its ``build_all_dags`` call, as Python source
        (``timedelta`` is in scope), e.g. ``"poll_interval=1.0"``; none: a plain copy.
    """
    source = DAG_FILE.read_text(encoding="utf-8")
    if options:
        if source.count(_FACTORY_IMPORT) != 1:
            raise AirflowHarnessError(f"{DAG_FILE} no longer imports build_all_dags as expected")
        wrapped = (
            "from datetime import timedelta\n"
            "from functools import partial\n\n"
            "from migronaut_airflow.dags.factory import build_all_dags as _build_all_dags\n\n"
            f"build_all_dags = partial(_build_all_dags, {options})\n"
        )
        source = source.replace(_FACTORY_IMPORT, wrapped)
    dags_folder.mkdir(parents=True, exist_ok=True)
    target = dags_folder / DAG_FILE.name
    target.write_text(source, encoding="utf-8")
    return target


def airflow_environment(home: Path, dags_folder: Path, port: int) -> dict[str, str]:
    """The environment of every Airflow process of a local harness (before its own settings).

    Inherited ``AIRFLOW*`` variables are dropped; ``airflow`` of this interpreter comes
    first on ``PATH``. Short heartbeats and refresh intervals make a test's DAG file
    parse, and its tasks start and finish, within seconds.
    """
    env = {key: value for key, value in os.environ.items() if not key.startswith("AIRFLOW")}
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", "")])
    url = f"http://{LOOPBACK}:{port}"
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            # Tasks reach the API server here; the default assumes port 8080.
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
            "AIRFLOW__API__HOST": LOOPBACK,
            "AIRFLOW__API__PORT": str(port),
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
    return env


class AirflowApi(StartsOnEnter):
    """A local Airflow driven through its REST API, signed in as the admin.

    Subclasses start the processes, then call :meth:`_wait_until_healthy` and
    :meth:`_connect`, and implement :meth:`processes`, :meth:`_check_alive` and
    :meth:`log_tail`.

    :param home: its ``AIRFLOW_HOME`` (where the admin password is written).
    :param port: the API server's port.
    :param start_timeout: seconds to wait for the API to answer.
    """

    def __init__(self, home: Path, port: int, start_timeout: float) -> None:
        self.home = Path(home).resolve()
        self.port = port
        self.url = f"http://{LOOPBACK}:{port}"
        self.start_timeout = start_timeout
        self._client: httpx.Client | None = None

    # -- what a subclass provides -------------------------------------------------------

    def processes(self) -> list[psutil.Process]:
        """The live processes of this Airflow."""
        raise NotImplementedError

    def _check_alive(self) -> None:
        """Raise :class:`AirflowHarnessError` when a process this Airflow needs has died."""
        raise NotImplementedError

    def _remember_processes(self) -> None:
        """Note the processes started so far (task runners may leave their group)."""

    def log_tail(self, lines: int = 80) -> str:
        """The end of this Airflow's log(s)."""
        raise NotImplementedError

    # -- as a context manager: its log shown on an error -------------------------------

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(exc, Exception):
            print(self.log_tail(), file=sys.stderr)
        super().__exit__(exc_type, exc, tb)

    # -- connecting ---------------------------------------------------------------------

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
                raise AirflowHarnessError(
                    f"the API server did not answer on {self.url} within {self.start_timeout:.0f}s"
                )
            time.sleep(1.0)

    def _connect(self) -> None:
        """Sign in as the admin: every later request carries the token."""
        self._client = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {self._token()}"},
            timeout=30.0,
        )

    def _disconnect(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _token(self, user: str = "admin") -> str:
        """A JWT of ``user``, signed in with the password the simple auth manager generated."""
        deadline = time.monotonic() + 60.0
        passwords = self.home / PASSWORDS_FILE
        while not passwords.exists():
            if time.monotonic() > deadline:
                raise AirflowHarnessError(f"{passwords} was not written")
            time.sleep(0.5)
        password = json.loads(passwords.read_text())[user]
        answer = httpx.post(
            f"{self.url}/auth/token",
            json={"username": user, "password": password},
            timeout=30.0,
        )
        answer.raise_for_status()
        return str(answer.json()["access_token"])

    def request_as(self, user: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """Call the REST API as another user of ``[core] simple_auth_manager_users``;
        the response as it is, error statuses included."""
        headers = {"Authorization": f"Bearer {self._token(user)}"}
        return httpx.request(method, f"{self.url}{path}", headers=headers, timeout=30.0, **kwargs)

    # -- REST -------------------------------------------------------------------------

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """Call the REST API; the JSON answer, or raise on an error status."""
        if self._client is None:
            raise AirflowHarnessError("not started")
        self._check_alive()
        self._remember_processes()
        answer = self._client.request(method, path, **kwargs)
        if answer.is_error:
            raise AirflowHarnessError(
                f"{method} {path}: HTTP {answer.status_code}: {answer.text[:500]}"
            )
        return answer.json() if answer.content else None

    def wait_for_dag(self, dag_id: str, timeout: float = 120.0) -> dict[str, Any]:
        """Wait until the dag processor has parsed ``dag_id``; its DAG resource."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return dict(self.request("GET", f"/api/v2/dags/{quote(dag_id)}"))
            except AirflowHarnessError as exc:
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
                raise AirflowHarnessError(f"{what} within {timeout:.0f}s")
            time.sleep(1.0)


def alive(proc: psutil.Process) -> bool:
    """Whether ``proc`` still runs (a zombie does not)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def send_signal(proc: psutil.Process, sig: int) -> None:
    """Send ``sig`` to ``proc``, if it is still there."""
    with contextlib.suppress(psutil.Error):
        proc.send_signal(sig)
