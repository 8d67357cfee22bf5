"""``migronaut baseline --to NAME``: adopt a database that already has its migrations.

A baseline records every migration up to NAME as applied without running it,
each record marked ``adopted`` (``status`` shows it). It takes the run lock like
a run. An adopted background migration gets no state: the documents are taken
to be in its new shape already, so it counts as completed for ``requires``
(:func:`~migronaut_core.background.lifecycle.requires_status`), and ``down``
treats it as having rewritten documents.

With transactions the records commit together; without them a baseline
interrupted half-way is completed by running it again (what is adopted stays).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pymongo.client_session import ClientSession

from migronaut_core import files
from migronaut_core.changelog import Actor, ChangelogRecord
from migronaut_core.clock import utc_now
from migronaut_core.errors import BaselineConflictError
from migronaut_core.files import LoadedMigration
from migronaut_core.json_shape import to_json_dict
from migronaut_core.lock import MongoLock
from migronaut_core.runner import MigrationRunner, RunOptions, new_run_id, with_default_user
from migronaut_core.targets import pending_targets


@dataclass(frozen=True, slots=True)
class BaselineResult:
    """What a baseline did: ``adopted`` now, in order; ``already_applied`` up to ``to``
    before it (left as they were)."""

    run_id: str
    to: str
    adopted: tuple[str, ...]
    already_applied: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


def baseline(
    runner: MigrationRunner, *, to: str, options: RunOptions | None = None
) -> BaselineResult:
    """Record every migration up to ``to`` as applied (adopted) without running any.

    Idempotent: migrations already applied are left as they are.

    :raises MigrationInvalidNameError: ``to`` is malformed.
    :raises MigrationFileNotFoundError: ``to`` is not a migration file.
    :raises BaselineConflictError: a migration after ``to`` is applied, or a
        background one up to it was registered by migronaut; nothing is written.
    :raises LockAlreadyHeldError: a run holds the lock.
    """
    opts = options or RunOptions()
    actor = with_default_user(opts.actor)
    files.find(runner.migrations_dir, to)
    available = files.discover(runner.migrations_dir)
    with runner.locked(actor, opts) as lock:
        runner.changelog.ensure_indexes(create=runner.config.ensure_indexes)
        applied = runner.changelog.applied()
        _refuse_later(applied.keys(), to)
        loaded = [
            files.load(item) for item in pending_targets(available, applied, to=to, only=None)
        ]
        for migration in loaded:
            runner.background.check_adoptable(migration)
        run_id = new_run_id()
        records = [_adopted(migration, run_id, actor) for migration in loaded]
        _write(runner, lock, records)
    already = tuple(sorted(name for name in applied if name <= to))
    return BaselineResult(run_id, to, tuple(record.name for record in records), already)


def _refuse_later(applied: Any, to: str) -> None:
    later = sorted(name for name in applied if name > to)
    if later:
        raise BaselineConflictError(
            f"{len(later)} migration(s) after {to} are applied (first: {later[0]}): a "
            "baseline adopts a prefix of the sequence; choose a later NAME",
            {"to": to, "applied_after": later},
        )


def _adopted(migration: LoadedMigration, run_id: str, actor: Actor) -> ChangelogRecord:
    return ChangelogRecord(
        name=migration.name,
        status="applied",
        kind=migration.kind,
        checksum=migration.checksum,
        applied_at=utc_now(),
        duration_ms=0,
        run_id=run_id,
        description=migration.description,
        requested_by=actor.requested_by,
        reason=actor.reason,
        adopted=True,
    )


def _write(runner: MigrationRunner, lock: MongoLock, records: list[ChangelogRecord]) -> None:
    """Write the records, in one transaction when the deployment has them."""

    def write(session: ClientSession | None) -> None:
        lock.assert_held(session=session)
        for record in records:
            runner.changelog.record_applied(record, session=session)

    if not records:
        return
    if runner.supports_transactions():
        with runner.client.start_session() as session:
            session.with_transaction(write)
    else:
        write(None)
