"""The Airflow half of ``scripts/demo.sh``: ``python -m migronaut_dev.demo``.

Resets the demo database, runs ``migronaut_up`` (the sample migrations of
``examples/demo``, then the background migration's DAG) under
:class:`~migronaut_dev.airflow_standalone.AirflowStandalone` and prints what
happened. It reads ``MIGRONAUT_MONGODB_URI``, ``MIGRONAUT_DATABASE`` and
``MIGRONAUT_DEMO_AIRFLOW_HOME``. The demo wipes only an AIRFLOW_HOME and a database
it created itself (it leaves a marker in each).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from pymongo import MongoClient
from pymongo.errors import PyMongoError

from migronaut_core import Migronaut, MigronautError
from migronaut_dev import REPO_ROOT
from migronaut_dev.airflow_standalone import (
    FINISHED_RUN_STATES,
    PASSWORDS_FILE,
    AirflowStandalone,
    AirflowStandaloneError,
    install_dag_file,
    parse_time,
)
from migronaut_dev.endpoints import airflow_connection

DEMO_MIGRATIONS = REPO_ROOT / "examples" / "demo" / "migrations"
DEMO_BACKGROUND = "20260103000000_split_user_names"
UP_DAG = "migronaut_up"
#: The demo's DAG file: the shipped one, with the sensor looking every second.
DEMO_DAG_OPTIONS = "poll_interval=1.0"
#: Left in the demo's AIRFLOW_HOME and database, so a later run may wipe them.
DEMO_MARKER = "migronaut_demo_marker"
DEFAULT_DATABASE = "migronaut_demo"
DEFAULT_HOME = REPO_ROOT / ".migronaut" / "airflow"


class DemoError(RuntimeError):
    """The demo did not get where it should; the message says where it stopped."""


def _took(start: str | None, end: str | None) -> str:
    begun, ended = parse_time(start), parse_time(end)
    return "-" if begun is None or ended is None else f"{(ended - begun).total_seconds():.1f}s"


class Demo:
    """Apply ``examples/demo/migrations`` to a fresh database through ``airflow standalone``."""

    def __init__(
        self, home: Path, uri: str, database: str, timeout: float, stay: bool = False
    ) -> None:
        self.home = home
        self.uri = uri
        self.database = database
        self.timeout = timeout
        self.stay = stay
        self.bg_dag = f"migronaut_bg__{DEMO_BACKGROUND}"
        self.started = time.monotonic()

    def step(self, text: str) -> None:
        """Announce a step, with the seconds since the demo started."""
        print(f"==> [{time.monotonic() - self.started:5.1f}s] {text}", flush=True)

    def connection(self) -> str:
        """The demo's ``mongo`` connection for Airflow.

        :raises DemoError: the demo's URI is not a MongoDB URI.
        """
        try:
            return airflow_connection(self.uri, self.database)
        except ValueError as exc:
            raise DemoError(str(exc)) from exc

    def run(self) -> None:
        self.started = time.monotonic()
        self.reset_home()
        self.step(f"resetting database {self.database}")
        self.reset_database()
        self.step(f"starting airflow standalone (AIRFLOW_HOME={self.home})")
        install_dag_file(self.home / "dags", DEMO_DAG_OPTIONS)
        env = {
            "MIGRONAUT_MIGRATIONS_DIR": str(DEMO_MIGRATIONS),
            "AIRFLOW_CONN_MIGRONAUT_DEFAULT": self.connection(),
        }
        kit = Migronaut(uri=self.uri, database=self.database, migrations_dir=str(DEMO_MIGRATIONS))
        with AirflowStandalone(self.home, self.home / "dags", env) as airflow, kit:
            self.step(f"its API server answers on {airflow.url}")
            self.apply(airflow, kit)
            status = self.wait_completed(airflow, kit)
            self.report(airflow, kit, status)
            if self.stay:
                self.show_ui(airflow)
            self.step("stopping airflow standalone")
        self.step("demo done")

    def show_ui(self, airflow: AirflowStandalone) -> None:
        """Keep Airflow up for a look at the Migrations page, until Ctrl-C."""
        self.step(f"the Migrations page: {airflow.url}/migronaut/ (Airflow: {airflow.url}/)")
        print(f"    sign in as admin, password in {self.home / PASSWORDS_FILE}; Ctrl-C to stop")
        stop = threading.Event()
        for number in (signal.SIGINT, signal.SIGTERM):
            signal.signal(number, lambda *_: stop.set())
        while not stop.wait(1.0):
            pass

    def reset_home(self) -> None:
        """A fresh AIRFLOW_HOME (no runs left from an earlier demo), if it is the demo's.

        The demo's: the default one, or one holding the demo's marker.
        """
        if self.home.exists() and any(self.home.iterdir()):
            if self.home != DEFAULT_HOME and not (self.home / DEMO_MARKER).exists():
                raise DemoError(f"{self.home} is not empty and not the demo's; choose another")
            shutil.rmtree(self.home)
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / DEMO_MARKER).write_text("created by migronaut_dev.demo\n")

    def reset_database(self) -> None:
        """Drop the demo database: the default one, one with the demo's marker, or an empty one."""
        client: MongoClient[dict[str, Any]] = MongoClient(self.uri, serverSelectionTimeoutMS=10_000)
        with client:
            db = client[self.database]
            names = db.list_collection_names()
            if names and DEMO_MARKER not in names and self.database != DEFAULT_DATABASE:
                raise DemoError(
                    f"database {self.database} holds collections the demo did not create; "
                    "set MIGRONAUT_DATABASE to another name"
                )
            client.drop_database(self.database)
            db[DEMO_MARKER].insert_one({"created_by": "migronaut_dev.demo"})

    def apply(self, airflow: AirflowStandalone, kit: Migronaut) -> None:
        """Run ``migronaut_up``: the regular migrations, then it starts the background DAG."""
        for dag_id in (UP_DAG, self.bg_dag):
            airflow.wait_for_dag(dag_id)
            airflow.unpause(dag_id)
        self.step(f"triggering {UP_DAG}: regular migrations, register and start the background one")
        run_id = airflow.trigger(UP_DAG, {"reason": "demo"})
        state = airflow.wait_for_run(UP_DAG, run_id, timeout=120)
        if state != "success":
            tis = airflow.task_instances(UP_DAG, run_id)
            failed = [ti["task_id"] for ti in tis if ti["state"] != "success"]
            raise DemoError(f"{UP_DAG} run {run_id} ended {state}; unsuccessful tasks: {failed}")
        for row in kit.runs.status():
            print(f"    {row.name}  {row.status}  ({row.kind})")

    def wait_completed(self, airflow: AirflowStandalone, kit: Migronaut) -> dict[str, Any]:
        """Wait until the background migration completed and its DAG runs all finished."""
        self.step(f"waiting for {self.bg_dag} to complete {DEMO_BACKGROUND}")

        def completed() -> dict[str, Any] | None:
            view = kit.background.status(DEMO_BACKGROUND)
            if view is not None and view.status in ("failed", "cancelled", "paused"):
                raise DemoError(f"{DEMO_BACKGROUND} is {view.status}: {view.last_error}")
            return view.to_dict() if view is not None and view.status == "completed" else None

        status = airflow.wait_until(completed, self.timeout, f"{DEMO_BACKGROUND} did not complete")

        def finished() -> bool:
            runs = airflow.dag_runs(self.bg_dag)
            return all(run["state"] in FINISHED_RUN_STATES for run in runs)

        airflow.wait_until(finished, 60, f"{self.bg_dag} kept running")
        return dict(status)

    def report(self, airflow: AirflowStandalone, kit: Migronaut, status: dict[str, Any]) -> None:
        totals = status["totals"]
        self.step(f"background migration {DEMO_BACKGROUND}: {status['status']}")
        print(
            f"    migrated {totals.get('migrated', 0)} documents in {status['pass']} pass(es), "
            f"{_took(status['started_at'], status['completed_at'])}; totals {totals}"
        )
        print("==> DAG runs")
        runs = []
        for dag_id in (UP_DAG, self.bg_dag):
            for run in airflow.dag_runs(dag_id):
                took = _took(run.get("start_date"), run.get("end_date"))
                print(f"    {dag_id}  {run['dag_run_id']}  {run['state']}  {took}")
                runs.append(run)
        first = airflow.dag_runs(self.bg_dag)[0]["dag_run_id"]
        print(f"==> lanes of {first}")
        for ti in airflow.task_instances(self.bg_dag, first):
            if ti["task_id"] == "lane":
                print(
                    f"    lane {ti['map_index']}  {ti['state']}  try {ti['try_number']}  "
                    f"{ti['start_date']} -> {ti['end_date']}"
                )
        users = kit.db.users
        total, migrated = users.count_documents({}), users.count_documents({"_v": 2})
        print(f"==> users: {total} documents, {migrated} at _v 2")
        print("    sample:", users.find_one({}, {"_id": 0}))
        print("    indexes:", sorted(users.index_information()))
        failed = [run["dag_run_id"] for run in runs if run["state"] != "success"]
        if failed:
            raise DemoError(f"DAG runs did not succeed: {failed}")
        if migrated != total or totals.get("migrated") != total:
            raise DemoError(f"{migrated} of {total} users migrated (totals {totals})")


def main(argv: list[str] | None = None) -> int:
    """The Airflow half of ``scripts/demo.sh``; its exit status."""
    default_home = os.environ.get("MIGRONAUT_DEMO_AIRFLOW_HOME") or DEFAULT_HOME
    parser = argparse.ArgumentParser(
        prog="python -m migronaut_dev.demo",
        description="Apply the demo migrations through Airflow.",
    )
    parser.add_argument(
        "--airflow-home",
        type=Path,
        default=Path(default_home),
        help="the demo's AIRFLOW_HOME, wiped at start (default .migronaut/airflow)",
    )
    parser.add_argument("--timeout", type=float, default=150.0, help="seconds for the migration")
    parser.add_argument(
        "--stay",
        action="store_true",
        help="keep Airflow running afterwards to look at the Migrations page (Ctrl-C stops)",
    )
    args = parser.parse_args(argv)
    uri = os.environ.get("MIGRONAUT_MONGODB_URI", "").strip()
    if not uri:
        print("demo: MIGRONAUT_MONGODB_URI is not set", file=sys.stderr)
        return 2
    database = os.environ.get("MIGRONAUT_DATABASE") or DEFAULT_DATABASE
    home = args.airflow_home.resolve()
    try:
        Demo(home, uri, database, args.timeout, stay=args.stay).run()
    except (DemoError, AirflowStandaloneError, MigronautError, PyMongoError) as exc:
        print(f"demo failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        if (home / "standalone.log").exists():
            print(f"Airflow's log: {home / 'standalone.log'}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("demo interrupted; Airflow stopped", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
