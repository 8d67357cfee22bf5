"""What every benchmark shares: the server, the data, the migration file, RSS sampling, output.

The data set (DESIGN.md §5): ``users`` documents ``{_id: i, name: "First<i> Last<i>",
_v: 1, rev: 0, n: i}`` with the version index ``{_v: 1, _id: 1}``, rewritten from
version 1 to 2 by a small Python transform that splits ``name`` into ``first`` and
``last``. Each contender gets a freshly seeded copy in a database of its own
(dropped afterwards), so every one starts from the same physical state.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import psutil
from pymongo import MongoClient
from pymongo.database import Database
from pymongo.errors import OperationFailure

from migronaut_core import Migronaut
from migronaut_dev.mongod import start_replica_set

DEFAULT_DOCS = 100_000
#: insert_many chunk while seeding.
SEED_CHUNK = 10_000
BATCH_SIZE = 500
COLLECTION = "users"
VERSION_INDEX = [("_v", 1), ("_id", 1)]
MIGRATION_NAME = "20260101000000_bench_split_names"
#: Where an existing replica set may be given instead of starting one.
URI_ENV = "MIGRONAUT_BENCH_URI"

#: The health setting of bench's migrations: the defaults, but the oplog window. The
#: bench's ``mongod`` is a fresh set whose default-sized oplog a 1M rewrite fills
#: within minutes; its window then spans those minutes, far below the hard limit of
#: an hour, and every lane would hold (the signal doing its job on a real cluster).
HEALTH = '"health": {"oplog_window_s": False},'

MIGRATION_SOURCE = """\
description = "bench: split users.name into first and last"

background = {{
    "collection": "users",
    "from": 1,
    "to": 2,
    "batch_size": {batch_size},
    "revision_field": "rev",
    {health}
}}


def migrate(doc, ctx):
    first, _, last = doc.pop("name").partition(" ")
    doc["first"] = first
    doc["last"] = last
    return doc
"""


# -- command line and output ----------------------------------------------------------------


def count_arg(text: str) -> int:
    """A document count: ``100000``, ``100_000``, ``100k`` or ``1m``."""
    value = text.strip().lower().replace("_", "")
    scale = {"k": 1_000, "m": 1_000_000}.get(value[-1:], 1)
    number = int(value[:-1] if scale > 1 else value)
    if number < 1:
        raise argparse.ArgumentTypeError("a count must be at least 1")
    return number * scale


def count_list_arg(text: str) -> list[int]:
    return [count_arg(part) for part in text.split(",") if part.strip()]


def parser(description: str) -> argparse.ArgumentParser:
    """The options every benchmark takes (``--json``, ``--uri``, ``--cache-gb``)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--json", action="store_true", help="print one JSON document instead")
    ap.add_argument("--json-out", metavar="PATH", help="also write the JSON document to PATH")
    ap.add_argument(
        "--uri",
        default=os.environ.get(URI_ENV),
        help=f"an existing replica set to use (default: ${URI_ENV}, else a local mongod)",
    )
    ap.add_argument(
        "--cache-gb",
        type=float,
        default=1.0,
        help="WiredTiger cache of the local mongod (default 1.0)",
    )
    return ap


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "code": _CODE_AT_START,
    }


def setting(version: str) -> str:
    """One line naming the server, the machine and the code measured."""
    info = machine()
    code = info["code"]
    dirty = code["uncommitted_engine_files"]
    changes = f" + {dirty} uncommitted engine file(s)" if dirty else ""
    return (
        f"mongod {version} single-node replica set, {info['cpus']} CPUs, "
        f"load {load_average():.1f}, code {code['commit'] or '?'}{changes}"
    )


def load_average() -> float:
    """The 1-minute load average (other processes on the machine skew every figure)."""
    return os.getloadavg()[0]


def code_state() -> dict[str, Any]:
    """The commit measured, and the engine files changed on top of it (read-only git)."""
    repo = Path(__file__).resolve().parents[1]

    def git(*command: str) -> str:
        try:
            return subprocess.run(
                ["git", *command], check=False, cwd=repo, capture_output=True, text=True, timeout=10
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    changed = git("status", "--porcelain", "--", "migronaut_core", "migronaut_airflow")
    return {
        "commit": git("rev-parse", "--short", "HEAD"),
        "uncommitted_engine_files": len(changed.splitlines()) if changed else 0,
    }


#: The code measured is the code imported when the benchmark started.
_CODE_AT_START = code_state()


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain text table; numbers right-aligned."""
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    numeric = [
        all(isinstance(row[i], int | float) or row[i] in ("", None) for row in rows)
        for i in range(len(headers))
    ]
    lines = []
    for index, row in enumerate(cells):
        parts = [
            cell.rjust(width) if numeric[i] else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(parts).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def report(
    args: argparse.Namespace, payload: dict[str, Any], text: str, stream: TextIO | None = None
) -> None:
    """Print ``payload`` as JSON (``--json``) or ``text`` (to ``stream``, else stdout)."""
    out = stream or sys.stdout
    document = json.dumps(payload, indent=2, default=str)
    out.write((document if args.json else text) + "\n")
    out.flush()
    if getattr(args, "json_out", None):
        Path(args.json_out).write_text(document + "\n")


def reserve_stdout() -> TextIO:
    """Keep stdout for the report: return it, and send whatever else writes there to stderr.

    For code that logs to stdout behind our back (Airflow's ``dag.test()``); works at
    the file descriptor level, so loggers configured earlier follow too.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    return os.fdopen(saved, "w")


def log(message: str) -> None:
    """Progress on stderr, so ``--json`` output stays one document."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def ratio(value: float, base: float) -> float | None:
    return None if not base else value / base


def mib(value: int | None) -> float | None:
    return None if value is None else value / 2**20


# -- the server ----------------------------------------------------------------------------


@contextlib.contextmanager
def mongo_server(args: argparse.Namespace) -> Iterator[str]:
    """The URI of ``--uri``, or of a single-node replica set started (and stopped) here."""
    if args.uri:
        yield args.uri
        return
    server = start_replica_set(1, cache_size_gb=args.cache_gb)
    try:
        yield server.uri
    finally:
        server.stop()


def connect(uri: str) -> MongoClient[dict[str, Any]]:
    return MongoClient(uri, appname="migronaut-bench")


def server_version(client: MongoClient[dict[str, Any]]) -> str:
    return str(client.server_info().get("version"))


# -- the data ------------------------------------------------------------------------------


def fresh_db(client: MongoClient[dict[str, Any]], label: str) -> Database[dict[str, Any]]:
    """An empty database for one contender (dropped first if a previous run left it)."""
    name = f"bench_{label}"
    client.drop_database(name)
    return client[name]


def user(i: int) -> dict[str, Any]:
    return {"_id": i, "name": f"First{i} Last{i}", "_v": 1, "rev": 0, "n": i}


def seed(db: Database[dict[str, Any]], count: int) -> float:
    """Insert ``count`` users and the version index; seconds taken.

    Generated on the server (:func:`seed_on_server`), 1.5x faster than sending them
    (0.65 against 1.0 s per 100k measured side by side) and nothing to encode in
    Python, which is what makes a 10M pass worth seeding; a server older than 5.1
    (no ``$documents``) gets them as unordered ``insert_many`` chunks of 10k.
    """
    started = time.perf_counter()
    users = db[COLLECTION]
    users.drop()
    try:
        seed_on_server(db, count)
    except OperationFailure:
        users.drop()
        for offset in range(0, count, SEED_CHUNK):
            users.insert_many(
                [user(i) for i in range(offset, min(count, offset + SEED_CHUNK))], ordered=False
            )
    users.create_index(VERSION_INDEX)
    return time.perf_counter() - started


def seed_on_server(db: Database[dict[str, Any]], count: int) -> None:
    """:func:`user` for ``0 … count-1``, built and inserted by the server, 100k per pass."""
    chunk = 100_000
    number = {"$toString": "$i"}
    for low in range(0, count, chunk):
        db.aggregate(
            [
                {"$documents": [{"i": {"$range": [low, min(count, low + chunk)]}}]},
                {"$unwind": "$i"},
                {
                    "$replaceWith": {
                        "_id": "$i",
                        "name": {"$concat": ["First", number, " Last", number]},
                        "_v": 1,
                        "rev": 0,
                        "n": "$i",
                    }
                },
                {"$merge": {"into": COLLECTION, "whenMatched": "fail"}},
            ]
        )


def check_migrated(db: Database[dict[str, Any]], count: int, contender: str) -> None:
    """Fail loudly when a contender did not rewrite every document (a broken run, not slow)."""
    done = db[COLLECTION].count_documents({"_v": 2})
    if done != count:
        raise RuntimeError(f"{contender}: {done} of {count} documents at version 2")


def split_name(name: str) -> tuple[str, str]:
    """The transform every contender applies (the migration file inlines the same code)."""
    first, _, last = name.partition(" ")
    return first, last


# -- the engine ----------------------------------------------------------------------------


def migrations_dir(
    batch_size: int = BATCH_SIZE, *, name: str = MIGRATION_NAME, source: str | None = None
) -> Path:
    """A temporary directory holding one background migration file.

    :param name: the file's migration id (the benchmark's Python transform by default).
    :param source: the file's text; by default :data:`MIGRATION_SOURCE` with ``batch_size``.
    """
    directory = Path(tempfile.mkdtemp(prefix="migronaut-bench-migrations-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    text = (
        MIGRATION_SOURCE.format(batch_size=batch_size, health=HEALTH) if source is None else source
    )
    (directory / f"{name}.py").write_text(text)
    return directory


def kit(uri: str, database: str, directory: Path) -> Migronaut:
    return Migronaut(uri=uri, database=database, migrations_dir=str(directory))


def drive(k: Migronaut, concurrency: int, name: str = MIGRATION_NAME) -> float:
    """Drive the registered migration to the end with ``concurrency`` lanes; seconds taken."""
    started = time.perf_counter()
    view = k.background.run(name, concurrency=concurrency)
    seconds = time.perf_counter() - started
    status = None if view is None else view.status
    if status != "completed":
        raise RuntimeError(f"the migration ended {status!r}, not completed")
    return seconds


# -- memory --------------------------------------------------------------------------------


class RssSampler:
    """Samples a process's resident set size in a thread; ``peak`` is the highest seen.

    :param pid: the process (this one by default).
    :param interval: seconds between samples.
    """

    def __init__(self, pid: int | None = None, interval: float = 0.02) -> None:
        self.process = psutil.Process(pid)
        self.interval = interval
        self.baseline: int | None = None
        self.peak: int | None = None
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _sample(self) -> None:
        try:
            rss = self.process.memory_info().rss
        except psutil.Error:
            return
        self.samples += 1
        self.peak = rss if self.peak is None else max(self.peak, rss)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def start(self) -> RssSampler:
        self._sample()
        self.baseline = self.peak
        self._thread.start()
        return self

    def stop(self) -> int | None:
        self._stop.set()
        self._thread.join()
        self._sample()
        return self.peak

    def __enter__(self) -> RssSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- CPU -----------------------------------------------------------------------------------


class CpuMeter:
    """CPU seconds (user + system) this process and the server spent over a block.

    On two cores shared by the client and ``mongod`` a contender is CPU-bound: the
    rate it can reach is set by the CPU each document costs both sides, whatever
    the overlap. ``server`` is None when the server is not a process of this
    machine (``--uri`` elsewhere) or cannot be read.

    :param client: a client of the server (its ``serverStatus`` names the pid).
    """

    def __init__(self, client: MongoClient[dict[str, Any]]) -> None:
        self._own = psutil.Process()
        self._server: psutil.Process | None
        try:
            self._server = psutil.Process(int(client.admin.command("serverStatus")["pid"]))
            self._server.cpu_times()
        except (psutil.Error, KeyError, ValueError, OperationFailure):
            self._server = None
        self.client_s = 0.0
        self.server_s: float | None = None
        self._start: tuple[float, float | None] = (0.0, None)

    def _now(self) -> tuple[float, float | None]:
        own = self._own.cpu_times()
        server = None
        if self._server is not None:
            try:
                times = self._server.cpu_times()
                server = times.user + times.system
            except psutil.Error:
                server = None
        return own.user + own.system, server

    def __enter__(self) -> CpuMeter:
        self._start = self._now()
        return self

    def __exit__(self, *exc: object) -> None:
        client, server = self._now()
        self.client_s = client - self._start[0]
        started = self._start[1]
        self.server_s = None if server is None or started is None else server - started

    def per_doc_us(self, docs: int) -> dict[str, float | None]:
        """Microseconds of CPU per document: the client's, the server's, both."""
        server = None if self.server_s is None else self.server_s / docs * 1e6
        client = self.client_s / docs * 1e6
        return {
            "client_cpu_us_per_doc": client,
            "server_cpu_us_per_doc": server,
            "cpu_us_per_doc": None if server is None else client + server,
        }
