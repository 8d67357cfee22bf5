"""The undo journal's cost: the same migration with ``undo = "journal"`` and without (issue 23).

For each round, on freshly seeded databases of the same size, the benchmark
migration (``common.MIGRATION_SOURCE``) is registered and driven to the end by
``kit.background.run(name, concurrency=N)`` twice: once as it is, once with
``"undo": "journal"`` (every batch's before-images written, with ``w: majority``,
before its guarded write). Which goes first alternates between rounds. The ratio
is journal on ÷ off in documents per second (target >= 0.6). Then, once, the
journaled migration's undo (``control(name, "undo")`` and the run restoring every
document) is timed against the forward run.

Usage: ``python -m bench.undo_journal [--docs 100k] [--rounds 2] [--lanes 2]``.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench import common

JOURNALED_SOURCE = common.MIGRATION_SOURCE.replace(
    '"revision_field": "rev",', '"revision_field": "rev",\n    "undo": "journal",'
)


def run_once(
    uri: str, client: Any, count: int, lanes: int, *, journal: bool, undo: bool = False
) -> dict[str, Any]:
    """Seed, register and drive one contender; docs/s (and the undo's when asked)."""
    label = "journal" if journal else "plain"
    db = common.fresh_db(client, f"undo_{label}")
    common.seed(db, count)
    source = JOURNALED_SOURCE if journal else None
    directory = common.migrations_dir(
        source=source.format(batch_size=common.BATCH_SIZE, health=common.HEALTH) if source else None
    )
    row: dict[str, Any] = {"contender": label}
    with common.kit(uri, db.name, directory) as k:
        k.runs.up()
        seconds = common.drive(k, lanes)
        common.check_migrated(db, count, label)
        row["seconds"] = seconds
        row["docs_per_second"] = count / seconds
        if journal:
            row["journal_entries"] = db["migronaut_background_undo"].count_documents({})
        if undo:
            started = time.perf_counter()
            k.background.control(common.MIGRATION_NAME, "undo")
            common.drive(k, lanes)
            row["undo_seconds"] = time.perf_counter() - started
            row["undo_docs_per_second"] = count / row["undo_seconds"]
            restored = db[common.COLLECTION].count_documents({"_v": 1, "rev": 2})
            if restored != count:
                raise RuntimeError(f"the undo restored {restored} of {count} documents")
    client.drop_database(db.name)
    common.log(f"{label}: {row['docs_per_second']:,.0f} docs/s")
    return row


def main(argv: list[str] | None = None) -> int:
    ap = common.parser(__doc__.splitlines()[0])
    ap.add_argument("--docs", type=common.count_arg, default=100_000, help="documents (100k)")
    ap.add_argument("--rounds", type=int, default=2, help="side-by-side rounds (2)")
    ap.add_argument("--lanes", type=int, default=2, help="lanes of each run (2)")
    args = ap.parse_args(argv)
    rounds: list[dict[str, Any]] = []
    with common.mongo_server(args) as uri, common.connect(uri) as client:
        version = common.server_version(client)
        for number in range(args.rounds):
            order = (False, True) if number % 2 == 0 else (True, False)
            rows = {
                journal: run_once(
                    uri,
                    client,
                    args.docs,
                    args.lanes,
                    journal=journal,
                    undo=journal and number == args.rounds - 1,
                )
                for journal in order
            }
            on, off = rows[True], rows[False]
            rounds.append(
                {
                    "round": number + 1,
                    "first": "journal" if order[0] else "plain",
                    "plain_docs_per_second": off["docs_per_second"],
                    "journal_docs_per_second": on["docs_per_second"],
                    "ratio": common.ratio(on["docs_per_second"], off["docs_per_second"]),
                    **{
                        key: on[key]
                        for key in ("undo_docs_per_second", "journal_entries")
                        if key in on
                    },
                }
            )
    ratios = [r["ratio"] for r in rounds if r["ratio"] is not None]
    undo_rate = next(
        (r["undo_docs_per_second"] for r in rounds if "undo_docs_per_second" in r), None
    )
    payload = {
        "benchmark": "undo_journal",
        "mongod": version,
        "machine": common.machine(),
        "docs": args.docs,
        "lanes": args.lanes,
        "rounds": rounds,
        "ratio_median": statistics.median(ratios),
        "target_ratio": 0.6,
        "undo_docs_per_second": undo_rate,
    }
    text = (
        f"undo journal: run_background(concurrency={args.lanes}) over {args.docs:,} docs, "
        f"journal on vs off\n{common.setting(version)}\n"
        + common.table(
            ["round", "first", "off docs/s", "on docs/s", "on / off", "undo docs/s"],
            [
                [
                    r["round"],
                    r["first"],
                    r["plain_docs_per_second"],
                    r["journal_docs_per_second"],
                    r["ratio"],
                    r.get("undo_docs_per_second"),
                ]
                for r in rounds
            ],
        )
        + f"\n\njournal on / off, median of {len(ratios)} round(s): "
        f"{payload['ratio_median']:.2f}x (target >= 0.6x)"
    )
    common.report(args, payload, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
