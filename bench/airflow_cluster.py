"""What a real Airflow deployment costs over driving a migration in process (issue 22 §6).

The same background migration, each time on a freshly seeded database, driven two
ways on one machine while one production-shaped Airflow runs
(:class:`~migronaut_dev.airflow_cluster.AirflowCluster`: PostgreSQL, Redis,
api-server, scheduler, dag-processor, triggerer, two Celery workers):

- in process: ``kit.background.run(name, concurrency=N)``;
- through the cluster: the DAG ``build_dags`` generates (its defaults, or the
  ``--slice-ms`` given), triggered over REST; its ``N`` mapped lanes run a slice,
  defer to the triggerer, and resume on whichever worker takes them.

Both are timed from the start (``run`` called, the DAG run triggered) until the
migration's status is ``completed``. The cluster stays up for the in-process runs
too, so both pay for its idle processes. Rounds alternate the order (engine first,
then Airflow first, …) so a drifting machine favours neither.

Each lane's slices come from its return value (an XCom); a lane of ``s`` slices
handed off ``s - 1`` times. The time per hand-off is the cluster's extra wall time
over the in-process run, less the DAG run's fixed start and tail (trigger to the
first lane's start, the last lane's end to completion), divided by the hand-offs of
a lane (the lanes hand off in parallel). The 1-minute load average is printed with
every run: the machine is shared.

Usage: ``python -m bench.airflow_cluster [--docs 1m] [--lanes 2] [--rounds 2]
[--slice-ms MS] [--json]``.
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pymongo.database import Database

from bench import common
from migronaut_airflow.targets import dag_id_for
from migronaut_core import Migronaut
from migronaut_dev.airflow_api import FINISHED_RUN_STATES, parse_time
from migronaut_dev.airflow_cluster import AirflowCluster
from migronaut_dev.endpoints import airflow_connection

#: The benchmark's migration, with as many partitions as lanes.
MIGRATION_SOURCE = common.MIGRATION_SOURCE.replace(
    '"revision_field": "rev",', '"revision_field": "rev",\n    "max_parallel": {lanes},'
)
#: The DAG file: the factory's DAGs for one migrations folder and database.
DAG_FILE = """\
from migronaut_airflow.dags.factory import build_dags

globals().update(build_dags({directory!r}, database={database!r}{options}))
"""
#: Seconds between two reads of the migration's status while the cluster drives it.
POLL_SECONDS = 0.25
#: The warm-up run's migration (and DAG) number.
WARMUP_INDEX = 99
#: How long one cluster run may take before the benchmark gives up on it.
RUN_TIMEOUT = 3600.0


@dataclass(frozen=True)
class Setup:
    """What every run of one benchmark shares."""

    uri: str
    lanes: int
    count: int
    cluster: AirflowCluster


def migration_name(index: int) -> str:
    """Run ``index``'s migration id: each run has a DAG (and DAG id) of its own."""
    return common.MIGRATION_NAME.replace("000000_", f"{index:06d}_")


def migration_dir(lanes: int, name: str) -> Path:
    source = MIGRATION_SOURCE.format(batch_size=common.BATCH_SIZE, lanes=lanes)
    return common.migrations_dir(name=name, source=source)


def run_engine(setup: Setup, db: Database[dict[str, Any]], index: int) -> dict[str, Any]:
    name = migration_name(index)
    with common.kit(setup.uri, db.name, migration_dir(setup.lanes, name)) as k:
        k.runs.up()
        load = common.load_average()
        seconds = common.drive(k, setup.lanes, name)
    common.check_migrated(db, setup.count, "engine")
    return {
        "contender": f"run_background x{setup.lanes}",
        "seconds": seconds,
        "load": load,
        "load_after": common.load_average(),
    }


def _install_dag(
    setup: Setup, directory: Path, database: str, index: int, slice_ms: int | None
) -> Path:
    options = f", slice_ms={slice_ms}" if slice_ms is not None else ""
    path = setup.cluster.dags_folder / f"migronaut_bench_cluster_{index}.py"
    path.write_text(DAG_FILE.format(directory=str(directory), database=database, options=options))
    return path


def run_airflow(
    setup: Setup, db: Database[dict[str, Any]], index: int, slice_ms: int | None
) -> dict[str, Any]:
    airflow = setup.cluster
    name = migration_name(index)
    directory = migration_dir(setup.lanes, name)
    dag_id = dag_id_for(name)
    with common.kit(setup.uri, db.name, directory) as k:
        k.runs.up()
        dag_file = _install_dag(setup, directory, db.name, index, slice_ms)
        try:
            airflow.wait_for_dag(dag_id, timeout=180)
            airflow.unpause(dag_id)
            load = common.load_average()
            triggered = time.time()
            started = time.perf_counter()
            airflow.trigger(dag_id, {"reason": "bench"})
            status = _wait_for_completion(k, name)
            seconds = time.perf_counter() - started
            load_after = common.load_average()
            completed = triggered + seconds
            runs = airflow.wait_until(
                lambda: _finished_runs(airflow, dag_id), 300, f"{dag_id} kept running"
            )
            lanes = _lanes(airflow, dag_id, runs)
            phases = hand_off_phases(airflow.home / "logs", dag_id)
        finally:
            airflow.request("PATCH", f"/api/v2/dags/{dag_id}", json={"is_paused": True})
            dag_file.unlink(missing_ok=True)
    if status != "completed":
        raise RuntimeError(f"the migration ended {status!r} under the cluster")
    common.check_migrated(db, setup.count, "airflow cluster")
    starts = [lane["start"] for lane in lanes if lane["start"] is not None]
    ends = [lane["end"] for lane in lanes if lane["end"] is not None]
    return {
        "contender": f"Celery cluster, {setup.lanes} lanes, {slice_label(slice_ms)}",
        "slice_ms": slice_ms,
        "seconds": seconds,
        "load": load,
        "load_after": load_after,
        "dag_runs": len(runs),
        "lanes": lanes,
        "hand_off_phases": phases,
        "start_seconds": (min(starts) - triggered) if starts else None,
        "tail_seconds": (completed - max(ends)) if ends else None,
    }


def _wait_for_completion(k: Migronaut, name: str) -> str:
    deadline = time.monotonic() + RUN_TIMEOUT
    while time.monotonic() < deadline:
        view = k.background.status(name)
        status = None if view is None else view.status
        if status in ("completed", "failed", "cancelled"):
            return str(status)
        time.sleep(POLL_SECONDS)
    raise RuntimeError(f"the migration did not complete within {RUN_TIMEOUT:.0f}s")


def _finished_runs(airflow: AirflowCluster, dag_id: str) -> list[dict[str, Any]] | None:
    runs = airflow.dag_runs(dag_id)
    return runs if runs and all(r["state"] in FINISHED_RUN_STATES for r in runs) else None


def _lanes(
    airflow: AirflowCluster, dag_id: str, runs: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Every lane task instance of the runs: its slices, host, start and end (epoch s)."""
    out = []
    for run in runs:
        run_id = run["dag_run_id"]
        for ti in airflow.task_instances(dag_id, run_id):
            if ti["task_id"] != "lane" or ti["state"] != "success":
                continue
            value = airflow.xcom(dag_id, run_id, "lane", ti["map_index"])
            start, end = parse_time(ti.get("start_date")), parse_time(ti.get("end_date"))
            out.append(
                {
                    "run": run_id,
                    "map_index": ti["map_index"],
                    "slices": int(value.get("slices") or 0) if isinstance(value, dict) else 0,
                    "outcome": value.get("outcome") if isinstance(value, dict) else None,
                    "hostname": ti.get("hostname"),
                    "start": start.timestamp() if start else None,
                    "end": end.timestamp() if end else None,
                }
            )
    return out


def _log_events(path: Path) -> list[tuple[float, str]]:
    """(epoch seconds, event) of each JSON line of a task or trigger log."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
            stamp = parse_time(entry.get("timestamp"))
        except (ValueError, AttributeError):
            continue
        if stamp is not None:
            out.append((stamp.timestamp(), str(entry.get("event", ""))))
    return out


def hand_off_phases(logs: Path, dag_id: str) -> list[dict[str, float]]:
    """Each hand-off of every lane, timed from the lanes' own task and trigger logs.

    ``restart``: from the task deferring until a worker started it again (the pause
    between slices, the triggerer, the scheduler, Celery); ``task_start``: from
    there until the task's code ran (parsing the DAG file, pre-execute). Their sum
    is the hand-off. ``to_trigger`` (deferring until the trigger fired) is in the
    restart; Airflow keeps only a lane's last trigger log, so it is known for
    the last hand-off of each lane only.
    """
    phases = []
    for log in sorted((logs / f"dag_id={dag_id}").glob("run_id=*/task_id=lane/*/attempt=*.log")):
        task = _log_events(log)
        fired = sorted(
            stamp
            for trigger in log.parent.glob(f"{log.name}.trigger.*.log")
            for stamp, event in _log_events(trigger)
            if event == "Trigger fired event"
        )
        deferred = [stamp for stamp, event in task if event.startswith("Pausing task as DEFERRED")]
        starts = [stamp for stamp, event in task if event == "::group::Pre Execute"]
        ends = [stamp for stamp, event in task if event == "::endgroup::"]
        for when in deferred:
            start = next((t for t in starts if t >= when), None)
            run = next((t for t in ends if start is not None and t >= start), None)
            if start is None or run is None:
                continue
            phase = {"restart": start - when, "task_start": run - start}
            fire = next((t for t in fired if when <= t <= start), None)
            if fire is not None:
                phase["to_trigger"] = fire - when
            phases.append(phase)
    return phases


def hand_offs(row: dict[str, Any]) -> float:
    """The mean hand-offs of a lane that worked (slices after its first)."""
    working = [lane["slices"] for lane in row["lanes"] if lane["slices"] > 0]
    return statistics.mean(s - 1 for s in working) if working else 0.0


def per_hand_off(row: dict[str, Any], engine_seconds: float) -> dict[str, float | None]:
    """Seconds per hand-off, and Airflow's own seconds in the run.

    ``gross``: the extra time over the in-process run ÷ a lane's hand-offs; ``net``:
    less the DAG run's start and tail; ``measured``: from the lanes' logs.
    ``equal_speed_ratio``: the cluster's time ÷ that time less Airflow's own (start,
    tail, hand-offs), i.e. the ratio against an in-process run whose lanes write as
    fast as the cluster's did: unlike the ratio of two runs, a load that changes
    between them does not move it.
    """
    handed = hand_offs(row)
    extra = row["seconds"] - engine_seconds
    fixed = (row["start_seconds"] or 0.0) + (row["tail_seconds"] or 0.0)
    phases = row["hand_off_phases"]

    def mean(key: str) -> float | None:
        values = [phase[key] for phase in phases if key in phase]
        return statistics.mean(values) if values else None

    restart, task_start = mean("restart"), mean("task_start")
    measured = None if restart is None or task_start is None else restart + task_start
    # Airflow's own time in the run: its fixed start and tail, and each lane's hand-offs.
    own = fixed + handed * (measured or 0.0)
    return {
        "airflow_seconds": own,
        "equal_speed_ratio": row["seconds"] / (row["seconds"] - own),
        "measured": measured,
        "restart": restart,
        "task_start": task_start,
        "to_trigger": mean("to_trigger"),
        "hand_offs_per_lane": handed,
        "gross": extra / handed if handed else None,
        "net": (extra - fixed) / handed if handed else None,
    }


def slice_label(slice_ms: int | None) -> str:
    return "default slices" if slice_ms is None else f"{slice_ms / 1000:g} s slices"


def slice_list_arg(text: str) -> list[int | None]:
    """``default,120000``: the DAG's ``slice_ms`` of each cluster contender (None: default)."""
    return [None if part.strip() == "default" else int(part) for part in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    ap = common.parser(__doc__.splitlines()[0])
    ap.add_argument("--docs", type=common.count_arg, default=1_000_000)
    ap.add_argument("--lanes", type=int, default=2, help="lanes of both contenders (default 2)")
    ap.add_argument("--rounds", type=int, default=1, help="rounds, order alternating (default 1)")
    ap.add_argument(
        "--slice-ms",
        type=slice_list_arg,
        default=[None],
        help="the DAG's slice_ms of each cluster contender, comma-separated; 'default': "
        "none given, the migration's (default: default)",
    )
    ap.add_argument(
        "--warmup-docs",
        type=int,
        default=10_000,
        help="documents of an untimed first cluster run: the workers' first tasks pay "
        "one-time imports (0: none; default 10000)",
    )
    args = ap.parse_args(argv)
    stdout = common.reserve_stdout()  # the kit logs to stdout
    root = Path(tempfile.mkdtemp(prefix="migronaut-bench-cluster-"))
    try:
        with common.mongo_server(args) as uri, common.connect(uri) as client:
            version = common.server_version(client)
            common.log(f"starting the Celery cluster in {root}")
            started = time.perf_counter()
            env = {"AIRFLOW_CONN_MIGRONAUT_DEFAULT": airflow_connection(uri, "bench_cluster")}
            with AirflowCluster(root / "cluster", root / "dags", env) as cluster:
                common.log(f"cluster up in {time.perf_counter() - started:.0f}s")
                setup = Setup(uri, args.lanes, args.docs, cluster)
                if args.warmup_docs:
                    warm_up(setup, client, args.warmup_docs)
                rows = run_rounds(setup, client, args.rounds, args.slice_ms)
            left = [proc.pid for proc in cluster.processes()]
            if left:
                common.log(f"cluster processes left behind: {left}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    payload, text = summary(args, version, rows)
    common.report(args, payload, text, stdout)
    return 0


def warm_up(setup: Setup, client: Any, count: int) -> None:
    """One untimed cluster run of ``count`` documents: what a long-lived cluster paid once."""
    db = common.fresh_db(client, "cluster_warmup")
    common.seed(db, count)
    warm = Setup(setup.uri, setup.lanes, count, setup.cluster)
    row = run_airflow(warm, db, WARMUP_INDEX, None)
    common.log(f"warm-up: {count:,} documents through the cluster in {row['seconds']:.1f}s")
    client.drop_database(db.name)


def run_rounds(
    setup: Setup, client: Any, rounds: int, slices: list[int | None]
) -> list[dict[str, Any]]:
    """Every contender once per round: the engine, then each cluster; reversed every other."""
    contenders: list[tuple[str, int | None]] = [("engine", None)]
    contenders += [("airflow", slice_ms) for slice_ms in slices]
    rows: list[dict[str, Any]] = []
    index = 0
    for round_ in range(rounds):
        for which, slice_ms in contenders if round_ % 2 == 0 else contenders[::-1]:
            db = common.fresh_db(client, f"cluster_{index}")
            seeded = common.seed(db, setup.count)
            common.log(f"{which}: seeded {setup.count:,} documents in {seeded:.1f}s; running")
            if which == "airflow":
                row = run_airflow(setup, db, index, slice_ms)
            else:
                row = run_engine(setup, db, index)
            row["round"] = round_
            row["docs_per_s"] = setup.count / row["seconds"]
            common.log(
                f"{row['contender']}: {row['seconds']:.1f}s "
                f"(load {row['load']:.1f} → {row['load_after']:.1f})"
            )
            rows.append(row)
            client.drop_database(db.name)
            index += 1
    return rows


def compare(rows: list[dict[str, Any]], rounds: int) -> list[dict[str, Any]]:
    """Each cluster run against the engine run of its round."""
    out = []
    for round_ in range(rounds):
        pair = [r for r in rows if r["round"] == round_]
        engine = next(r for r in pair if r["contender"].startswith("run_background"))
        for airflow in (r for r in pair if r["contender"].startswith("Celery")):
            out.append(
                {
                    "round": round_ + 1,
                    "slices": slice_label(airflow["slice_ms"]),
                    "engine_seconds": engine["seconds"],
                    "cluster_seconds": airflow["seconds"],
                    "ratio": airflow["seconds"] / engine["seconds"],
                    "start_seconds": airflow["start_seconds"],
                    "tail_seconds": airflow["tail_seconds"],
                    "dag_runs": airflow["dag_runs"],
                    **per_hand_off(airflow, engine["seconds"]),
                }
            )
    return out


def summary(args: Any, version: str, rows: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
    ratios = compare(rows, args.rounds)
    medians = {
        label: statistics.median(r["ratio"] for r in ratios if r["slices"] == label)
        for label in dict.fromkeys(r["slices"] for r in ratios)
    }
    payload = {
        "benchmark": "airflow_cluster",
        "docs": args.docs,
        "lanes": args.lanes,
        "mongod": version,
        "machine": common.machine(),
        "runs": rows,
        "ratios": ratios,
        "median_ratio": medians,
        "target_ratio": 1.15,
    }
    text = (
        f"airflow cluster: {args.docs:,} documents, {args.lanes} lanes, "
        f"{args.rounds} round(s), fresh data per run\n"
        f"{common.setting(version)}; Celery cluster: 2 workers, PostgreSQL, Redis\n"
        + common.table(
            ["run", "contender", "seconds", "docs/s", "load start→end", "DAG runs", "slices/lane"],
            [
                [
                    i + 1,
                    r["contender"],
                    r["seconds"],
                    round(r["docs_per_s"]),
                    f"{r['load']:.1f}→{r['load_after']:.1f}",
                    r.get("dag_runs"),
                    ", ".join(str(lane["slices"]) for lane in r.get("lanes", [])) or None,
                ]
                for i, r in enumerate(rows)
            ],
        )
        + "\n\n"
        + common.table(
            [
                "round",
                "cluster",
                "in process s",
                "cluster s",
                "cluster ÷ in process",
                "trigger→lane s",
                "lane→completed s",
                "hand-offs/lane",
                "s/hand-off",
                "s/hand-off net",
                "measured s/hand-off",
                "restart s",
                "task start s",
                "Airflow's own s",
                "ratio at equal speed",
            ],
            [
                [
                    r["round"],
                    r["slices"],
                    r["engine_seconds"],
                    r["cluster_seconds"],
                    r["ratio"],
                    r["start_seconds"],
                    r["tail_seconds"],
                    r["hand_offs_per_lane"],
                    r["gross"],
                    r["net"],
                    r["measured"],
                    r["restart"],
                    r["task_start"],
                    r["airflow_seconds"],
                    r["equal_speed_ratio"],
                ]
                for r in ratios
            ],
        )
        + "\ns/hand-off: (cluster - in process) ÷ hand-offs per lane; net: less trigger→lane "
        "and lane→completed; measured: from the lane logs, deferred → restarted on a worker "
        "(triggerer, scheduler, Celery) + task start (DAG file parse, pre-execute); Airflow's own: "
        "start + tail + hand-offs/lane x measured; ratio at equal speed: cluster s ÷ "
        "(cluster s - Airflow's own), unmoved by a load that changed between the runs\n"
        + "\n".join(
            f"median cluster ({label}) ÷ in process: {value:.2f}x (target <= 1.15x)"
            for label, value in medians.items()
        )
    )
    return payload, text


if __name__ == "__main__":
    raise SystemExit(main())
