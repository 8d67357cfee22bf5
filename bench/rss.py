"""Peak RSS of a lane process as the collection grows (DESIGN.md §5; target <= 1.2x).

For each size, on a freshly seeded database, the migration is registered here and
driven to the end by ``kit.background.run(name, concurrency=1)`` in a child
process started only for that (``python -m bench.rss --child …``); this process
samples the child's RSS with psutil every 20 ms. A lane holds one batch at a
time, so its memory should not grow with the collection.

Usage: ``python -m bench.rss [--docs 100000,1000000 | --quick] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from bench import common

REPO = Path(__file__).resolve().parents[1]


def child(args: argparse.Namespace) -> int:
    """The lane process: drive the migration, print what it saw of itself as JSON."""
    with common.kit(args.uri, args.database, Path(args.migrations)) as k:
        k.client.admin.command("ping")
        before = psutil.Process().memory_info().rss
        seconds = common.drive(k, args.concurrency)
    print(
        json.dumps(
            {
                "rss_before_run": before,
                "seconds": seconds,
                "ru_maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            }
        )
    )
    return 0


def measure(uri: str, client: Any, count: int, concurrency: int) -> dict[str, Any]:
    db = common.fresh_db(client, f"rss_{count}")
    seeded = common.seed(db, count)
    common.log(f"{count:,} docs: seeded in {seeded:.1f}s; starting the lane process")
    directory = common.migrations_dir()
    with common.kit(uri, db.name, directory) as k:
        k.runs.up()
    command = [
        sys.executable,
        "-m",
        "bench.rss",
        "--child",
        "--uri",
        uri,
        "--database",
        db.name,
        "--migrations",
        str(directory),
        "--concurrency",
        str(concurrency),
    ]
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True)
    with common.RssSampler(process.pid) as rss:
        out, _ = process.communicate()
    wall = time.perf_counter() - started
    if process.returncode != 0:
        raise RuntimeError(f"the lane process exited {process.returncode}")
    seen = json.loads(out.strip().splitlines()[-1])
    common.check_migrated(db, count, f"lane process ({count:,} docs)")
    client.drop_database(db.name)
    row = {
        "docs": count,
        "peak_rss_mib": common.mib(rss.peak),
        "rss_before_run_mib": common.mib(seen["rss_before_run"]),
        "ru_maxrss_mib": common.mib(seen["ru_maxrss"]),
        "samples": rss.samples,
        "run_seconds": seen["seconds"],
        "process_seconds": wall,
    }
    common.log(f"{count:,} docs: peak RSS {row['peak_rss_mib']:.1f} MiB")
    return row


def main(argv: list[str] | None = None) -> int:
    ap = common.parser(__doc__.splitlines()[0])
    ap.add_argument(
        "--docs", type=common.count_list_arg, default=[100_000, 1_000_000], help="sizes, a,b"
    )
    ap.add_argument("--quick", action="store_true", help="10k and 100k documents")
    ap.add_argument("--concurrency", type=int, default=1, help="lanes in the lane process")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--database", help=argparse.SUPPRESS)
    ap.add_argument("--migrations", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args)
    sizes = [10_000, 100_000] if args.quick else args.docs
    with common.mongo_server(args) as uri, common.connect(uri) as client:
        version = common.server_version(client)
        rows = [measure(uri, client, count, args.concurrency) for count in sizes]
    base = rows[0]["peak_rss_mib"]
    for row in rows:
        row["ratio"] = common.ratio(row["peak_rss_mib"], base)
    payload = {
        "benchmark": "rss",
        "mongod": version,
        "machine": common.machine(),
        "concurrency": args.concurrency,
        "rows": rows,
        "ratio": rows[-1]["ratio"],
        "target_ratio": 1.2,
    }
    text = (
        f"lane process RSS: run_background(concurrency={args.concurrency}) in a child process\n"
        f"{common.setting(version)}\n"
        + common.table(
            ["docs", "peak RSS MiB", "before run MiB", "run s", f"x {sizes[0]:,}"],
            [
                [
                    r["docs"],
                    r["peak_rss_mib"],
                    r["rss_before_run_mib"],
                    r["run_seconds"],
                    r["ratio"],
                ]
                for r in rows
            ],
        )
        + f"\n\npeak RSS ratio {sizes[-1]:,} / {sizes[0]:,} docs: {rows[-1]['ratio']:.2f}x "
        "(target <= 1.2x)"
    )
    common.report(args, payload, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
