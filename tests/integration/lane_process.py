"""A lane process for tests: drives one background migration, prints its final status.

Usage: python -m tests.integration.lane_process URI DB MIGRATIONS NAME CONCURRENCY TTL
Exit 0 when it ends completed, 3 when paused/cancelled/blocked, 4 when it failed.
"""

from __future__ import annotations

import json
import sys

from migronaut_core import BackgroundFailedError, Migronaut


def main(argv: list[str]) -> int:
    uri, database, migrations, name, concurrency, ttl = argv
    with Migronaut(
        uri=uri, database=database, migrations_dir=migrations, lock_ttl_seconds=float(ttl)
    ) as kit:
        try:
            view = kit.run_background(name, concurrency=int(concurrency))
        except BackgroundFailedError as exc:
            print(json.dumps({"failed": exc.message}))
            return 4
    print(json.dumps({"status": view["status"], "totals": view["totals"]}))
    return 0 if view["status"] == "completed" else 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
