"""Where one lane's time goes: round trips per batch and a cProfile of the engine.

On a freshly seeded database, the migration is driven by one lane *in the main
thread* (the coordinator step, then ``kit.background.run_slice`` until the lane is
done: what ``run_background(concurrency=1)`` runs in its lane thread), under
cProfile and a pymongo command listener. For comparison, the ceiling loop of
``bench.throughput`` runs under the same listener on its own fresh copy.

Prints, for each, every command sent (by name and collection) with its count per
batch and its client-side time, then the engine's top functions.

``--update`` profiles the update-pipeline migration of :mod:`bench.update_pipeline`
instead, next to its raw loop of ``update_many`` over ``_id`` ranges of the engine's
batch size (2,000 by default; ``--batch-size``) rather than the client ceiling.

Usage: ``python -m bench.profile_engine [--docs N] [--top 25] [--update] [--json]``.
"""

from __future__ import annotations

import cProfile
import functools
import io
import pstats
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from pymongo import MongoClient, monitoring
from pymongo.collection import Collection

from bench import common, update_pipeline
from bench.throughput import ceiling
from migronaut_core import Migronaut
from migronaut_core.background.lanes.driver import LANE_DONE

#: The update mode's default batch size (the spec's, when the file sets none).
UPDATE_BATCH = 2_000


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


def drive_in_main_thread(k: Migronaut, name: str = common.MIGRATION_NAME) -> None:
    """Coordinator steps and one lane's slices, in this thread, until the migration is done."""
    while True:
        answer = k.background.coordinate(name)
        if answer.next in ("done", "superseded"):
            if answer.status != "completed":
                raise RuntimeError(f"the migration ended {answer.status!r}")
            return
        if answer.next != "process" or answer.lanes == 0:
            time.sleep(min(answer.retry_after_ms / 1000 or 0.5, 2.0))
            continue
        while True:
            result = k.background.run_slice(name)
            if result.outcome in LANE_DONE:
                break
            if result.outcome == "busy":
                time.sleep((result.retry_after_ms or 500) / 1000)


def measure_ceiling(
    client: MongoClient[dict[str, Any]],
    listener: Commands,
    count: int,
    batches: int,
    loop: Callable[[Collection[dict[str, Any]]], int] = ceiling,
) -> tuple[float, list[dict[str, Any]]]:
    db = common.fresh_db(client, "profile_ceiling")
    common.seed(db, count)
    listener.reset(True)
    started = time.perf_counter()
    loop(db[common.COLLECTION])
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
    update: bool = False,
    batch_size: int | None = None,
) -> tuple[float, list[dict[str, Any]]]:
    db = common.fresh_db(client, "profile_engine")
    common.seed(db, count)
    common.log(f"seeded {count:,} documents; profiling one lane")
    if update:
        name = update_pipeline.UPDATE_MIGRATION_NAME
        source = update_pipeline.update_source(batch_size)
        directory = common.migrations_dir(name=name, source=source)
    else:
        name, directory = common.MIGRATION_NAME, common.migrations_dir()
    k = Migronaut(uri=uri, database=db.name, migrations_dir=str(directory), client=client)
    k.runs.up()
    listener.reset(True)
    started = time.perf_counter()
    if profiler is None:
        drive_in_main_thread(k, name)
    else:
        profiler.runcall(drive_in_main_thread, k, name)
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


def summary_line(
    label: str, seconds: float, count: int, rows: list[dict[str, Any]], batch: int
) -> str:
    batches = -(-count // batch)
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
    ap.add_argument(
        "--update", action="store_true", help="the update-pipeline migration and its raw loop"
    )
    ap.add_argument(
        "--batch-size",
        type=common.count_arg,
        default=None,
        help="(--update) the engine's and the raw loop's batch size (default 2,000)",
    )
    args = ap.parse_args(argv)
    count = args.docs
    batch = (args.batch_size or UPDATE_BATCH) if args.update else common.BATCH_SIZE
    batches = -(-count // batch)
    baseline = "ceiling"
    loop: Callable[[Collection[dict[str, Any]]], int] = ceiling
    if args.update:
        baseline = f"update_many, ranges of {batch:,}"
        loop = functools.partial(update_pipeline.ranges, size=batch)
    listener = Commands()
    profiler = None if args.no_profile else cProfile.Profile()
    with common.mongo_server(args) as uri:
        client: MongoClient[dict[str, Any]] = MongoClient(
            uri, appname="migronaut-bench", tz_aware=True, event_listeners=[listener]
        )
        with client:
            version = common.server_version(client)
            ceiling_seconds, ceiling_rows = measure_ceiling(client, listener, count, batches, loop)
            engine_seconds, engine_rows = measure_engine(
                uri, client, listener, count, batches, profiler, args.update, args.batch_size
            )
    stats_text, top = summarize(profiler, args.top) if profiler is not None else ("", [])
    payload = {
        "benchmark": "profile_engine",
        "docs": count,
        "batches": batches,
        "mode": "update" if args.update else "python",
        "baseline": baseline,
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
        f"profile: {count:,} documents, {batches:,} batches of {batch}\n"
        f"{common.setting(version)}\n\n"
        + summary_line(baseline, ceiling_seconds, count, ceiling_rows, batch)
        + commands_table(ceiling_rows, batches)
        + "\n\n"
        + summary_line(engine_label, engine_seconds, count, engine_rows, batch)
        + commands_table(engine_rows, batches)
        + ("\n\n" + stats_text if stats_text else "")
    )
    common.report(args, payload, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
