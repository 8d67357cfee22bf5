"""Where one lane's time goes: round trips per batch and a cProfile of the engine.

On a freshly seeded database, the migration is driven by one lane *in the main
thread* (the coordinator step, then ``kit.run_background_slice`` until the lane is
done: what ``run_background(concurrency=1)`` runs in its lane thread), under
cProfile and a pymongo command listener. For comparison, the ceiling loop of
``bench.throughput`` runs under the same listener on its own fresh copy.

Prints, for each, every command sent (by name and collection) with its count per
batch and its client-side time, then the engine's top functions.

Usage: ``python -m bench.profile_engine [--docs N] [--top 25] [--json]``.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import threading
import time
from collections import defaultdict
from typing import Any

from pymongo import MongoClient, monitoring

from bench import common
from bench.throughput import ceiling
from migronaut_core import Migronaut
from migronaut_core.background.lanes.driver import LANE_DONE


class Commands(monitoring.CommandListener):
    """Counts commands and their client-side durations, by (command, collection)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active = False
        self.count: dict[tuple[str, str], int] = defaultdict(int)
        self.micros: dict[tuple[str, str], int] = defaultdict(int)
        self._pending: dict[int, tuple[str, str]] = {}

    def reset(self, active: bool) -> None:
        with self.lock:
            self.active = active
            self.count.clear()
            self.micros.clear()
            self._pending.clear()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if not self.active:
            return
        name = event.command_name
        target = event.command.get(name)
        collection = target if isinstance(target, str) else ""
        if name == "getMore":
            collection = str(event.command.get("collection", ""))
        with self.lock:
            self._pending[event.request_id] = (name, collection)

    def _done(self, event: Any) -> None:
        with self.lock:
            key = self._pending.pop(event.request_id, None)
            if key is None:
                return
            self.count[key] += 1
            self.micros[key] += event.duration_micros

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        self._done(event)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self._done(event)

    def rows(self, batches: int) -> list[dict[str, Any]]:
        out = [
            {
                "command": name,
                "collection": collection,
                "count": count,
                "per_batch": count / batches if batches else None,
                "ms": self.micros[(name, collection)] / 1000,
            }
            for (name, collection), count in self.count.items()
        ]
        return sorted(out, key=lambda row: -row["ms"])


def drive_in_main_thread(k: Migronaut) -> None:
    """Coordinator steps and one lane's slices, in this thread, until the migration is done."""
    while True:
        answer = k.coordinate_background(common.MIGRATION_NAME)
        if answer.next in ("done", "superseded"):
            if answer.status != "completed":
                raise RuntimeError(f"the migration ended {answer.status!r}")
            return
        if answer.next != "process" or answer.lanes == 0:
            time.sleep(min(answer.retry_after_ms / 1000 or 0.5, 2.0))
            continue
        while True:
            result = k.run_background_slice(common.MIGRATION_NAME)
            if result.outcome in LANE_DONE:
                break
            if result.outcome == "busy":
                time.sleep((result.retry_after_ms or 500) / 1000)


def measure_ceiling(
    client: MongoClient[dict[str, Any]], listener: Commands, count: int, batches: int
) -> tuple[float, list[dict[str, Any]]]:
    db = common.fresh_db(client, "profile_ceiling")
    common.seed(db, count)
    listener.reset(True)
    started = time.perf_counter()
    ceiling(db[common.COLLECTION])
    seconds = time.perf_counter() - started
    rows = listener.rows(batches)
    listener.reset(False)
    client.drop_database(db.name)
    return seconds, rows


def measure_engine(
    uri: str,
    client: MongoClient[dict[str, Any]],
    listener: Commands,
    count: int,
    batches: int,
    profiler: cProfile.Profile | None,
) -> tuple[float, list[dict[str, Any]]]:
    db = common.fresh_db(client, "profile_engine")
    common.seed(db, count)
    common.log(f"seeded {count:,} documents; profiling one lane")
    directory = common.migrations_dir()
    k = Migronaut(uri=uri, database=db.name, migrations_dir=str(directory), client=client)
    k.up()
    listener.reset(True)
    started = time.perf_counter()
    if profiler is None:
        drive_in_main_thread(k)
    else:
        profiler.runcall(drive_in_main_thread, k)
    seconds = time.perf_counter() - started
    listener.active = False
    rows = listener.rows(batches)
    common.check_migrated(db, count, "engine (main thread)")
    client.drop_database(db.name)
    return seconds, rows


def summarize(profiler: cProfile.Profile, top: int) -> tuple[str, list[dict[str, Any]]]:
    """pstats' listings by own time and by cumulative time; the first as rows."""
    buffer = io.StringIO()
    stats = pstats.Stats(profiler, stream=buffer)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    raw = stats.stats  # type: ignore[attr-defined]
    rows = [
        {"function": f"{path}:{line}({func})", "calls": calls, "tottime": own, "cumtime": cum}
        for (path, line, func), (_cc, calls, own, cum, _callers) in sorted(
            raw.items(), key=lambda item: -item[1][2]
        )[:top]
    ]
    return buffer.getvalue(), rows


def commands_table(rows: list[dict[str, Any]], batches: int) -> str:
    return common.table(
        ["command", "collection", "count", "per batch", "client ms", "ms/batch"],
        [
            [r["command"], r["collection"], r["count"], r["per_batch"], r["ms"], r["ms"] / batches]
            for r in rows
        ],
    )


def summary_line(label: str, seconds: float, count: int, rows: list[dict[str, Any]]) -> str:
    batches = -(-count // common.BATCH_SIZE)
    trips = sum(r["count"] for r in rows) / batches
    in_commands = sum(r["ms"] for r in rows) / 1000
    return (
        f"{label}: {seconds:.2f}s ({count / seconds:,.0f} docs/s), {trips:.2f} round trips "
        f"per batch, {in_commands:.2f}s in commands, {seconds - in_commands:.2f}s in Python\n"
    )


def main(argv: list[str] | None = None) -> int:
    ap = common.parser(__doc__.splitlines()[0])
    ap.add_argument("--docs", type=common.count_arg, default=common.DEFAULT_DOCS)
    ap.add_argument("--top", type=int, default=25, help="functions to list (default 25)")
    ap.add_argument("--no-profile", action="store_true", help="commands only, no cProfile")
    args = ap.parse_args(argv)
    count = args.docs
    batches = -(-count // common.BATCH_SIZE)
    listener = Commands()
    profiler = None if args.no_profile else cProfile.Profile()
    with common.mongo_server(args) as uri:
        client: MongoClient[dict[str, Any]] = MongoClient(
            uri, appname="migronaut-bench", tz_aware=True, event_listeners=[listener]
        )
        with client:
            version = common.server_version(client)
            ceiling_seconds, ceiling_rows = measure_ceiling(client, listener, count, batches)
            engine_seconds, engine_rows = measure_engine(
                uri, client, listener, count, batches, profiler
            )
    stats_text, top = summarize(profiler, args.top) if profiler is not None else ("", [])
    payload = {
        "benchmark": "profile_engine",
        "docs": count,
        "batches": batches,
        "mongod": version,
        "machine": common.machine(),
        "ceiling": {"seconds": ceiling_seconds, "commands": ceiling_rows},
        "engine": {
            "seconds": engine_seconds,
            "profiled": profiler is not None,
            "commands": engine_rows,
            "top_tottime": top,
        },
    }
    engine_label = "engine, one lane in the main thread" + (
        " under cProfile" if profiler is not None else ""
    )
    text = (
        f"profile: {count:,} documents, {batches:,} batches of {common.BATCH_SIZE}\n"
        f"{common.setting(version)}\n\n"
        + summary_line("ceiling", ceiling_seconds, count, ceiling_rows)
        + commands_table(ceiling_rows, batches)
        + "\n\n"
        + summary_line(engine_label, engine_seconds, count, engine_rows)
        + commands_table(engine_rows, batches)
        + ("\n\n" + stats_text if stats_text else "")
    )
    common.report(args, payload, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
