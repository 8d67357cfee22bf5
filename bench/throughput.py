"""Documents/second of the engine against hand-written loops, side by side (DESIGN.md §5).

Contenders, each on a freshly seeded copy of the data (its own database, dropped
after it), reading in ``_id`` order and applying the same transform:

- ``ceiling``: unguarded ``bulk_write`` of ``UpdateOne({_id}, {$set, $unset})``,
  batches of 500, one cursor;
- ``guarded ceiling``: the same bulk with the engine's write shape: the filter
  ``{_id, _v: 1, rev}`` and ``$inc: {rev: 1}``;
- ``pipeline-guarded ceiling``: updates keyed by ``_id`` alone whose pipeline
  ``$set`` applies each field only while ``_v`` and ``rev`` still match
  (``$cond``), checked through ``modified_count`` (DESIGN.md §5: about 0.72x);
- ``naive peer``: a cursor and one ``update_one`` per document (on the first
  ``--naive-docs`` documents: its rate does not depend on the collection's size);
- ``engine xk``: the background migration registered with ``up()`` and driven by
  ``run_background(name, concurrency=k)``, timed from the first coordinator step
  (planning included) to completion, with the process's peak RSS.

Usage: ``python -m bench.throughput [--docs N] [--json]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

from pymongo import MongoClient, UpdateOne
from pymongo.collection import Collection
from pymongo.database import Database

from bench import common


def ceiling(users: Collection[dict[str, Any]], limit: int | None = None) -> int:
    """Unguarded bulk updates by ``_id``; documents written."""
    return _bulk(users, guarded=False)


def guarded_ceiling(users: Collection[dict[str, Any]], limit: int | None = None) -> int:
    """Bulk updates guarded on ``_id``, version and revision; documents written."""
    return _bulk(users, guarded=True)


def pipeline_guarded_ceiling(users: Collection[dict[str, Any]], limit: int | None = None) -> int:
    """Bulk updates by ``_id`` alone, the guard inside a pipeline; documents written."""
    return _bulk(users, guarded="pipeline")


def _bulk(users: Collection[dict[str, Any]], *, guarded: bool | str) -> int:
    written = 0
    ops: list[UpdateOne] = []

    def flush() -> None:
        nonlocal written
        result = users.bulk_write(ops, ordered=False)
        applied = result.modified_count if guarded == "pipeline" else result.matched_count
        if applied != len(ops):
            raise RuntimeError(f"{len(ops) - applied} guarded update(s) did not apply")
        written += len(ops)
        ops.clear()

    for doc in users.find({}, sort=[("_id", 1)]):
        first, last = common.split_name(doc["name"])
        if guarded == "pipeline":
            ops.append(UpdateOne({"_id": doc["_id"]}, _guarded_stage(first, last, doc["rev"])))
        elif guarded:
            ops.append(
                UpdateOne(
                    {"_id": doc["_id"], "_v": 1, "rev": doc["rev"]},
                    {
                        "$set": {"first": first, "last": last, "_v": 2},
                        "$unset": {"name": ""},
                        "$inc": {"rev": 1},
                    },
                )
            )
        else:
            ops.append(
                UpdateOne(
                    {"_id": doc["_id"]},
                    {"$set": {"first": first, "last": last, "_v": 2}, "$unset": {"name": ""}},
                )
            )
        if len(ops) == common.BATCH_SIZE:
            flush()
    if ops:
        flush()
    return written


def _guarded_stage(first: str, last: str, rev: int) -> list[dict[str, Any]]:
    """One pipeline ``$set``: every field changes only while ``_v == 1`` and ``rev`` holds."""
    guard = {"$and": [{"$eq": ["$_v", 1]}, {"$eq": ["$rev", {"$literal": rev}]}]}

    def when(new: Any, name: str) -> dict[str, Any]:
        return {"$cond": [guard, new, f"${name}"]}

    return [
        {
            "$set": {
                "first": when({"$literal": first}, "first"),
                "last": when({"$literal": last}, "last"),
                "_v": when({"$literal": 2}, "_v"),
                "name": when("$$REMOVE", "name"),
                "rev": when({"$add": ["$rev", 1]}, "rev"),
            }
        }
    ]


def naive(users: Collection[dict[str, Any]], limit: int | None = None) -> int:
    """One ``update_one`` per document read; documents written."""
    written = 0
    for doc in users.find({}, sort=[("_id", 1)], limit=limit or 0):
        first, last = common.split_name(doc["name"])
        users.update_one(
            {"_id": doc["_id"]},
            {"$set": {"first": first, "last": last, "_v": 2}, "$unset": {"name": ""}},
        )
        written += 1
    return written


LOOPS = {
    "ceiling": ceiling,
    "guarded ceiling": guarded_ceiling,
    "pipeline-guarded ceiling": pipeline_guarded_ceiling,
    "naive peer": naive,
}


def run_loop(db: Database[dict[str, Any]], label: str, limit: int | None) -> dict[str, Any]:
    with common.RssSampler() as rss, common.CpuMeter(db.client) as cpu:
        started = time.perf_counter()
        written = LOOPS[label](db[common.COLLECTION], limit)
        seconds = time.perf_counter() - started
    if limit is None:
        common.check_migrated(db, written, label)
    return _row(label, written, seconds, rss, cpu)


def run_engine(
    uri: str, db: Database[dict[str, Any]], count: int, concurrency: int
) -> dict[str, Any]:
    directory = common.migrations_dir()
    label = f"engine x{concurrency}"
    with common.kit(uri, db.name, directory) as k:
        k.runs.up()
        with common.RssSampler() as rss, common.CpuMeter(db.client) as cpu:
            seconds = common.drive(k, concurrency)
        view = k.background.status(common.MIGRATION_NAME)
        status = {} if view is None else view.to_dict()
        partitions = len(k.background.partitions(common.MIGRATION_NAME))
    common.check_migrated(db, count, label)
    row = _row(label, count, seconds, rss, cpu)
    row["migrated"] = (status.get("totals") or {}).get("migrated")
    row["partitions"] = partitions
    return row


def _row(
    label: str, docs: int, seconds: float, rss: common.RssSampler, cpu: common.CpuMeter
) -> dict[str, Any]:
    cores = os.cpu_count() or 1
    busy = None if cpu.server_s is None else (cpu.client_s + cpu.server_s) / (seconds * cores)
    return {
        "contender": label,
        "docs": docs,
        "seconds": seconds,
        "docs_per_s": docs / seconds,
        "peak_rss_mib": common.mib(rss.peak),
        "rss_growth_mib": common.mib((rss.peak or 0) - (rss.baseline or 0)),
        **cpu.per_doc_us(docs),
        # The share of the machine's cores both sides kept busy: near 1, CPU-bound.
        "cpu_busy": busy,
    }


def contenders(args: argparse.Namespace) -> list[tuple[str, int | None]]:
    """(label, lanes for the engine / documents for the naive peer / None); the ceiling first."""
    wanted = set(args.skip)
    plan: list[tuple[str, int | None]] = [("ceiling", None)]
    if "guarded" not in wanted:
        plan.append(("guarded ceiling", None))
    if "pipeline" not in wanted:
        plan.append(("pipeline-guarded ceiling", None))
    if "naive" not in wanted:
        plan.append(("naive peer", min(args.docs, args.naive_docs)))
    return plan + [(f"engine x{k}", k) for k in args.lanes]


def one_round(
    uri: str,
    client: MongoClient[dict[str, Any]],
    plan: list[tuple[str, int | None]],
    count: int,
    seeding: list[float],
) -> dict[str, dict[str, Any]]:
    """Every contender once, each on a freshly seeded database; rows by label."""
    rows: dict[str, dict[str, Any]] = {}
    for label, extra in plan:
        db = common.fresh_db(client, "throughput")
        seeding.append(common.seed(db, count))
        common.log(f"{label}: seeded {count:,} documents in {seeding[-1]:.1f}s; running")
        if label.startswith("engine"):
            assert extra is not None
            row = run_engine(uri, db, count, extra)
        else:
            row = run_loop(db, label, extra if label == "naive peer" else None)
        common.log(f"{label}: {row['docs_per_s']:,.0f} docs/s")
        rows[label] = row
        client.drop_database(db.name)
    ceiling_cpu = rows["ceiling"]["cpu_us_per_doc"]
    for row in rows.values():
        row["ratio_to_ceiling"] = common.ratio(row["docs_per_s"], rows["ceiling"]["docs_per_s"])
        # What the rate could reach at most against the ceiling were both CPU-bound:
        # the ceiling's CPU per document over this contender's.
        cpu = row["cpu_us_per_doc"]
        row["cpu_bound_ratio"] = None if not cpu or ceiling_cpu is None else ceiling_cpu / cpu
    return rows


_CPU_KEYS = (
    "client_cpu_us_per_doc",
    "server_cpu_us_per_doc",
    "cpu_us_per_doc",
    "cpu_busy",
    "cpu_bound_ratio",
)


def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [run[key] for run in runs if run.get(key) is not None]
    return statistics.median(values) if values else None


def summarize(
    plan: list[tuple[str, int | None]], rounds: list[dict[str, dict[str, Any]]]
) -> list[dict[str, Any]]:
    """Per contender: medians over rounds (ratios taken within each round), spread, peak RSS."""
    out = []
    for label, _ in plan:
        runs = [r[label] for r in rounds]
        rates = [run["docs_per_s"] for run in runs]
        out.append(
            {
                "contender": label,
                "docs": runs[0]["docs"],
                "seconds": statistics.median(run["seconds"] for run in runs),
                "docs_per_s": statistics.median(rates),
                "docs_per_s_min": min(rates),
                "docs_per_s_max": max(rates),
                "ratio_to_ceiling": statistics.median(run["ratio_to_ceiling"] for run in runs),
                "peak_rss_mib": max(run["peak_rss_mib"] or 0 for run in runs),
                **{key: _median(runs, key) for key in _CPU_KEYS},
                "rss_growth_mib": max(run["rss_growth_mib"] or 0 for run in runs),
                "partitions": runs[0].get("partitions"),
                "runs": runs,
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = common.parser(__doc__.splitlines()[0])
    ap.add_argument("--docs", type=common.count_arg, default=common.DEFAULT_DOCS)
    ap.add_argument(
        "--naive-docs",
        type=common.count_arg,
        default=10_000,
        help="documents the naive peer rewrites (default 10k; it runs under 1k docs/s)",
    )
    ap.add_argument(
        "--lanes", type=common.count_list_arg, default=[1, 2, 4], help="engine lane counts"
    )
    ap.add_argument(
        "--skip",
        type=lambda text: [part.strip() for part in text.split(",") if part.strip()],
        default=[],
        help="leave out some of guarded,pipeline,naive (e.g. for a shorter 1M run)",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run every contender this many times, order reversed every other round; "
        "medians reported (default 1)",
    )
    args = ap.parse_args(argv)
    count = args.docs
    plan = contenders(args)
    rounds: list[dict[str, dict[str, Any]]] = []
    seeding: list[float] = []
    load_before = common.load_average()
    with common.mongo_server(args) as uri, common.connect(uri) as client:
        version = common.server_version(client)
        for index in range(max(1, args.rounds)):
            order = plan if index % 2 == 0 else plan[::-1]
            common.log(f"round {index + 1} of {max(1, args.rounds)}")
            rounds.append(one_round(uri, client, order, count, seeding))
    rows = summarize(plan, rounds)
    payload = {
        "benchmark": "throughput",
        "docs": count,
        "batch_size": common.BATCH_SIZE,
        "rounds": len(rounds),
        "mongod": version,
        "machine": common.machine(),
        "load_average_before_after": [load_before, common.load_average()],
        "reset": "a fresh database seeded per contender (bench.common.seed)",
        "seed_seconds": seeding,
        "contenders": rows,
    }
    text = table(rows, count, version, seeding, len(rounds))
    text += f"\nload average (1 min) before/after: {load_before:.2f} / {common.load_average():.2f}"
    common.report(args, payload, text)
    return 0


def table(
    rows: list[dict[str, Any]], count: int, version: str, seeding: list[float], rounds: int
) -> str:
    header = (
        f"throughput: {count:,} documents, batches of {common.BATCH_SIZE}, "
        f"{rounds} round(s) (medians; ratios taken within each round)\n"
        f"{common.setting(version)}\n"
        f"each contender on a freshly seeded database (seeding took "
        f"{min(seeding):.1f}-{max(seeding):.1f}s, not timed)\n"
    )
    body = common.table(
        [
            "contender",
            "docs",
            "seconds",
            "docs/s",
            "min-max docs/s",
            "x ceiling",
            "peak RSS MiB",
            "RSS +MiB",
            "client CPU us/doc",
            "mongod CPU us/doc",
            "cores busy",
            "x ceiling if CPU-bound",
        ],
        [
            [
                r["contender"],
                r["docs"],
                r["seconds"],
                round(r["docs_per_s"]),
                f"{r['docs_per_s_min']:,.0f}-{r['docs_per_s_max']:,.0f}",
                r["ratio_to_ceiling"],
                r["peak_rss_mib"],
                r["rss_growth_mib"],
                r["client_cpu_us_per_doc"],
                r["server_cpu_us_per_doc"],
                r["cpu_busy"],
                r["cpu_bound_ratio"],
            ]
            for r in rows
        ],
    )
    return header + body


if __name__ == "__main__":
    raise SystemExit(main())
