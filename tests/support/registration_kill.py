"""A process that runs ``up`` and can die between a registration and its changelog record.

Usage: python -m tests.support.registration_kill URI DB MIGRATIONS LOCK_TTL

Environment (optional):

- ``MIGRONAUT_CHAOS_DIE_BEFORE_CHANGELOG=1``: the process kills itself (SIGKILL)
  when the runner is about to write a background migration's changelog record,
  that is after its state was written (inside the run's transaction when the
  deployment has one): the exact point where a registration is half-done.

Exit 0 when ``up`` returned (the hook did not fire).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from migronaut_core import Migronaut
from migronaut_core.changelog import Changelog, ChangelogRecord

DIE_BEFORE_CHANGELOG_ENV = "MIGRONAUT_CHAOS_DIE_BEFORE_CHANGELOG"


def _die_before_background_records() -> None:
    original = Changelog.record_applied

    def record_applied(self: Changelog, record: ChangelogRecord, **kwargs: Any) -> None:
        if record.kind == "background":
            os.kill(os.getpid(), signal.SIGKILL)
        original(self, record, **kwargs)

    Changelog.record_applied = record_applied  # type: ignore[method-assign]


def main(argv: list[str]) -> int:
    uri, database, migrations, ttl = argv
    if os.environ.get(DIE_BEFORE_CHANGELOG_ENV):
        _die_before_background_records()
    with Migronaut(
        uri=uri, database=database, migrations_dir=migrations, lock_ttl_seconds=float(ttl)
    ) as kit:
        kit.runs.up()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
