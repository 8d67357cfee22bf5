"""Parse time of the shipped DAG file, as Airflow's DAG processor pays it, cold and warm.

Writes a dags folder with ``dags/migronaut_dags.py`` and ``--files`` migration files
(``--background`` of them background migrations, the rest regular), then parses it
with Airflow's own ``DagBag`` in a fresh interpreter per parse (the DAG processor
and every task start parse in a new process): *cold* with an empty catalog cache,
*warm* with the cache the previous parse wrote, and *uncached* (``cache_dir = off``)
for comparison. Also times the same interpreter importing Airflow and the provider
without parsing anything, so the file's own cost shows apart from the imports.
No MongoDB is needed: building DAGs reads none.

    python -m bench.dag_parse [--files 200] [--background 100] [--rounds 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "dags" / "migronaut_dags.py"

BACKGROUND = """description = "Split the names of batch {i}"
background = {{"collection": "users_{i}", "from": 1, "to": 2, "max_parallel": 4}}


def migrate(doc, ctx):
    first, _, last = doc.pop("name").partition(" ")
    return {{**doc, "first": first, "last": last}}
"""
REGULAR = """description = "Index batch {i}"


def up(ctx):
    ctx.db["users_{i}"].create_index("email_{i}")


def down(ctx):
    ctx.db["users_{i}"].drop_index("email_{i}_1")
"""

#: Runs in a fresh interpreter: import what the DAG file imports, then time the parse.
PROBE = """
import sys, time, json
started = time.perf_counter()
from airflow.dag_processing.dagbag import DagBag
import migronaut_airflow.dags.factory
imported = time.perf_counter()
dags = 0
if sys.argv[1] == "parse":
    bag = DagBag(dag_folder=sys.argv[2])
    assert not bag.import_errors, bag.import_errors
    dags = len(bag.dag_ids)
done = time.perf_counter()
print(json.dumps({"imports": imported - started, "parse": done - imported, "dags": dags}))
"""


def write_folder(root: Path, files: int, background: int) -> Path:
    dags = root / "dags"
    migrations = dags / "migrations"
    migrations.mkdir(parents=True)
    shutil.copy(SHIPPED, dags / SHIPPED.name)
    (dags / ".airflowignore").write_text("migrations/\n")
    for i in range(files):
        body = BACKGROUND if i < background else REGULAR
        (migrations / f"2026{i:010d}_batch_{i}.py").write_text(body.format(i=i))
    return dags


def probe(mode: str, dags: Path, cache: str) -> dict[str, float]:
    env = {
        **os.environ,
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__MIGRONAUT__MIGRATIONS_DIR": str(dags / "migrations"),
        "AIRFLOW__MIGRONAUT__CACHE_DIR": cache,
        # The assets' endpoint without a connection lookup.
        "AIRFLOW__MIGRONAUT__ASSET_HOST": "mongo.internal",
        "AIRFLOW__MIGRONAUT__DATABASE": "bench",
    }
    run = subprocess.run(
        [sys.executable, "-c", PROBE, mode, str(dags)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(run.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def measure(files: int, background: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="migronaut-bench-parse-") as tmp:
        root = Path(tmp)
        dags = write_folder(root, files, background)
        results: dict[str, list[float]] = {
            "imports only": [],
            "cold": [],
            "warm": [],
            "uncached": [],
        }
        dag_count = 0
        for index in range(rounds):
            cache = root / f"cache-{index}"
            results["imports only"].append(probe("imports", dags, str(cache))["imports"])
            cold = probe("parse", dags, str(cache))
            warm = probe("parse", dags, str(cache))
            uncached = probe("parse", dags, "off")
            results["cold"].append(cold["parse"])
            results["warm"].append(warm["parse"])
            results["uncached"].append(uncached["parse"])
            dag_count = int(warm["dags"])
            print(
                f"round {index + 1}/{rounds}: cold {cold['parse']:.3f}s warm {warm['parse']:.3f}s",
                file=sys.stderr,
            )
    medians = {name: statistics.median(values) for name, values in results.items()}
    return {
        "files": files,
        "background": background,
        "dags": dag_count,
        "rounds": rounds,
        "median_seconds": medians,
        "warm_vs_cold": medians["warm"] / medians["cold"],
        "warm_vs_uncached": medians["warm"] / medians["uncached"],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--background", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args(argv)
    report = measure(options.files, min(options.background, options.files), options.rounds)
    if options.json:
        print(json.dumps(report, indent=2))
        return
    medians = report["median_seconds"]
    print(
        f"DAG file with {report['files']} migration files ({report['background']} background) "
        f"-> {report['dags']} DAGs; median of {report['rounds']} fresh interpreters"
    )
    print(f"{'':<24}{'seconds':>10}")
    for name in ("imports only", "cold", "warm", "uncached"):
        label = name if name == "imports only" else f"parse, {name}"
        print(f"{label:<24}{medians[name]:>10.3f}")
    ratios = f"warm / cold: {report['warm_vs_cold']:.2f}x   "
    print(ratios + f"warm / uncached: {report['warm_vs_uncached']:.2f}x")


if __name__ == "__main__":
    main()
