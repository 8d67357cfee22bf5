"""A lane process for tests: drives one background migration, prints its final status.

Usage: python -m tests.support.lane_process URI DB MIGRATIONS NAME CONCURRENCY TTL
Exit 0 when it ends completed, 3 when paused/cancelled/blocked, 4 when it failed.

With MIGRONAUT_TEST_DIE_AT_CHECKPOINT=N the process SIGKILLs itself just before
its Nth checkpoint: after that batch's writes reached MongoDB, before its
progress was recorded (the worst moment for a crash).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

from migronaut_core import BackgroundFailedError, Migronaut
from migronaut_core.background.store import Leases
from tests.support import kit_json


def die_at_checkpoint(number: int) -> None:
    original = Leases.checkpoint
    calls = 0

    def checkpoint(self: Leases, *args: Any, **kwargs: Any) -> None:
        nonlocal calls
        calls += 1
        if calls >= number:
            os.kill(os.getpid(), signal.SIGKILL)
        original(self, *args, **kwargs)

    Leases.checkpoint = checkpoint  # type: ignore[method-assign]


def main(argv: list[str]) -> int:
    uri, database, migrations, name, concurrency, ttl = argv
    if os.environ.get("MIGRONAUT_TEST_DIE_AT_CHECKPOINT"):
        die_at_checkpoint(int(os.environ["MIGRONAUT_TEST_DIE_AT_CHECKPOINT"]))
    with Migronaut(
        uri=uri, database=database, migrations_dir=migrations, lock_ttl_seconds=float(ttl)
    ) as kit:
        try:
            view = kit_json.run(kit, name, concurrency=int(concurrency))
        except BackgroundFailedError as exc:
            print(json.dumps({"failed": exc.message}))
            return 4
    print(json.dumps({"status": view["status"], "totals": view["totals"]}))
    return 0 if view["status"] == "completed" else 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
