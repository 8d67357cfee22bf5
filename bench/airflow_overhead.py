"""What driving a migration through Airflow costs over driving it from Python (DESIGN.md §5).

The same background migration on the same data size, each time on a freshly
seeded database: ``kit.background.run(name, concurrency=1)`` against the
generated DAG (``migronaut_airflow.dags.factory.build_dags`` with its default
options) run with ``dag.test()`` again and again until the migration completed.
``dag.test()`` runs one task at a time in this process, so the DAG's lanes run
one after another: the fair peer is one lane. Rounds alternate the order
(engine, Airflow, Airflow, engine, …) so a drifting server favours neither.

Airflow reads its configuration on first import, so a private ``AIRFLOW_HOME``
(SQLite metadata DB, ``airflow db migrate`` once, not timed) is set up below
before anything imports Airflow.

Usage: ``python -m bench.airflow_overhead [--docs N] [--rounds R] [--json]``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="migronaut-bench-airflow-"))
DAGS_FOLDER = AIRFLOW_HOME / "dags"
DAGS_FOLDER.mkdir()
atexit.register(shutil.rmtree, AIRFLOW_HOME, ignore_errors=True)
os.environ.update(
    {
        "AIRFLOW_HOME": str(AIRFLOW_HOME),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
    }
)

import runpy  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

from airflow.models.xcom import XComModel  # noqa: E402
from airflow.utils.session import create_session  # noqa: E402
from pymongo.database import Database  # noqa: E402

from bench import common  # noqa: E402
from migronaut_airflow.operators.background import dag_id_for  # noqa: E402
from migronaut_dev.endpoints import airflow_connection  # noqa: E402

DAG_FILE = """\
from migronaut_airflow.dags.factory import build_dags

globals().update(build_dags({directory!r}))
"""
#: dag.test() runs at most this many times (each is one coordinator round).
MAX_DAG_RUNS = 50


def migrate_metadata_db() -> float:
    started = time.perf_counter()
    airflow = Path(sys.executable).with_name("airflow")
    subprocess.run([str(airflow), "db", "migrate"], check=True, capture_output=True, timeout=600)
    return time.perf_counter() - started


def load_dag(directory: Path) -> tuple[Any, float]:
    """Write the DAG file, run it as the dag processor would; the migration's DAG, seconds."""
    dag_file = DAGS_FOLDER / "migronaut_bench_dags.py"
    dag_file.write_text(DAG_FILE.format(directory=str(directory)))
    started = time.perf_counter()
    namespace = runpy.run_path(str(dag_file))
    return namespace[dag_id_for(common.MIGRATION_NAME)], time.perf_counter() - started


def task_seconds(dag_run: Any) -> dict[str, float | None]:
    """Each task instance's duration (start to end, deferrals included), by task[map index]."""
    out: dict[str, float | None] = {}
    for ti in dag_run.get_task_instances():
        key = ti.task_id if ti.map_index < 0 else f"{ti.task_id}[{ti.map_index}]"
        if ti.start_date and ti.end_date:
            out[key] = (ti.end_date - ti.start_date).total_seconds()
        else:
            out[key] = None
    return out


def sensor_reason(dag_run: Any) -> Any:
    """What ``wait_for_lanes`` returned (why waiting ended), from its XCom."""
    with create_session() as session:
        row = (
            session.query(XComModel)
            .filter_by(
                dag_id=dag_run.dag_id,
                run_id=dag_run.run_id,
                task_id="wait_for_lanes",
                map_index=-1,
                key="return_value",
            )
            .one_or_none()
        )
        return None if row is None else XComModel.deserialize_value(row)


def run_airflow(uri: str, db: Database[dict[str, Any]], count: int) -> dict[str, Any]:
    directory = common.migrations_dir()
    os.environ["AIRFLOW_CONN_MIGRONAUT_DEFAULT"] = airflow_connection(uri, db.name)
    with common.kit(uri, db.name, directory) as k:
        k.runs.up()
        dag, parse_seconds = load_dag(directory)
        runs: list[dict[str, Any]] = []
        started = time.perf_counter()
        status: dict[str, Any] | None = None
        for _ in range(MAX_DAG_RUNS):
            run_started = time.perf_counter()
            dag_run = dag.test()
            runs.append(
                {
                    "state": str(dag_run.state),
                    "seconds": time.perf_counter() - run_started,
                    "tasks": task_seconds(dag_run),
                    "wait_for_lanes": sensor_reason(dag_run),
                }
            )
            view = k.background.status(common.MIGRATION_NAME)
            status = None if view is None else view.to_dict()
            if status and status["status"] in ("completed", "failed", "cancelled", "paused"):
                break
        seconds = time.perf_counter() - started
    if not status or status["status"] != "completed":
        raise RuntimeError(f"the migration ended {status and status['status']!r} under Airflow")
    common.check_migrated(db, count, "airflow")
    return {
        "contender": "airflow dag.test()",
        "seconds": seconds,
        "dag_runs": len(runs),
        "runs": runs,
        "dag_parse_seconds": parse_seconds,
    }


def run_engine(uri: str, db: Database[dict[str, Any]], count: int) -> dict[str, Any]:
    directory = common.migrations_dir()
    with common.kit(uri, db.name, directory) as k:
        k.runs.up()
        seconds = common.drive(k, 1)
    common.check_migrated(db, count, "engine")
    return {"contender": "run_background x1", "seconds": seconds}


def _tasks_text(tasks: dict[str, float | None]) -> str:
    return ", ".join(
        f"{key} {value:.2f}s" if value is not None else f"{key} -" for key, value in tasks.items()
    )


def breakdown(rows: list[dict[str, Any]]) -> list[str]:
    """One line per DAG run: its wall time and its tasks' durations."""
    lines = []
    for number, row in enumerate(rows, start=1):
        for index, dag_run in enumerate(row.get("runs") or [], start=1):
            tasks = _tasks_text(dag_run["tasks"])
            lines.append(
                f"run {number}, dag.test() #{index}: {dag_run['seconds']:.2f}s "
                f"({dag_run['state']}; wait_for_lanes: {dag_run.get('wait_for_lanes')}): {tasks}"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = common.parser(__doc__.splitlines()[0])
    ap.add_argument("--docs", type=common.count_arg, default=common.DEFAULT_DOCS)
    ap.add_argument(
        "--rounds", type=int, default=2, help="engine/Airflow pairs, order alternating (default 2)"
    )
    ap.add_argument(
        "--warmup-docs",
        type=int,
        default=1_000,
        help="documents of an untimed first dag.test() that pays Airflow's one-time "
        "in-process start-up (0: none; default 1000)",
    )
    args = ap.parse_args(argv)
    count = args.docs
    stdout = common.reserve_stdout()  # dag.test() logs to stdout
    common.log(f"airflow db migrate in {AIRFLOW_HOME}")
    migrate_seconds = migrate_metadata_db()
    rows: list[dict[str, Any]] = []
    warmup: dict[str, Any] | None = None
    with common.mongo_server(args) as uri, common.connect(uri) as client:
        version = common.server_version(client)
        if args.warmup_docs:
            db = common.fresh_db(client, "airflow_warmup")
            common.seed(db, args.warmup_docs)
            common.log(f"warm-up: the first dag.test() of this process, {args.warmup_docs:,} docs")
            warmup = run_airflow(uri, db, args.warmup_docs)
            common.log(f"warm-up: {warmup['seconds']:.1f}s")
            client.drop_database(db.name)
        order: list[str] = []
        for index in range(args.rounds):
            pair = ["engine", "airflow"]
            order += pair if index % 2 == 0 else pair[::-1]
        for index, which in enumerate(order):
            db = common.fresh_db(client, f"airflow_{index}")
            seeded = common.seed(db, count)
            common.log(f"{which}: seeded {count:,} documents in {seeded:.1f}s; running")
            row = run_airflow(uri, db, count) if which == "airflow" else run_engine(uri, db, count)
            row["round"] = index // 2
            row["docs_per_s"] = count / row["seconds"]
            common.log(f"{which}: {row['seconds']:.1f}s")
            rows.append(row)
            client.drop_database(db.name)
    engine = [r["seconds"] for r in rows if r["contender"].startswith("run_background")]
    airflow = [r["seconds"] for r in rows if r["contender"].startswith("airflow")]
    engine_mean = sum(engine) / len(engine)
    airflow_mean = sum(airflow) / len(airflow)
    per_round = []
    for index in range(args.rounds):
        seconds = {r["contender"]: r["seconds"] for r in rows if r["round"] == index}
        per_round.append(seconds["airflow dag.test()"] / seconds["run_background x1"])
    ratio_median = statistics.median(per_round)
    sensor_first = [
        i + 1
        for i, r in enumerate(rows)
        if any(run.get("wait_for_lanes") == "no-live-lease" for run in r.get("runs") or [])
    ]
    payload = {
        "benchmark": "airflow_overhead",
        "docs": count,
        "mongod": version,
        "machine": common.machine(),
        "airflow_db_migrate_seconds": migrate_seconds,
        "warmup": warmup,
        "runs": rows,
        "engine_mean_seconds": engine_mean,
        "airflow_mean_seconds": airflow_mean,
        "ratio_of_means": airflow_mean / engine_mean,
        "ratios_per_round": per_round,
        "ratio": ratio_median,
        "target_ratio": 1.25,
        "runs_where_the_sensor_waited_out_its_grace": sensor_first,
    }
    text = (
        f"airflow overhead: {count:,} documents, {args.rounds} round(s), fresh data per run\n"
        f"{common.setting(version)}\n"
        + (
            f"warm-up (not in the ratio): the process's first dag.test() migrated "
            f"{args.warmup_docs:,} documents in {warmup['seconds']:.2f}s "
            f"(wait_for_lanes: {warmup['runs'][0]['wait_for_lanes']}; "
            f"tasks: {_tasks_text(warmup['runs'][0]['tasks'])})\n"
            if warmup
            else "no warm-up: the first dag.test() pays Airflow's one-time start-up\n"
        )
        + common.table(
            ["run", "contender", "seconds", "docs/s", "DAG runs"],
            [
                [i + 1, r["contender"], r["seconds"], round(r["docs_per_s"]), r.get("dag_runs")]
                for i, r in enumerate(rows)
            ],
        )
        + "\n\n"
        + "\n".join(breakdown(rows))
        + f"\n\nmean: run_background x1 {engine_mean:.2f}s, airflow dag.test() "
        f"{airflow_mean:.2f}s (ratio of means {airflow_mean / engine_mean:.2f}x)\n"
        f"ratio per round (Airflow / engine): "
        + ", ".join(f"{r:.2f}x" for r in per_round)
        + f"; median {ratio_median:.2f}x (target <= 1.25x)"
        + (
            f"\nruns {sensor_first}: wait_for_lanes ran before the lanes and waited out its "
            "no-lease grace (dag.test() runs its trigger inline)"
            if sensor_first
            else ""
        )
    )
    common.report(args, payload, text, stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
