"""What each way of writing a guarded batch costs, side by side (DESIGN.md §5).

The same read (a cursor in ``_id`` order), transform and batches of 500 as the
ceiling of ``bench.throughput``; only the shape of each ``UpdateOne`` changes.
Every shape but ``unguarded`` rewrites a document only while it is still at
``_v: 1`` and the revision it was read with (a concurrent writer's change makes it
a no-op), and says so through ``matched_count`` (filter) or ``modified_count``
(pipelines):

- ``unguarded``: ``{_id}`` + ``{$set, $unset}`` (the ceiling);
- ``filter``: ``{_id, _v: 1, rev}`` + ``{$set, $unset, $inc: {rev: 1}}``;
- ``filter, hint _id_``: the same, hinted to the ``_id`` index;
- ``cond per field``: ``{_id}`` + a pipeline ``$set`` whose every field is
  ``$cond: [guard, new, old]`` (``$$REMOVE`` for removed fields);
- ``replaceWith``: ``{_id}`` + ``[{$replaceWith: {$cond: [guard, {$unsetField: …
  {$mergeObjects: ["$$ROOT", {$literal: changed}]}}, "$$ROOT"]}}]`` (MongoDB 5.0+; the
  engine's write, :func:`migronaut_core.versioning.guarded_pipeline`);
- ``pipeline, no guard``: ``{_id}`` + a plain pipeline ``$set`` / ``$unset`` (what
  a pipeline costs by itself).

Each shape runs on a freshly seeded database, ``--rounds`` times (order reversed
every other round); medians, ratios taken within each round.

Usage: ``python -m bench.write_shapes [--docs N] [--rounds 2] [--json]``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from pymongo import UpdateOne
from pymongo.collection import Collection

from bench import common

Shape = Callable[[dict[str, Any], str, str], UpdateOne]


def _guard(rev: Any) -> dict[str, Any]:
    return {"$and": [{"$eq": ["$_v", 1]}, {"$eq": ["$rev", {"$literal": rev}]}]}


def unguarded(doc: dict[str, Any], first: str, last: str) -> UpdateOne:
    return UpdateOne(
        {"_id": doc["_id"]},
        {"$set": {"first": first, "last": last, "_v": 2}, "$unset": {"name": ""}},
    )


def filter_guard(doc: dict[str, Any], first: str, last: str) -> UpdateOne:
    return UpdateOne(
        {"_id": doc["_id"], "_v": 1, "rev": doc["rev"]},
        {
            "$set": {"first": first, "last": last, "_v": 2},
            "$unset": {"name": ""},
            "$inc": {"rev": 1},
        },
    )


def filter_hinted(doc: dict[str, Any], first: str, last: str) -> UpdateOne:
    return UpdateOne(
        {"_id": doc["_id"], "_v": 1, "rev": doc["rev"]},
        {
            "$set": {"first": first, "last": last, "_v": 2},
            "$unset": {"name": ""},
            "$inc": {"rev": 1},
        },
        hint="_id_",
    )


def cond_per_field(doc: dict[str, Any], first: str, last: str) -> UpdateOne:
    guard = _guard(doc["rev"])

    def when(new: Any, name: str) -> dict[str, Any]:
        return {"$cond": [guard, new, f"${name}"]}

    stage = {
        "first": when({"$literal": first}, "first"),
        "last": when({"$literal": last}, "last"),
        "_v": when({"$literal": 2}, "_v"),
        "name": when("$$REMOVE", "name"),
        "rev": when({"$add": ["$rev", 1]}, "rev"),
    }
    return UpdateOne({"_id": doc["_id"]}, [{"$set": stage}])


def replace_with(doc: dict[str, Any], first: str, last: str) -> UpdateOne:
    changed = {"first": first, "last": last, "_v": 2, "rev": doc["rev"] + 1}
    merged: dict[str, Any] = {"$mergeObjects": ["$$ROOT", {"$literal": changed}]}
    for removed in ("name",):
        merged = {"$unsetField": {"field": removed, "input": merged}}
    return UpdateOne(
        {"_id": doc["_id"]},
        [{"$replaceWith": {"$cond": [_guard(doc["rev"]), merged, "$$ROOT"]}}],
    )


def pipeline_unguarded(doc: dict[str, Any], first: str, last: str) -> UpdateOne:
    return UpdateOne(
        {"_id": doc["_id"]},
        [
            {"$set": {"first": {"$literal": first}, "last": {"$literal": last}, "_v": 2}},
            {"$unset": "name"},
        ],
    )


#: label -> (shape, whether modified_count is what tells an applied write)
SHAPES: dict[str, tuple[Shape, bool]] = {
    "unguarded": (unguarded, False),
    "filter": (filter_guard, False),
    "filter, hint _id_": (filter_hinted, False),
    "cond per field": (cond_per_field, True),
    "replaceWith": (replace_with, True),
    "pipeline, no guard": (pipeline_unguarded, True),
}


def run(users: Collection[dict[str, Any]], shape: Shape, by_modified: bool) -> float:
    """Rewrite every document with ``shape``; seconds taken."""
    ops: list[UpdateOne] = []

    def flush() -> None:
        result = users.bulk_write(ops, ordered=False)
        applied = result.modified_count if by_modified else result.matched_count
        if applied != len(ops):
            raise RuntimeError(f"{len(ops) - applied} write(s) did not apply")
        ops.clear()

    started = time.perf_counter()
    for doc in users.find({}, sort=[("_id", 1)]):
        first, last = common.split_name(doc["name"])
        ops.append(shape(doc, first, last))
        if len(ops) == common.BATCH_SIZE:
            flush()
    if ops:
        flush()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    ap = common.parser(__doc__.splitlines()[0])
    ap.add_argument("--docs", type=common.count_arg, default=common.DEFAULT_DOCS)
    ap.add_argument("--rounds", type=int, default=2, help="rounds (default 2)")
    args = ap.parse_args(argv)
    count = args.docs
    labels = list(SHAPES)
    rounds: list[dict[str, float]] = []
    with common.mongo_server(args) as uri, common.connect(uri) as client:
        version = common.server_version(client)
        for index in range(max(1, args.rounds)):
            rates: dict[str, float] = {}
            for label in labels if index % 2 == 0 else labels[::-1]:
                db = common.fresh_db(client, "write_shapes")
                common.seed(db, count)
                shape, by_modified = SHAPES[label]
                seconds = run(db[common.COLLECTION], shape, by_modified)
                common.check_migrated(db, count, label)
                rates[label] = count / seconds
                common.log(f"{label}: {rates[label]:,.0f} docs/s")
                client.drop_database(db.name)
            rounds.append(rates)
    rows: list[dict[str, Any]] = []
    for label in labels:
        runs = [r[label] for r in rounds]
        ratios = [r[label] / r["unguarded"] for r in rounds]
        rows.append(
            {
                "shape": label,
                "docs_per_s": statistics.median(runs),
                "runs": runs,
                "ratio": statistics.median(ratios),
            }
        )
    payload = {
        "benchmark": "write_shapes",
        "docs": count,
        "batch_size": common.BATCH_SIZE,
        "mongod": version,
        "machine": common.machine(),
        "shapes": rows,
    }
    text = (
        f"write shapes: {count:,} documents, batches of {common.BATCH_SIZE}, "
        f"{len(rounds)} round(s) (medians; ratios within each round)\n"
        f"{common.setting(version)}\n"
        + common.table(
            ["shape", "docs/s", "runs", "x unguarded"],
            [
                [
                    r["shape"],
                    round(r["docs_per_s"]),
                    ", ".join(f"{x:,.0f}" for x in r["runs"]),
                    r["ratio"],
                ]
                for r in rows
            ],
        )
    )
    common.report(args, payload, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
