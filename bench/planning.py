"""Planning time as the collection grows (DESIGN.md §5; target <= 2x from 100k to 1M).

Planning is the coordinator's first step after registration,
``kit.background.coordinate(name)``: it counts the documents to rewrite through
the version index — exactly up to 100,000 (``partitions.estimate_above``); past that it
estimates them from a random sample of the collection, whose matching ``_id``s
are also the split points — cuts partitions and commits them. For each size, on
a freshly seeded database, the migration is registered and planned ``--repeat``
times (the migronaut_* collections dropped and the migration registered again
in between: the data stays). The planner's reads are then timed on their own,
next to the reads it made before it estimated (a count capped at 1M and a
sample of every match).

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
from migronaut_core.background.planning.partition import random_sample_pipeline, sample_pipeline
from migronaut_core.background.spec import PartitionSettings

#: Where the planner stops counting by default.
ESTIMATE_ABOVE = PartitionSettings().estimate_above


def drop_migronaut(db: Database[dict[str, Any]]) -> None:
    for name in db.list_collection_names():
        if name.startswith("migronaut_"):
            db.drop_collection(name)


def plan_once(
    uri: str, db: Database[dict[str, Any]], directory: Any, name: str = common.MIGRATION_NAME
) -> dict[str, Any]:
    """Register ``name`` afresh (migronaut's collections dropped) and time its first plan."""
    drop_migronaut(db)
    with common.kit(uri, db.name, directory) as k:
        k.runs.up()
        started = time.perf_counter()
        answer = k.background.coordinate(name)
        seconds = time.perf_counter() - started
        partitions = k.background.partitions(name)
        plan = (k._runtime.store.states.get(name) or {}).get("plan") or {}
    if answer.next != "process":
        raise RuntimeError(f"the first coordinator step answered {answer.next!r}, not process")
    return {
        "seconds": seconds,
        "partitions": len(partitions),
        "lanes": answer.lanes,
        "estimate": int(plan.get("estimate") or 0),
        "approximate": bool(plan.get("approximate")),
    }


def _timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def parts(db: Database[dict[str, Any]]) -> dict[str, float]:
    """The planner's reads timed alone, now and before it estimated large passes.

    - now: the count capped at ``ESTIMATE_ABOVE + 1``; then, below the cap, a sample
      of the matches (``$match`` → ``$sample``: reads every match), past it a random
      sample of the collection (``$sample`` first: the server's random cursor);
    - before: the count capped at 1M, and always the sample of the matches.
    """
    users = db[common.COLLECTION]
    hint = dict(common.VERSION_INDEX)
    match = {"_v": 1}
    return {
        "count_seconds": _timed(
            lambda: users.count_documents(match, limit=ESTIMATE_ABOVE + 1, hint=hint)
        ),
        "random_sample_seconds": _timed(
            lambda: list(users.aggregate(random_sample_pipeline(match, 1_000)))
        ),
        "match_sample_seconds": _timed(
            lambda: list(users.aggregate(sample_pipeline(match, 1_000), hint=hint, batchSize=1_000))
        ),
        "full_count_seconds": _timed(
            lambda: users.count_documents(match, limit=1_000_000, hint=hint)
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
        "estimate": plans[0]["estimate"],
        "approximate": plans[0]["approximate"],
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
                "estimate",
                f"x {sizes[0]:,}",
                "count ms",
                "random sample ms",
                "match sample ms",
                "count<=1M ms",
            ],
            [
                [
                    r["docs"],
                    r["first_seconds"] * 1000,
                    r["median_seconds"] * 1000,
                    r["partitions"],
                    ("~" if r["approximate"] else "") + f"{r['estimate']:,}",
                    r["ratio"],
                    r["count_seconds"] * 1000,
                    r["random_sample_seconds"] * 1000,
                    r["match_sample_seconds"] * 1000,
                    r["full_count_seconds"] * 1000,
                ]
                for r in rows
            ],
        )
        + f"\n(the planner counts up to {ESTIMATE_ABOVE + 1:,}, then samples the matches below"
        " that or the collection past it; the last column is the count it made before)"
        + f"\n\nmedian planning ratio {sizes[-1]:,} / {sizes[0]:,} docs: "
        f"{rows[-1]['ratio']:.2f}x (target <= 2x)"
    )
    common.report(args, payload, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
