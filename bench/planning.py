"""Planning time as the collection grows (DESIGN.md §5; target <= 2x from 100k to 1M).

Planning is the coordinator's first step after registration,
``kit.coordinate_background(name)``: it counts the documents to rewrite (through
the version index, capped at 1M), samples their ``_id``s, cuts partitions and
commits them. For each size, on a freshly seeded database, the migration is
registered and planned ``--repeat`` times (the migronaut_* collections dropped
and the migration registered again in between: the data stays). The count and the
``$sample`` are then timed on their own, the way the planner issues them.

Usage: ``python -m bench.planning [--docs 100000,1000000 | --quick] [--json]``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from pymongo import MongoClient
from pymongo.database import Database

from bench import common
from migronaut_core.background.partition import MIN_PARTITION_DOCS, sample_pipeline


def drop_migronaut(db: Database[dict[str, Any]]) -> None:
    for name in db.list_collection_names():
        if name.startswith("migronaut_"):
            db.drop_collection(name)


def plan_once(uri: str, db: Database[dict[str, Any]], directory: Any) -> dict[str, Any]:
    drop_migronaut(db)
    with common.kit(uri, db.name, directory) as k:
        k.up()
        started = time.perf_counter()
        answer = k.coordinate_background(common.MIGRATION_NAME)
        seconds = time.perf_counter() - started
        partitions = k.background_partitions(common.MIGRATION_NAME)
    if answer.next != "process":
        raise RuntimeError(f"the first coordinator step answered {answer.next!r}, not process")
    return {"seconds": seconds, "partitions": len(partitions), "lanes": answer.lanes}


def _timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def parts(db: Database[dict[str, Any]]) -> dict[str, float]:
    """The planner's two reads timed alone, and two cheaper forms of each for comparison.

    - the count as planned (capped at 1M) and capped at what the partition budget
      can use (16 partitions x 1,000 documents, + 1);
    - the sample as planned (``$match`` then ``$sample``: reads every match) and
      ``$sample`` first (the server's random cursor), filtered after.
    """
    users = db[common.COLLECTION]
    hint = dict(common.VERSION_INDEX)
    match = {"_v": 1}
    budget_cap = 16 * MIN_PARTITION_DOCS + 1
    planned = sample_pipeline(match, 1_000)  # [$match, $sample, $project, $sort]
    sample_first = [planned[1], planned[0], *planned[2:]]
    return {
        "count_seconds": _timed(lambda: users.count_documents(match, limit=1_000_000, hint=hint)),
        "sample_seconds": _timed(
            lambda: list(users.aggregate(sample_pipeline(match, 1_000), hint=hint, batchSize=1_000))
        ),
        "count_budget_cap_seconds": _timed(
            lambda: users.count_documents(match, limit=budget_cap, hint=hint)
        ),
        "sample_first_seconds": _timed(
            lambda: list(users.aggregate(sample_first, batchSize=1_000))
        ),
    }


def measure(
    uri: str, client: MongoClient[dict[str, Any]], count: int, repeat: int
) -> dict[str, Any]:
    db = common.fresh_db(client, f"planning_{count}")
    seeded = common.seed(db, count)
    common.log(f"{count:,} docs: seeded in {seeded:.1f}s; planning {repeat} time(s)")
    directory = common.migrations_dir()
    plans = [plan_once(uri, db, directory) for _ in range(repeat)]
    times = [p["seconds"] for p in plans]
    row = {
        "docs": count,
        "first_seconds": times[0],
        "median_seconds": statistics.median(times),
        "all_seconds": times,
        "partitions": plans[0]["partitions"],
        **parts(db),
    }
    client.drop_database(db.name)
    common.log(f"{count:,} docs: planning median {row['median_seconds'] * 1000:.0f} ms")
    return row


def main(argv: list[str] | None = None) -> int:
    ap = common.parser(__doc__.splitlines()[0])
    ap.add_argument(
        "--docs", type=common.count_list_arg, default=[100_000, 1_000_000], help="sizes, a,b"
    )
    ap.add_argument("--quick", action="store_true", help="10k and 100k documents")
    ap.add_argument("--repeat", type=int, default=3, help="plannings per size (default 3)")
    args = ap.parse_args(argv)
    sizes = [10_000, 100_000] if args.quick else args.docs
    with common.mongo_server(args) as uri, common.connect(uri) as client:
        version = common.server_version(client)
        rows = [measure(uri, client, count, max(1, args.repeat)) for count in sizes]
    base = rows[0]["median_seconds"]
    for row in rows:
        row["ratio"] = common.ratio(row["median_seconds"], base)
    payload = {
        "benchmark": "planning",
        "mongod": version,
        "machine": common.machine(),
        "rows": rows,
        "ratio": rows[-1]["ratio"],
        "target_ratio": 2.0,
    }
    text = (
        f"planning (the first coordinator step), {args.repeat} plan(s) per size\n"
        f"{common.setting(version)}\n"
        + common.table(
            [
                "docs",
                "first ms",
                "median ms",
                "partitions",
                "count ms",
                "sample ms",
                f"x {sizes[0]:,}",
                "count<=16001 ms",
                "$sample-first ms",
            ],
            [
                [
                    r["docs"],
                    r["first_seconds"] * 1000,
                    r["median_seconds"] * 1000,
                    r["partitions"],
                    r["count_seconds"] * 1000,
                    r["sample_seconds"] * 1000,
                    r["ratio"],
                    r["count_budget_cap_seconds"] * 1000,
                    r["sample_first_seconds"] * 1000,
                ]
                for r in rows
            ],
        )
        + "\n(the last two columns time cheaper forms of the count and the sample alone, "
        "for comparison: see the docstring)"
        + f"\n\nmedian planning ratio {sizes[-1]:,} / {sizes[0]:,} docs: "
        f"{rows[-1]['ratio']:.2f}x (target <= 2x)"
    )
    common.report(args, payload, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
