"""Under Airflow, migronaut's metrics go through Airflow's metrics backend: StatsD here.

A real StatsD listener (a UDP socket on loopback) receives what a generated DAG's
run sends. Airflow is configured as a deployment would be (``[metrics] statsd_on``,
``statsd_host``, ``statsd_port`` as ``AIRFLOW__METRICS__*``), and its metrics
backend is set up from that configuration as the task runner does at start-up
(``dag.test()`` runs tasks without it). InfluxDB-style tags make the datagrams
carry the migration and the collection.
"""

from __future__ import annotations

import inspect
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger
from airflow.sdk.configuration import conf
from airflow.sdk.observability.metrics import stats_utils
from airflow.sdk.observability.stats import Stats
from pymongo.database import Database

from migronaut_airflow.operators.background import dag_id_for
from migronaut_core.background.states import STATUSES
from migronaut_core.background.telemetry import SINK_METRICS
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.dags import load_dags, task_states

pytestmark = pytest.mark.airflow

DOCUMENTS = 2_000
PREFIX = "airflow."


class StatsdListener:
    """Collects every datagram sent to a loopback UDP port, on a thread of its own."""

    def __init__(self) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.bind(("127.0.0.1", 0))
        self.socket.settimeout(0.2)
        self.port = self.socket.getsockname()[1]
        self.lines: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.socket.recv(65_535)
            except TimeoutError:
                continue
            self.lines.extend(data.decode().splitlines())

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.socket.close()

    def metrics(self) -> list[tuple[str, dict[str, str], float, str]]:
        """Migronaut's datagrams: (name, tags, value, type), in arrival order."""
        parsed = []
        for line in self.lines:
            head, _, rest = line.partition(":")
            name, *tags = head.split(",")
            if not name.startswith(PREFIX + "migronaut."):
                continue
            value, _, kind = rest.partition("|")
            parsed.append(
                (
                    name.removeprefix(PREFIX),
                    dict(tag.split("=", 1) for tag in tags),
                    float(value),
                    kind.split("|")[0],
                )
            )
        return parsed


def _install_stats(factory: Any, *, legacy_names: bool) -> None:
    """``Stats.initialize`` as the installed Airflow takes it.

    Airflow 3.2's ``get_stats_factory`` asks for the ``Stats`` class and its
    ``initialize`` knows no ``export_legacy_names``; 3.3 changed both.
    """
    if "export_legacy_names" in inspect.signature(Stats.initialize).parameters:
        Stats.initialize(factory=factory, export_legacy_names=legacy_names)
    else:
        Stats.initialize(factory=factory)


def _configured_factory() -> Any:
    if inspect.signature(stats_utils.get_stats_factory).parameters:
        return stats_utils.get_stats_factory(Stats)
    return stats_utils.get_stats_factory()


@contextmanager
def airflow_statsd(port: int) -> Iterator[None]:
    """Airflow configured to send its metrics to ``port``; its backend reset afterwards."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AIRFLOW__METRICS__STATSD_ON", "True")
        patch.setenv("AIRFLOW__METRICS__STATSD_HOST", "127.0.0.1")
        patch.setenv("AIRFLOW__METRICS__STATSD_PORT", str(port))
        patch.setenv("AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED", "True")
        _install_stats(
            _configured_factory(), legacy_names=conf.getboolean("metrics", "legacy_names_on")
        )
        try:
            yield
        finally:
            _install_stats(NoStatsLogger, legacy_names=False)


@pytest.fixture
def statsd() -> Iterator[StatsdListener]:
    listener = StatsdListener()
    yield listener
    listener.close()


def test_a_run_under_airflow_sends_slice_batch_lease_metrics_and_gauges_to_statsd(
    dags_folder: Path,
    migronaut_connection: str,
    mongo_uri: str,
    db: Database[dict[str, Any]],
    statsd: StatsdListener,
) -> None:
    seed_users(db, DOCUMENTS)
    db.users.create_index([("_v", 1), ("_id", 1)])
    write_background(dags_folder, batch_size=200, max_parallel=2)
    with make_kit(mongo_uri, db, dags_folder) as kit:
        kit.runs.up()
    with airflow_statsd(statsd.port):
        run = load_dags()[dag_id_for(SPLIT_NAME)].test()
    assert run.state == "success", task_states(run)
    with make_kit(mongo_uri, db, dags_folder) as kit:
        assert kit_json.status(kit, SPLIT_NAME)["totals"]["migrated"] == DOCUMENTS

    metrics = statsd.metrics()
    names = {name for name, *_ in metrics}
    print(f"\n{len(metrics)} of {len(statsd.lines)} datagrams are migronaut's: {sorted(names)}")
    assert {
        "migronaut.slice.duration",
        "migronaut.batch.duration",
        "migronaut.batch.documents",
        "migronaut.lease.claimed",
    } <= names
    statsd_type = {"timing": "ms", "incr": "c", "gauge": "g"}
    for name, tags, _value, kind in metrics:
        assert tags["migration"] == SPLIT_NAME, (name, tags)
        assert tags["collection"] == "users", (name, tags)
        assert kind == statsd_type[SINK_METRICS[name]], (name, kind)
    read = sum(value for name, _, value, _ in metrics if name == "migronaut.batch.documents")
    assert read == DOCUMENTS
    outcomes = {tags["outcome"] for name, tags, *_ in metrics if name == "migronaut.slice.duration"}
    assert "exhausted" in outcomes
    claims = [value for name, _, value, _ in metrics if name == "migronaut.lease.claimed"]
    assert len(claims) >= 1 and set(claims) == {1.0}

    def last(name: str, **tags: str) -> float:
        values = [
            value
            for sent, sent_tags, value, _ in metrics
            if sent == name and all(sent_tags.get(k) == v for k, v in tags.items())
        ]
        assert values, (name, tags)
        return values[-1]

    # The coordinate tasks' gauges: the status as one series per status, the progress.
    for status in STATUSES:
        assert last("migronaut.migration.status", status=status) == (status == "completed")
    assert last("migronaut.migration.done") == DOCUMENTS
    assert last("migronaut.migration.remaining") == 0
    assert last("migronaut.migration.failed_documents") == 0
    assert last("migronaut.migration.lanes") == 0
    running = [
        value
        for name, tags, value, _ in metrics
        if name == "migronaut.migration.status" and tags["status"] == "running"
    ]
    assert 1.0 in running  # a step reported it running before it completed
