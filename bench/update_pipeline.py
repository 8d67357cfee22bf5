"""The update-pipeline mode against one raw ``update_many``, side by side (issue 16, DESIGN.md §5).

For each size (``--sizes``, default 100k and 1M documents), every contender runs on
a freshly seeded copy of the data (its own database, dropped after it) and rewrites
every document from ``_v: 1`` to ``_v: 2`` by splitting ``name`` into ``first`` and
``last`` — on the server, except for the client ceiling:

- ``client ceiling``: :func:`bench.throughput.ceiling`, the unguarded client-side
  ``bulk_write`` of ``UpdateOne({_id}, {$set, $unset})`` in batches of 500 (the
  documents cross the wire twice, the transform runs in Python);
- ``update_many, whole``: one ``update_many({_v: 1}, pipeline)`` over the whole
  collection — the physical limit of a server-side rewrite;
- ``update_many, ranges of N``: ``_id``s read in order through the version index
  (a covered read, one cursor fetching N per round trip), then one
  ``update_many({_v: 1, _id: {$gte, $lte}}, pipeline)`` per N of them, hinted to
  ``_id`` as the engine's — a serial loop of range batches, what the engine's mode
  does without leases or checkpoints;
- ``update_many, $in of N`` (``--in-lists``, none by default): the same loop, each
  ``update_many`` naming its ids (``_id: {$in: [...]}``) as the engine's batches do;
- ``engine python xk`` (``--python-lanes``, none by default): bench's Python
  migration (:mod:`bench.throughput`'s engine rows), for the mode's gain;
- ``engine update xk``: a background migration declaring the same stages as
  ``"update"``, registered with ``up()`` and driven by
  ``run_background(name, concurrency=k)``, timed from the first coordinator step
  (planning included) to completion.

Every server-side contender applies the same stages and the stamp the engine
appends (``_v: 2``, ``rev`` incremented), and must modify every document (else the
run fails loudly: a broken run, not a slow one). Rows report docs/s, the ratio to
``update_many, whole`` and to the client ceiling, and this process's peak RSS. Then,
per size, planning — the first coordinator step, as :mod:`bench.planning` times it —
of the update-pipeline migration next to the Python one on the same data.

With more than one size, a last table compares each contender at the largest size
with itself at the smallest: its docs/s (linear time: a ratio near 1) and its peak
RSS (flat memory: a ratio near 1). ``--sizes 1m,10m --lanes 1,2 --skip
ceiling,ranges,planning`` is the 10M pass: the ceiling and the range loops would
take most of an hour there and add nothing to the scaling.

Usage: ``python -m bench.update_pipeline [--sizes 100k,1m] [--lanes 1,2,4] [--ranges 500,2000]
[--in-lists N,…] [--python-lanes K,…] [--batch-size N] [--rounds 1]
[--skip engine,planning,ceiling,ranges] [--json]``.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from pymongo import MongoClient
from pymongo.collection import Collection
from pymongo.database import Database

from bench import common, planning, throughput

UPDATE_MIGRATION_NAME = "20260101000001_bench_split_names_update"

#: The transform as update stages (on this data, the same split as ``common.split_name``).
SPLIT_STAGES: list[dict[str, Any]] = [
    {
        "$set": {
            "first": {"$arrayElemAt": [{"$split": ["$name", " "]}, 0]},
            "last": {"$arrayElemAt": [{"$split": ["$name", " "]}, 1]},
        }
    },
    {"$unset": "name"},
]
#: What the engine appends to a migration's stages: the new version, the revision bumped.
STAMP_STAGE: dict[str, Any] = {"$set": {"_v": 2, "rev": {"$add": ["$rev", 1]}}}
PIPELINE = [*SPLIT_STAGES, STAMP_STAGE]
#: Target of issue 16: the engine's mode with 1 or 2 lanes against one raw update_many.
TARGET_RATIO = 0.85
RANGE_BATCHES = [500, 2_000]
#: The index a batch's update goes through, as the engine's: left to the planner, a
#: batch may race the version index, whose key the update rewrites.
BY_ID = [("_id", 1)]
WHOLE = "update_many, whole"
CEILING = "client ceiling"


def update_source(batch_size: int | None) -> str:
    """The benchmark's update-pipeline migration file (``batch_size`` unset: the mode's default)."""
    sized = "" if batch_size is None else f'    "batch_size": {batch_size},\n'
    return (
        'description = "bench: split users.name into first and last, on the server"\n\n'
        "background = {\n"
        f'    "collection": "{common.COLLECTION}",\n'
        '    "from": 1,\n'
        '    "to": 2,\n'
        '    "revision_field": "rev",\n'
        '    "max_parallel": 4,\n'
        f"    {common.HEALTH}\n"
        f"{sized}"
        f'    "update": {SPLIT_STAGES!r},\n'
        "}\n"
    )


# -- the raw contenders --------------------------------------------------------------------


def whole(users: Collection[dict[str, Any]]) -> int:
    """One ``update_many`` over every document at version 1; documents modified."""
    return users.update_many({"_v": 1}, PIPELINE).modified_count


def ranges(users: Collection[dict[str, Any]], size: int) -> int:
    """``update_many`` per ``size`` ``_id``s read through the version index; documents modified.

    One covered cursor (``{_id: 1}`` projected, hinted to ``{_v: 1, _id: 1}``) fetches
    ``size`` ids per round trip; each range is updated before the next is fetched,
    so the cursor never reads past what was updated.
    """
    return _batched(users, size, _range)


def id_lists(users: Collection[dict[str, Any]], size: int) -> int:
    """Like :func:`ranges`, but each ``update_many`` names its ids (``$in``), as the engine's
    batches do; documents modified."""
    return _batched(users, size, _listed)


def _batched(
    users: Collection[dict[str, Any]],
    size: int,
    update: Callable[[Collection[dict[str, Any]], list[Any]], int],
) -> int:
    """Feed ``update`` the ids of the documents at version 1, ``size`` at a time, in order."""
    modified = 0
    ids: list[Any] = []
    cursor = users.find({"_v": 1}, {"_id": 1}, sort=[("_id", 1)], batch_size=size).hint(
        common.VERSION_INDEX
    )
    for doc in cursor:
        ids.append(doc["_id"])
        if len(ids) == size:
            modified += update(users, ids)
            ids.clear()
    if ids:
        modified += update(users, ids)
    return modified


def _range(users: Collection[dict[str, Any]], ids: list[Any]) -> int:
    bounds = {"$gte": ids[0], "$lte": ids[-1]}
    return users.update_many({"_v": 1, "_id": bounds}, PIPELINE, hint=BY_ID).modified_count


def _listed(users: Collection[dict[str, Any]], ids: list[Any]) -> int:
    return users.update_many({"_v": 1, "_id": {"$in": ids}}, PIPELINE, hint=BY_ID).modified_count


def raw_contenders(
    batches: Sequence[int] = RANGE_BATCHES, listed: Sequence[int] = (), *, ceiling: bool = True
) -> dict[str, Callable[[Collection[dict[str, Any]]], int]]:
    """Label -> the loop, documents written; the ceiling (unless left out) first."""
    loops: dict[str, Callable[[Collection[dict[str, Any]]], int]] = {}
    if ceiling:
        loops[CEILING] = throughput.ceiling
    loops[WHOLE] = whole
    for size in batches:
        loops[f"update_many, ranges of {size:,}"] = functools.partial(ranges, size=size)
    for size in listed:
        loops[f"update_many, $in of {size:,}"] = functools.partial(id_lists, size=size)
    return loops


def run_raw(
    db: Database[dict[str, Any]], label: str, loop: Callable[[Collection[dict[str, Any]]], int]
) -> dict[str, Any]:
    count = db[common.COLLECTION].estimated_document_count()
    with common.RssSampler() as rss:
        started = time.perf_counter()
        written = loop(db[common.COLLECTION])
        seconds = time.perf_counter() - started
    if written != count:
        raise RuntimeError(f"{label}: wrote {written} of {count} documents")
    common.check_migrated(db, count, label)
    return _row(label, count, seconds, rss)


# -- the engine ----------------------------------------------------------------------------


def run_engine(
    uri: str,
    db: Database[dict[str, Any]],
    count: int,
    lanes: int,
    batch_size: int | None,
    *,
    python: bool = False,
) -> dict[str, Any]:
    """Drive the update-pipeline migration (or, ``python``, bench's Python one) to the end."""
    if python:
        label, name = f"engine python x{lanes}", common.MIGRATION_NAME
        directory = common.migrations_dir()
    else:
        label, name = f"engine update x{lanes}", UPDATE_MIGRATION_NAME
        directory = common.migrations_dir(name=name, source=update_source(batch_size))
    with common.kit(uri, db.name, directory) as k:
        k.runs.up()
        with common.RssSampler() as rss:
            seconds = common.drive(k, lanes, name)
        view = k.background.status(name)
        status = {} if view is None else view.to_dict()
        partitions = len(k.background.partitions(name))
    common.check_migrated(db, count, label)
    state = db["migronaut_background"].find_one({"_id": name}) or {}
    row = _row(label, count, seconds, rss)
    row["migrated"] = (status.get("totals") or {}).get("migrated")
    row["partitions"] = partitions
    row["mode"] = state.get("mode")
    row["batch_size"] = (state.get("spec") or {}).get("batch_size")
    if row["migrated"] != count:
        raise RuntimeError(f"{label}: the totals say {row['migrated']} migrated of {count}")
    return row


def _row(label: str, docs: int, seconds: float, rss: common.RssSampler) -> dict[str, Any]:
    return {
        "contender": label,
        "docs": docs,
        "seconds": seconds,
        "docs_per_s": docs / seconds,
        "peak_rss_mib": common.mib(rss.peak),
        "rss_growth_mib": common.mib((rss.peak or 0) - (rss.baseline or 0)),
    }


# -- planning ------------------------------------------------------------------------------


def plan_both(
    uri: str, client: MongoClient[dict[str, Any]], count: int, repeat: int
) -> dict[str, Any]:
    """The first coordinator step of the Python and the update-pipeline migration, same data."""
    db = common.fresh_db(client, "update_pipeline_planning")
    common.seed(db, count)
    files = {
        "python": (common.migrations_dir(), common.MIGRATION_NAME),
        "update": (
            common.migrations_dir(name=UPDATE_MIGRATION_NAME, source=update_source(None)),
            UPDATE_MIGRATION_NAME,
        ),
    }
    row: dict[str, Any] = {"docs": count}
    for mode, (directory, name) in files.items():
        plans = [planning.plan_once(uri, db, directory, name) for _ in range(repeat)]
        row[f"{mode}_ms"] = statistics.median(p["seconds"] for p in plans) * 1000
        row[f"{mode}_partitions"] = plans[0]["partitions"]
    row["ratio"] = common.ratio(row["update_ms"], row["python_ms"])
    client.drop_database(db.name)
    common.log(
        f"{count:,} docs: planning python {row['python_ms']:.0f} ms, "
        f"update {row['update_ms']:.0f} ms"
    )
    return row


# -- one size ------------------------------------------------------------------------------


def _raw(args: argparse.Namespace) -> dict[str, Callable[[Collection[dict[str, Any]]], int]]:
    batches = [] if "ranges" in args.skip else args.ranges
    return raw_contenders(batches, args.in_lists, ceiling="ceiling" not in args.skip)


def contenders(args: argparse.Namespace) -> list[str]:
    labels = list(_raw(args))
    if "engine" not in args.skip:
        labels += [f"engine update x{k}" for k in args.lanes]
        labels += [f"engine python x{k}" for k in args.python_lanes]
    return labels


def one_round(
    uri: str,
    client: MongoClient[dict[str, Any]],
    order: list[str],
    count: int,
    args: argparse.Namespace,
) -> dict[str, dict[str, Any]]:
    """Every contender once at ``count`` documents, each on a freshly seeded database."""
    loops = _raw(args)
    rows: dict[str, dict[str, Any]] = {}
    for label in order:
        db = common.fresh_db(client, "update_pipeline")
        seeded = common.seed(db, count)
        common.log(f"{label}: seeded {count:,} documents in {seeded:.1f}s; running")
        if label in loops:
            row = run_raw(db, label, loops[label])
        else:
            lanes = int(label.rsplit("x", 1)[1])
            python = label.startswith("engine python")
            row = run_engine(uri, db, count, lanes, args.batch_size, python=python)
        common.log(f"{label}: {row['docs_per_s']:,.0f} docs/s")
        rows[label] = row
        client.drop_database(db.name)
    ceiling = rows.get(CEILING)
    for row in rows.values():
        row["ratio_to_update_many"] = common.ratio(row["docs_per_s"], rows[WHOLE]["docs_per_s"])
        row["ratio_to_ceiling"] = (
            None if ceiling is None else common.ratio(row["docs_per_s"], ceiling["docs_per_s"])
        )
    return rows


def measure(
    uri: str, client: MongoClient[dict[str, Any]], count: int, args: argparse.Namespace
) -> dict[str, Any]:
    """Every contender ``--rounds`` times (order reversed every other round); medians."""
    labels = contenders(args)
    rounds = []
    for index in range(max(1, args.rounds)):
        order = labels if index % 2 == 0 else labels[::-1]
        common.log(f"{count:,} docs: round {index + 1} of {max(1, args.rounds)}")
        rounds.append(one_round(uri, client, order, count, args))
    rows = []
    for label in labels:
        runs = [r[label] for r in rounds]
        rows.append(
            {
                **runs[0],
                "seconds": statistics.median(run["seconds"] for run in runs),
                "docs_per_s": statistics.median(run["docs_per_s"] for run in runs),
                "ratio_to_update_many": statistics.median(
                    run["ratio_to_update_many"] for run in runs
                ),
                "ratio_to_ceiling": _median_or_none([run["ratio_to_ceiling"] for run in runs]),
                "peak_rss_mib": max(run["peak_rss_mib"] or 0 for run in runs),
                "rss_growth_mib": max(run["rss_growth_mib"] or 0 for run in runs),
                "runs": runs,
            }
        )
    return {"docs": count, "rounds": len(rounds), "contenders": rows}


def _median_or_none(values: list[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return statistics.median(known) if known else None


def scaling(sizes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per contender run at the smallest and the largest size: how its rate and memory grew.

    Linear time is a ``docs/s`` ratio near 1 (the rate does not fall with size);
    flat memory is a peak RSS ratio near 1 (nothing held grows with size). A row's
    peak is the process's, so it includes what an earlier contender left (the
    ceiling's cursor); ``rss_growth_mib`` is what the run itself added.
    """
    if len(sizes) < 2:
        return []
    small, large = min(sizes, key=lambda s: s["docs"]), max(sizes, key=lambda s: s["docs"])
    before = {row["contender"]: row for row in small["contenders"]}
    rows = []
    for row in large["contenders"]:
        base = before.get(row["contender"])
        if base is None:
            continue
        rows.append(
            {
                "contender": row["contender"],
                "docs": [base["docs"], row["docs"]],
                "docs_per_s": [base["docs_per_s"], row["docs_per_s"]],
                "rate_ratio": common.ratio(row["docs_per_s"], base["docs_per_s"]),
                "peak_rss_mib": [base["peak_rss_mib"], row["peak_rss_mib"]],
                "rss_ratio": common.ratio(row["peak_rss_mib"] or 0, base["peak_rss_mib"] or 0),
                "rss_growth_mib": [base["rss_growth_mib"], row["rss_growth_mib"]],
            }
        )
    return rows


def best_engine_ratio(size: dict[str, Any], lanes: tuple[int, ...] = (1, 2)) -> float | None:
    """The best ratio to ``update_many, whole`` of the engine with 1 or 2 lanes (the target's)."""
    ratios = [
        row["ratio_to_update_many"]
        for row in size["contenders"]
        if row["contender"] in {f"engine update x{k}" for k in lanes}
    ]
    return max(ratios) if ratios else None


# -- the command ---------------------------------------------------------------------------


def _skips(text: str) -> list[str]:
    skips = [part.strip() for part in text.split(",") if part.strip()]
    unknown = set(skips) - {"engine", "planning", "ceiling", "ranges"}
    if unknown:
        raise argparse.ArgumentTypeError(f"cannot skip {', '.join(sorted(unknown))}")
    return skips


def main(argv: list[str] | None = None) -> int:
    ap = common.parser(__doc__.splitlines()[0])
    ap.add_argument(
        "--sizes",
        type=common.count_list_arg,
        default=[100_000, 1_000_000],
        help="collection sizes, a,b (default 100k,1m)",
    )
    ap.add_argument(
        "--lanes", type=common.count_list_arg, default=[1, 2, 4], help="engine lane counts"
    )
    ap.add_argument(
        "--python-lanes",
        type=common.count_list_arg,
        default=[],
        help="also drive bench's Python migration with these lane counts (default none)",
    )
    ap.add_argument(
        "--ranges",
        type=common.count_list_arg,
        default=RANGE_BATCHES,
        help="batch sizes of the raw range loops (default 500,2000)",
    )
    ap.add_argument(
        "--in-lists",
        type=common.count_list_arg,
        default=[],
        help="batch sizes of raw loops naming their ids ($in), as the engine does (default none)",
    )
    ap.add_argument(
        "--batch-size",
        type=common.count_arg,
        default=None,
        help="the engine's batch size (default: the update mode's own)",
    )
    ap.add_argument("--rounds", type=int, default=1, help="rounds per size (default 1)")
    ap.add_argument("--repeat", type=int, default=3, help="plannings per mode (default 3)")
    ap.add_argument(
        "--skip",
        type=_skips,
        default=[],
        help="leave out any of engine, planning, ceiling, ranges (a,b)",
    )
    args = ap.parse_args(argv)
    load_before = common.load_average()
    with common.mongo_server(args) as uri, common.connect(uri) as client:
        version = common.server_version(client)
        sizes = [measure(uri, client, count, args) for count in args.sizes]
        plans = (
            []
            if "planning" in args.skip
            else [plan_both(uri, client, count, max(1, args.repeat)) for count in args.sizes]
        )
    for size in sizes:
        size["best_engine_ratio_1_or_2_lanes"] = best_engine_ratio(size)
    scaled = scaling(sizes)
    payload = {
        "benchmark": "update_pipeline",
        "mongod": version,
        "machine": common.machine(),
        "pipeline": PIPELINE,
        "target_ratio_to_update_many": TARGET_RATIO,
        "load_average_before_after": [load_before, common.load_average()],
        "sizes": sizes,
        "scaling": scaled,
        "planning": plans,
    }
    text = render(sizes, plans, version)
    text += render_scaling(scaled)
    text += f"\nload average (1 min) before/after: {load_before:.2f} / {common.load_average():.2f}"
    common.report(args, payload, text)
    return 0


def render(sizes: list[dict[str, Any]], plans: list[dict[str, Any]], version: str) -> str:
    parts = [
        "update pipeline: server-side rewrites side by side "
        "(medians; ratios taken within each round)",
        common.setting(version),
    ]
    for size in sizes:
        engine = [r for r in size["contenders"] if r["contender"].startswith("engine update")]
        batch = f", engine batches of {engine[0]['batch_size']:,}" if engine else ""
        parts.append(f"\n{size['docs']:,} documents, {size['rounds']} round(s){batch}")
        parts.append(
            common.table(
                [
                    "contender",
                    "seconds",
                    "docs/s",
                    "x update_many",
                    "x ceiling",
                    "partitions",
                    "peak RSS MiB",
                    "RSS +MiB",
                ],
                [
                    [
                        row["contender"],
                        row["seconds"],
                        round(row["docs_per_s"]),
                        row["ratio_to_update_many"],
                        row["ratio_to_ceiling"],
                        row.get("partitions"),
                        row["peak_rss_mib"],
                        row["rss_growth_mib"],
                    ]
                    for row in size["contenders"]
                ],
            )
        )
        best = size["best_engine_ratio_1_or_2_lanes"]
        if best is not None:
            verdict = "met" if best >= TARGET_RATIO else "missed"
            parts.append(
                f"engine with 1 or 2 lanes: best {best:.2f}x update_many, whole "
                f"(target >= {TARGET_RATIO}x: {verdict})"
            )
    if plans:
        parts.append("\nplanning (the first coordinator step, median ms)")
        parts.append(
            common.table(
                ["docs", "python ms", "update ms", "update / python", "partitions"],
                [
                    [p["docs"], p["python_ms"], p["update_ms"], p["ratio"], p["update_partitions"]]
                    for p in plans
                ],
            )
        )
    return "\n".join(parts)


def render_scaling(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    small, large = rows[0]["docs"]
    table = common.table(
        [
            "contender",
            f"docs/s at {small:,}",
            f"at {large:,}",
            "rate ratio",
            "peak RSS MiB",
            "at",
            "RSS ratio",
            "RSS +MiB",
            "at",
        ],
        [
            [
                row["contender"],
                round(row["docs_per_s"][0]),
                round(row["docs_per_s"][1]),
                row["rate_ratio"],
                row["peak_rss_mib"][0],
                row["peak_rss_mib"][1],
                row["rss_ratio"],
                row["rss_growth_mib"][0],
                row["rss_growth_mib"][1],
            ]
            for row in rows
        ],
    )
    title = f"scaling, {large:,} against {small:,} documents (1.00: linear time, flat memory)"
    return f"\n\n{title}\n{table}"


if __name__ == "__main__":
    raise SystemExit(main())
