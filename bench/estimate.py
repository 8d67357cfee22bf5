"""``background estimate`` against the real run it estimates, side by side (issue 22 item 4).

For each size of ``--sizes`` (100k and 1M by default), on a freshly seeded copy of the
data (bench/common.py): register the migration, run ``kit.background.estimate`` (the
sample's costs, the expected duration and its range), then drive the same migration
in process with ``--lanes`` lanes (``kit.background.run``) and time it. Cases:

- ``plain``: full speed;
- ``budget``: the target's ``background_budget`` set (``--budget`` docs/s), 100k only;
- ``window``: one window open all day at half speed (rate 0.5), 100k only.

Printed per case: the estimated seconds and range, the actual seconds, actual ÷
estimate (the target: within 0.7-1.3), whether the actual fell inside the range, and
the oplog bytes estimated against those the run added to ``local.oplog.rs`` (the
collection's update entries, summed with ``$bsonSize``).

Usage: ``python -m bench.estimate [--sizes 100k,1m] [--lanes 2] [--json]``.
"""

from __future__ import annotations

import time
from typing import Any

from pymongo import MongoClient

from bench import common
from migronaut_core import Migronaut

CASES = ("plain", "budget", "window")
#: The window of the ``window`` case: all day, every day, at half speed.
HALF_SPEED_ALL_DAY = [{"from": "00:00", "to": "24:00", "rate": 0.5}]


def oplog_bytes(client: MongoClient[dict[str, Any]], namespace: str) -> tuple[int, int]:
    """(entries, bytes) of the update entries ``namespace`` has in the oplog."""
    rows = list(
        client.local["oplog.rs"].aggregate(
            [
                {"$match": {"ns": namespace, "op": "u"}},
                {
                    "$group": {
                        "_id": None,
                        "n": {"$sum": 1},
                        "bytes": {"$sum": {"$bsonSize": "$$ROOT"}},
                    }
                },
            ]
        )
    )
    return (rows[0]["n"], rows[0]["bytes"]) if rows else (0, 0)


def one_case(
    uri: str, client: MongoClient[dict[str, Any]], count: int, case: str, lanes: int, budget: int
) -> dict[str, Any]:
    db = common.fresh_db(client, f"estimate_{case}_{count}")
    seeded = common.seed(db, count)
    common.log(f"{case} {count:,}: seeded in {seeded:.1f}s; estimating")
    settings: dict[str, Any] = {}
    if case == "budget":
        settings["background_budget"] = budget
    if case == "window":
        settings["background_windows"] = HALF_SPEED_ALL_DAY
    directory = common.migrations_dir()
    with Migronaut(uri=uri, database=db.name, migrations_dir=str(directory), **settings) as k:
        k.runs.up()
        started = time.perf_counter()
        estimate = k.background.estimate(common.MIGRATION_NAME, lanes=lanes)
        estimating = time.perf_counter() - started
        common.log(
            f"{case} {count:,}: estimated {estimate.eta.seconds}s in {estimating:.1f}s; running"
        )
        actual = common.drive(k, lanes)
    common.check_migrated(db, count, case)
    entries, actual_oplog = oplog_bytes(client, f"{db.name}.{common.COLLECTION}")
    client.drop_database(db.name)
    eta = estimate.eta
    expected = eta.seconds or 0.0
    return {
        "case": case,
        "docs": count,
        "lanes": lanes,
        "estimate_seconds": expected,
        "low_seconds": eta.low_seconds,
        "high_seconds": eta.high_seconds,
        "actual_seconds": actual,
        "actual_over_estimate": common.ratio(actual, expected),
        "in_range": (eta.low_seconds or 0) <= actual <= (eta.high_seconds or 0),
        "estimate_docs_per_s": estimate.docs_per_s,
        "actual_docs_per_s": count / actual,
        "estimating_seconds": estimating,
        "transform_ms": estimate.costs.transform_ms,
        "write_ms": estimate.costs.write_ms,
        "relative_error": estimate.costs.relative_error,
        "oplog_estimate_bytes": estimate.oplog_bytes,
        "oplog_actual_bytes": actual_oplog,
        "oplog_entries": entries,
        "oplog_actual_over_estimate": common.ratio(actual_oplog, estimate.oplog_bytes or 0),
        "load_average": common.load_average(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = common.parser(__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=common.count_list_arg, default=[100_000, 1_000_000])
    ap.add_argument("--lanes", type=int, default=2, help="lanes estimated and run (default 2)")
    ap.add_argument(
        "--budget", type=int, default=2_500, help="background_budget of the budget case (docs/s)"
    )
    ap.add_argument(
        "--cases",
        type=lambda text: [part.strip() for part in text.split(",") if part.strip()],
        default=list(CASES),
        help="plain,budget,window (budget and window run at the smallest size only)",
    )
    args = ap.parse_args(argv)
    load_before = common.load_average()
    rows: list[dict[str, Any]] = []
    with common.mongo_server(args) as uri, common.connect(uri) as client:
        version = common.server_version(client)
        smallest = min(args.sizes)
        for count in args.sizes:
            for case in args.cases:
                if case != "plain" and count != smallest:
                    continue
                rows.append(one_case(uri, client, count, case, args.lanes, args.budget))
    payload = {
        "benchmark": "estimate",
        "mongod": version,
        "machine": common.machine(),
        "batch_size": common.BATCH_SIZE,
        "budget": args.budget,
        "load_average_before_after": [load_before, common.load_average()],
        "rows": rows,
    }
    header = (
        f"estimate vs actual: {args.lanes} lane(s), batches of {common.BATCH_SIZE}; "
        f"budget case {args.budget:,} docs/s; window case one all-day window at rate 0.5\n"
        f"{common.setting(version)}\n"
    )
    body = common.table(
        [
            "case",
            "docs",
            "est s",
            "range s",
            "actual s",
            "actual/est",
            "in range",
            "est docs/s",
            "docs/s",
            "oplog est MiB",
            "oplog MiB",
            "oplog act/est",
        ],
        [
            [
                r["case"],
                r["docs"],
                r["estimate_seconds"],
                f"{r['low_seconds']:.0f}-{r['high_seconds']:.0f}",
                r["actual_seconds"],
                r["actual_over_estimate"],
                "yes" if r["in_range"] else "no",
                round(r["estimate_docs_per_s"]),
                round(r["actual_docs_per_s"]),
                common.mib(r["oplog_estimate_bytes"]),
                common.mib(r["oplog_actual_bytes"]),
                r["oplog_actual_over_estimate"],
            ]
            for r in rows
        ],
    )
    text = header + body
    text += f"\nload average (1 min) before/after: {load_before:.2f} / {common.load_average():.2f}"
    common.report(args, payload, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
