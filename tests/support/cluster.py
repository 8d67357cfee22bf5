"""The production-shaped Airflow for end-to-end tests: one cluster, scenarios run on it.

:func:`airflow_cluster` is a package fixture (import it into a package's
``conftest.py``) that starts one :class:`~migronaut_dev.airflow_cluster.AirflowCluster`
— PostgreSQL, Redis, api-server, scheduler, dag-processor, triggerer, Celery
workers ``worker-1`` and ``worker-2`` — with ``AIRFLOW_CONN_MIGRONAUT_DEFAULT``
pointing at the session's mongod, and stops it (checking nothing is left) after
the package's last test. It yields a :class:`Cluster`.

A test takes a :class:`Scenario` (:meth:`Cluster.scenario`): its own database,
seeded with old-shape users, the chaos migration (:mod:`tests.support.chaos`:
it counts how often each document was transformed) under a name of its own,
registered as ``migronaut up`` would, and a DAG file of its own that builds that
migration's DAG (:data:`DAG_OPTIONS`, plus the scenario's). Scenarios run one
after another; each leaves the cluster as it found it (every process up).
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from pymongo import MongoClient
from pymongo.database import Database

from migronaut_airflow.operators.background import dag_id_for
from migronaut_dev.airflow_api import AirflowHarnessError
from migronaut_dev.airflow_cluster import AirflowCluster
from migronaut_dev.endpoints import airflow_connection
from tests.support.app_writer import AppWriter
from tests.support.chaos import (
    assert_nothing_lost,
    drive_remaining,
    register,
    seed,
    status_of,
    write_migration,
)

#: What every scenario's DAG passes to ``background_dag``: short waits, 1 s before a
#: lane's retry. The lease TTL is 4 s (``lock_ttl_seconds`` of :data:`DAG_FILE`).
DAG_OPTIONS = "lane_retry_delay=timedelta(seconds=1), no_lease_grace_seconds=5.0, poll_interval=1.0"
#: A scenario's DAG file: the DAG of each background migration in its directory.
DAG_FILE = """
from datetime import timedelta

from migronaut_airflow.dags.builders import background_dag
from migronaut_airflow.dags.factory import background_migration_names
from migronaut_airflow.targets import resolve_target

_target = resolve_target(
    arguments={{
        "migrations_dir": {migrations!r},
        "database": {database!r},
        "migronaut_config": {{"lock_ttl_seconds": 4}},
    }}
)
for _name in background_migration_names(_target.migrations_dir):
    _dag = background_dag(_name, _target, {options})
    globals()[_dag.dag_id] = _dag
"""
#: The share of the seeded documents migrated before :meth:`Scenario.finish` stops the
#: application's writes.
APP_WRITES_UNTIL = 0.9
#: Where the cluster's connection points when a scenario names no database.
DEFAULT_DATABASE = "migronaut_cluster"


@dataclass
class Cluster:
    """The session's cluster, the MongoDB it migrates, and where scenarios keep files."""

    airflow: AirflowCluster
    mongo_uri: str
    client: MongoClient[dict[str, Any]]
    root: Path
    scenarios: int = 0

    def scenario(
        self,
        key: str,
        *,
        documents: int,
        doc_seconds: float,
        batch_size: int = 100,
        max_parallel: int = 4,
        extra: str = "",
        dag_options: str = "",
    ) -> Scenario:
        """A fresh database with ``documents`` old-shape users, its migration and its DAG.

        The DAG is parsed and unpaused, nothing runs yet (:meth:`Scenario.start`).
        ``extra`` goes into the migration's ``background`` dict (e.g. ``"slice_ms":
        1000,``), ``dag_options`` to ``background_dag`` after :data:`DAG_OPTIONS`.
        """
        self.scenarios += 1
        name = f"20240101{self.scenarios:06d}_split_names_{key}"
        db = self.client[f"cluster_{key}_{uuid.uuid4().hex[:8]}"]
        migrations = self.root / key / "migrations"
        seed(db, documents)
        write_migration(
            migrations,
            name=name,
            batch_size=batch_size,
            max_parallel=max_parallel,
            doc_seconds=doc_seconds,
            extra=extra,
        )
        register(self.mongo_uri, db.name, migrations)
        options = f"{DAG_OPTIONS}, {dag_options}" if dag_options else DAG_OPTIONS
        dag_file = self.airflow.dags_folder / f"migronaut_cluster_{key}.py"
        dag_file.write_text(
            DAG_FILE.format(migrations=str(migrations), database=db.name, options=options)
        )
        scenario = Scenario(self, db, migrations, name, dag_id_for(name), documents, dag_file)
        self.airflow.wait_for_dag(scenario.dag_id, timeout=120)
        self.airflow.unpause(scenario.dag_id)
        return scenario


@dataclass
class Scenario:
    """One migration on its own database, run by the cluster with an application writing."""

    cluster: Cluster
    db: Database[dict[str, Any]]
    migrations: Path
    name: str
    dag_id: str
    seeded: int
    dag_file: Path
    app: AppWriter | None = None
    first_run: str = ""

    @property
    def airflow(self) -> AirflowCluster:
        return self.cluster.airflow

    def start(self) -> str:
        """Start the application's writes, then the migration's first DAG run; its run id."""
        self.app = AppWriter(self.cluster.mongo_uri, self.db.name, self.seeded, pause=0.005)
        self.app.start()
        self.first_run = self.airflow.trigger(self.dag_id, {"reason": "cluster e2e"})
        return self.first_run

    def migrated(self) -> int:
        return self.db.users.count_documents({"_v": 2})

    def lanes(self, run_id: str) -> list[dict[str, Any]]:
        """The lane task instances of one run."""
        return [
            ti for ti in self.airflow.task_instances(self.dag_id, run_id) if ti["task_id"] == "lane"
        ]

    def running_runs(self) -> list[str]:
        runs = self.airflow.dag_runs(self.dag_id)
        return [run["dag_run_id"] for run in runs if run["state"] in ("queued", "running")]

    def task(self, run_id: str, task_id: str) -> dict[str, Any]:
        tasks = self.airflow.task_instances(self.dag_id, run_id)
        return next(ti for ti in tasks if ti["task_id"] == task_id)

    def finish(self, timeout: float = 240.0) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Let the application write until the first pass is nearly through; check the end.

        Then waits for the migration to complete and the DAG's runs to finish. Every
        seeded and inserted document migrated exactly once, the totals say so, no
        acknowledged application write lost, every DAG run succeeded. Returns the
        migration's status and the DAG's runs.
        """
        assert self.app is not None, "not started"

        def completed() -> dict[str, Any] | None:
            view = status_of(self.cluster.mongo_uri, self.db.name, self.migrations, self.name)
            assert view["status"] not in ("failed", "cancelled"), view
            return view if view["status"] == "completed" else None

        # The application writes until the first pass is nearly through; the passes
        # after it take the old-shape documents it inserted meanwhile.
        self.airflow.wait_until(
            lambda: self.migrated() >= self.seeded * APP_WRITES_UNTIL or completed(),
            timeout,
            f"{self.name} did not get far",
        )
        self.app.stop()
        try:
            self.airflow.wait_until(completed, timeout, f"{self.name} did not complete")
        except AirflowHarnessError as exc:
            raise AssertionError(f"{exc}; {self.describe()}") from exc

        def finished() -> list[dict[str, Any]] | None:
            runs = self.airflow.dag_runs(self.dag_id)
            done = all(run["state"] in ("success", "failed") for run in runs)
            return runs if done else None

        runs: list[dict[str, Any]] = self.airflow.wait_until(
            finished, 120, f"{self.dag_id} kept running"
        )
        # An application insert after the last pass counted none is drift, which the
        # design answers with a reopen; the kit drives that here and says so.
        reopened = drive_remaining(self.cluster.mongo_uri, self.db.name, self.migrations, self.name)
        view = assert_nothing_lost(
            self.db, self.cluster.mongo_uri, self.migrations, self.app, self.seeded, self.name
        )
        print(
            f"\n{self.name}: {len(runs)} run(s), totals {view['totals']}, app writes "
            f"{self.app.acknowledged} (inserted {len(self.app.inserted)}), reopened {reopened}"
        )
        assert [run["state"] for run in runs] == ["success"] * len(runs), runs
        return view, runs

    def describe(self) -> str:
        """The migration's status and every run's task states, for a failure message."""
        view = status_of(self.cluster.mongo_uri, self.db.name, self.migrations, self.name)
        runs = {
            run["dag_run_id"]: (
                run["state"],
                sorted(
                    (ti["task_id"], ti["map_index"], ti["state"], ti["try_number"])
                    for ti in self.airflow.task_instances(self.dag_id, run["dag_run_id"])
                ),
            )
            for run in self.airflow.dag_runs(self.dag_id)
        }
        return f"status {view['status']}, totals {view['totals']}; runs {runs}"

    def close(self) -> None:
        """Stop writing, pause the DAG, remove its file and drop the database."""
        if self.app is not None:
            with contextlib.suppress(AssertionError):
                self.app.stop()
        try:
            self.airflow.request("PATCH", f"/api/v2/dags/{self.dag_id}", json={"is_paused": True})
        finally:
            self.dag_file.unlink(missing_ok=True)
            self.cluster.client.drop_database(self.db.name)


@dataclass
class LaneSampler:
    """Samples a scenario's lane task instances in a thread while the migration runs.

    Records the most lanes in state ``running`` at one time (across the DAG's
    runs) and the hostnames running lanes were seen on. A deferred lane holds no
    worker slot and is not counted. A sample the API server does not answer in
    time (a loaded machine) is skipped and counted in ``missed``; exiting fails
    when most samples were missed.
    """

    scenario: Scenario
    interval: float = 0.3
    most_running: int = 0
    hostnames: set[str] = field(default_factory=set)
    samples: int = 0
    missed: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _errors: list[BaseException] = field(default_factory=list)

    def __enter__(self) -> LaneSampler:
        self._thread = threading.Thread(target=self._run, name="lane-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self._errors and exc[0] is None and self.missed >= self.samples:
            raise AssertionError(
                f"the lane sampler missed {self.missed} of {self.missed + self.samples} samples"
            ) from self._errors[-1]

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                running = [
                    ti
                    for run_id in self.scenario.running_runs()
                    for ti in self.scenario.lanes(run_id)
                    if ti["state"] == "running"
                ]
            except (httpx.HTTPError, AirflowHarnessError) as exc:
                self.missed += 1
                self._errors[-1:] = [exc]
            else:
                self.samples += 1
                self.most_running = max(self.most_running, len(running))
                self.hostnames.update(str(ti["hostname"]) for ti in running if ti.get("hostname"))
            time.sleep(self.interval)


def start_cluster(
    root: Path, mongo_uri: str, client: MongoClient[dict[str, Any]]
) -> Iterator[Cluster]:
    """Run a cluster for the duration of the generator; fail if it leaves a process behind."""
    dags = root / "dags"
    dags.mkdir(parents=True, exist_ok=True)
    env = {"AIRFLOW_CONN_MIGRONAUT_DEFAULT": airflow_connection(mongo_uri, DEFAULT_DATABASE)}
    with AirflowCluster(root / "cluster", dags, env) as airflow:
        yield Cluster(airflow, mongo_uri, client, root / "scenarios")
    left = [" ".join(proc.cmdline()) for proc in airflow.processes()]
    assert not left, f"cluster processes left behind: {left}"


@pytest.fixture(scope="package")
def airflow_cluster(
    tmp_path_factory: pytest.TempPathFactory,
    mongo_uri: str,
    mongo_client: MongoClient[dict[str, Any]],
) -> Iterator[Cluster]:
    """The production-shaped Airflow of the test package that imports this fixture into its
    ``conftest.py``: started on first use, stopped after the package's last test, so
    its processes do not load the machine for the rest of the run."""
    yield from start_cluster(tmp_path_factory.mktemp("airflow-cluster"), mongo_uri, mongo_client)
