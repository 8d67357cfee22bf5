"""A drift watcher process for tests: watches until SIGTERM, printing its status.

Usage: python -m tests.support.watch_process URI DB MIGRATIONS TTL

Prints one JSON line ``{"pid": ..., "status": [...]}`` whenever the handle's
status (states and whether it leads) changes, and ``{"stopped": true}`` after a
clean stop on SIGTERM. Tests ``kill -9`` it to play a leader that dies.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from typing import Any

from migronaut_core import Migronaut


def main(argv: list[str]) -> int:
    uri, database, migrations, ttl = argv
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with Migronaut(
        uri=uri, database=database, migrations_dir=migrations, lock_ttl_seconds=float(ttl)
    ) as kit:
        watcher = kit.drift.watch(refresh_seconds=1.0)
        last: Any = None
        while not stop.wait(0.1):
            shown = [
                {"collection": row["collection"], "state": row["state"], "leading": row["leading"]}
                for row in watcher.status()
            ]
            if shown != last:
                print(json.dumps({"pid": os.getpid(), "status": shown}), flush=True)
                last = shown
        watcher.stop()
    print(json.dumps({"pid": os.getpid(), "stopped": True}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
