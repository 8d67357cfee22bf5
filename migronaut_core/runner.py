"""The migration runner: ``up``, ``down`` and ``status``.

A run takes the ``migrations`` lock, checks everything it is about to do (names,
checksums of applied files, that every target module loads, that ``requires``
name earlier background migrations, that irreversible ones are not being
reverted, that transactions are available when asked for) and only then executes
migrations one by one, recording each in the changelog. ``up`` checks its
targets once before the lock too, so a wrong one writes nothing, not even the
lock. A failure stops the run at that migration; the ones before it stay applied.

Background migrations plug in through :class:`BackgroundHooks`: ``up`` registers
them, ``down`` reverts or withdraws them, and the ``requires`` guard stops a
regular migration whose background requirements have not completed. A
registration and its changelog record commit in one transaction when the
deployment has transactions; without them the state is written first, and a run
killed before the record leaves a registration that the next ``up`` completes.
The run's checks, lock and records stay in one module (a little over the usual
length): their order is the guarantee.
"""

from __future__ import annotations

import getpass
import logging
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from pymongo import MongoClient
from pymongo.client_session import ClientSession
from pymongo.database import Database
from pymongo.errors import PyMongoError

from migronaut_core import files
from migronaut_core.changelog import Actor, Changelog, ChangelogRecord
from migronaut_core.clock import elapsed_ms, monotonic, utc_now
from migronaut_core.config import Config
from migronaut_core.deployment import supports_transactions
from migronaut_core.errors import (
    BackgroundPendingError,
    ConfigInvalidError,
    IrreversibleMigrationError,
    MigrationFailedError,
    MigronautError,
    RunAbortedError,
    StoreError,
    TransactionsUnsupportedError,
)
from migronaut_core.files import LoadedMigration, MigrationFile, MigrationKind
from migronaut_core.json_shape import json_field, to_json_dict
from migronaut_core.lock import MongoLock
from migronaut_core.targets import (
    check_checksums,
    check_up_arguments,
    down_targets,
    pending_targets,
)

log = logging.getLogger(__name__)

Direction = Literal["up", "down"]
#: What ``down`` does with a background migration: register its way back, or withdraw it.
DownAction = Literal["revert", "withdraw"]
RUN_LOCK = "migrations"


@dataclass(frozen=True, slots=True)
class MigrationContext:
    """What a migration's ``up(ctx)`` / ``down(ctx)`` receives.

    ``session`` is set when the migration runs in a transaction; pass it to every
    operation (``ctx.db.users.update_many(..., session=ctx.session)``) so the work
    commits or rolls back with the changelog record.
    """

    name: str
    direction: Direction
    db: Database[dict[str, Any]]
    client: MongoClient[dict[str, Any]]
    session: ClientSession | None
    run_id: str
    log: logging.Logger
    cancel: threading.Event


@dataclass(frozen=True, slots=True)
class MigrationResult:
    name: str
    kind: MigrationKind
    #: ``applied`` for every ``up`` (a background migration's ``up`` registers it: its
    #: documents are rewritten later), ``reverted`` for every ``down``.
    status: Literal["applied", "reverted", "withdrawn", "waiting"]
    duration_ms: int
    details: dict[str, Any] = field(default_factory=dict, metadata=json_field(omit="empty"))

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


@dataclass(frozen=True, slots=True)
class RunResult:
    run_id: str
    direction: Direction
    migrations: tuple[MigrationResult, ...]
    #: Set when the run stopped cleanly before a migration that waits for a
    #: background migration (``on_background_pending="stop"``).
    stopped_at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


@dataclass(frozen=True, slots=True)
class StatusRow:
    name: str
    status: Literal["applied", "pending"]
    applied_at: str | None
    checksum_ok: bool | None
    kind: MigrationKind | None
    description: str | None
    file_missing: bool = field(default=False, metadata=json_field(omit="empty"))
    last_error: dict[str, Any] | None = field(default=None, metadata=json_field(omit="empty"))
    #: Applied by a baseline, never run (see :func:`~migronaut_core.baseline.baseline`).
    adopted: bool = field(default=False, metadata=json_field(omit="empty"))

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


class BackgroundHooks(Protocol):
    """What the runner needs from the background engine.

    The kit passes :class:`~migronaut_core.background.registration.RunnerHooks`.
    """

    def check(self, migration: LoadedMigration, direction: Direction) -> None:
        """Validate a migration's ``requires`` or a background migration; reads only."""

    def prepare(self) -> None:
        """Create what registrations write into, before any transaction."""

    def register(self, migration: LoadedMigration, ctx: MigrationContext) -> dict[str, Any]:
        """Register (``up``) a background migration; return what to report."""

    def revert(self, migration: LoadedMigration, ctx: MigrationContext) -> dict[str, Any]:
        """Revert or withdraw (``down``) a background migration."""

    def waiting_for(self, requires: Sequence[str]) -> list[dict[str, Any]]:
        """Return the ``requires`` that have not completed, as ``{migration, status}``."""

    def unfinished(self, requires: Sequence[str]) -> list[dict[str, Any]]:
        """Like :meth:`waiting_for`, but only reads (nothing is driven inline)."""

    def down_action(self, migration: LoadedMigration) -> DownAction:
        """What ``down`` would do with a background migration: ``revert`` or ``withdraw``."""

    def check_adoptable(self, migration: LoadedMigration) -> None:
        """Refuse to adopt (baseline) a background migration that migronaut ran."""

    def after_applied(self, migration: LoadedMigration, ctx: MigrationContext) -> None:
        """Called after a background migration's registration was recorded."""

    def recorded(
        self, migration: LoadedMigration, direction: Direction, details: dict[str, Any]
    ) -> None:
        """A background migration's ``up`` or ``down`` (``details``) is recorded: announce it."""

    def stopped_for(self, migration: LoadedMigration, waiting: list[dict[str, Any]]) -> None:
        """The run stops cleanly before ``migration``, which waits for ``waiting``."""


@dataclass(frozen=True, slots=True)
class RunOptions:
    """Options shared by ``up`` and ``down``.

    :param wait_for_lock_seconds: wait this long for another run's lock; 0 fails at once.
    :param actor: who asked and why.
    :param allow_checksum_mismatch: run although applied files changed since.
    :param on_background_pending: ``"error"`` raises BackgroundPendingError when a
        migration requires unfinished background migrations; ``"stop"`` ends the run
        cleanly before it.
    :param cancel: set it to stop the run between migrations (RunAbortedError).
    """

    wait_for_lock_seconds: float = 0
    actor: Actor = field(default_factory=Actor)
    allow_checksum_mismatch: bool = False
    on_background_pending: Literal["error", "stop"] = "error"
    cancel: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        if self.on_background_pending not in ("error", "stop"):
            raise ConfigInvalidError(
                "on_background_pending must be 'error' or 'stop'", {"key": "on_background_pending"}
            )
        if self.wait_for_lock_seconds < 0:
            raise ConfigInvalidError(
                "wait_for_lock_seconds must not be negative", {"key": "wait_for_lock_seconds"}
            )


@dataclass(frozen=True, slots=True)
class _Run:
    """One run in progress: what every migration of it shares."""

    run_id: str
    lock: MongoLock
    actor: Actor
    options: RunOptions


class MigrationRunner:
    """Applies and reverts migrations of one database under the run lock."""

    def __init__(
        self,
        config: Config,
        client: MongoClient[dict[str, Any]],
        db: Database[dict[str, Any]],
        *,
        background: BackgroundHooks,
    ) -> None:
        self.config = config
        self.client = client
        self.db = db
        self.background = background
        self.changelog = Changelog(db[config.changelog_collection])
        self._transactions: bool | None = None

    @property
    def migrations_dir(self) -> Path:
        return self.config.migrations_dir

    def run_lock(self, actor: Actor) -> MongoLock:
        return MongoLock(
            self.db[self.config.lock_collection],
            RUN_LOCK,
            self.config.lock_ttl_seconds,
            requested_by=actor.requested_by,
            label="migration lock",
        )

    # -- up ------------------------------------------------------------------------------

    def up(
        self, *, to: str | None = None, only: str | None = None, options: RunOptions | None = None
    ) -> RunResult:
        """Apply pending migrations: all of them, those up to ``to``, or just ``only``.

        Safe to call concurrently from many processes: a migration is applied at
        most once (the lock, and the changelog's unique ``_id`` behind it).
        """
        check_up_arguments(self.migrations_dir, to=to, only=only)
        opts = options or RunOptions()
        actor = with_default_user(opts.actor)
        available = files.discover(self.migrations_dir)
        self._checked_up_targets(available, to=to, only=only, opts=opts)
        with self.locked(actor, opts) as lock:
            self.changelog.ensure_indexes(create=self.config.ensure_indexes)
            loaded = self._checked_up_targets(available, to=to, only=only, opts=opts)
            self.check_transactions(loaded)
            self._prepare_background(loaded)
            return self._execute_all("up", loaded, _Run(new_run_id(), lock, actor, opts))

    def _checked_up_targets(
        self, available: list[MigrationFile], *, to: str | None, only: str | None, opts: RunOptions
    ) -> list[LoadedMigration]:
        """The pending targets of ``up``, each checked (checksums, ``requires``); reads only.

        Called before the lock too, so a wrong target is refused before the lock or
        any index is written; again under it, where another run may have moved on.
        """
        applied = self.changelog.applied()
        check_checksums(available, applied, allow_mismatch=opts.allow_checksum_mismatch)
        loaded = [
            files.load(target) for target in pending_targets(available, applied, to=to, only=only)
        ]
        for migration in loaded:
            self.check_target(migration, "up")
        return loaded

    # -- down ----------------------------------------------------------------------------

    def down(self, *, to: str | None = None, options: RunOptions | None = None) -> RunResult:
        """Revert the last applied migration, or every one applied after ``to``.

        :raises NotAppliedError: ``to`` is not applied.
        :raises IrreversibleMigrationError: a target has no ``down``; nothing is reverted.
        """
        opts = options or RunOptions()
        actor = with_default_user(opts.actor)
        if to is not None:
            files.validate_name(to)
        with self.locked(actor, opts) as lock:
            applied = self.changelog.applied()
            names = down_targets(applied, to)
            loaded = [files.load(files.find(self.migrations_dir, name)) for name in names]
            for migration in loaded:
                self.check_target(migration, "down")
            self.check_transactions(loaded)
            self._prepare_background(loaded)
            return self._execute_all("down", loaded, _Run(new_run_id(), lock, actor, opts))

    # -- status --------------------------------------------------------------------------

    def status(self) -> list[StatusRow]:
        """Return one row per migration file and per applied record, oldest first.

        Never raises for one broken file: its row has ``kind`` and ``description``
        set to None.
        """
        available = {item.name: item for item in files.discover(self.migrations_dir)}
        records = self.changelog.records()
        rows = []
        for name in sorted(set(available) | set(records)):
            rows.append(self._status_row(name, available.get(name), records.get(name)))
        return rows

    def _status_row(
        self, name: str, file: MigrationFile | None, record: ChangelogRecord | None
    ) -> StatusRow:
        applied = record is not None and record.status == "applied"
        kind: MigrationKind | None = record.kind if applied and record else None
        description = record.description if applied and record else None
        if file is not None and not applied:
            try:
                loaded = files.load(file)
                kind, description = loaded.kind, loaded.description
            except MigronautError:
                pass
        checksum_ok = None
        if applied and record is not None and file is not None:
            checksum_ok = file.checksum() == record.checksum
        return StatusRow(
            name=name,
            status="applied" if applied else "pending",
            applied_at=record.applied_at.isoformat() if applied and record else None,
            checksum_ok=checksum_ok,
            kind=kind,
            description=description,
            file_missing=file is None,
            last_error=record.error if record is not None and not applied else None,
            adopted=applied and record is not None and record.adopted,
        )

    # -- what runs and previews share ------------------------------------------------------

    def check_target(self, migration: LoadedMigration, direction: Direction) -> None:
        """What a run checks of each target before anything is written; reads only.

        :raises IrreversibleMigrationError: a ``down`` target cannot be reverted.
        :raises MigronautError: its ``requires`` or background spec is wrong.
        """
        if direction == "down" and migration.kind == "regular":
            if not migration.reversible:
                raise IrreversibleMigrationError(
                    f"migration {migration.name} has no down(): it cannot be reverted",
                    {"name": migration.name},
                )
            return
        if migration.kind == "background" or migration.requires:
            self.background.check(migration, direction)

    def locked(self, actor: Actor, opts: RunOptions) -> MongoLock:
        """Take the run lock (waiting as ``opts`` allow); use it as a context manager."""
        lock = self.run_lock(actor)
        lock.acquire(wait_seconds=opts.wait_for_lock_seconds, cancel=opts.cancel)
        return lock

    def supports_transactions(self) -> bool:
        """Whether the deployment runs multi-document transactions (asked once)."""
        if self._transactions is None:
            self._transactions = supports_transactions(self.client)
        return self._transactions

    def check_transactions(self, loaded: list[LoadedMigration]) -> None:
        """:raises TransactionsUnsupportedError: a regular one asks for them on a standalone."""
        needs = [m.name for m in loaded if m.kind == "regular" and self._transactional(m)]
        if needs and not self.supports_transactions():
            raise TransactionsUnsupportedError(
                "transactions need a replica set or a sharded cluster; this server is "
                f"standalone (migrations: {', '.join(needs)})",
                {"names": needs},
            )

    # -- internals -----------------------------------------------------------------------

    def _transactional(self, migration: LoadedMigration) -> bool:
        if migration.use_transaction is not None:
            return migration.use_transaction
        return self.config.use_transaction

    def _in_transaction(self, migration: LoadedMigration) -> bool:
        """Regular migrations as configured; a background registration whenever possible."""
        if migration.kind == "regular":
            return self._transactional(migration)
        return self.supports_transactions()

    def _prepare_background(self, loaded: list[LoadedMigration]) -> None:
        if any(migration.kind == "background" for migration in loaded):
            self.background.prepare()

    def _execute_all(
        self, direction: Direction, loaded: list[LoadedMigration], run: _Run
    ) -> RunResult:
        results: list[MigrationResult] = []
        log.info("run %s: %s %d migration(s)", run.run_id, direction, len(loaded))
        for migration in loaded:
            if run.options.cancel.is_set():
                raise RunAbortedError(
                    f"run {run.run_id} was cancelled after {len(results)} migration(s)",
                    {"run_id": run.run_id, "done": len(results)},
                )
            if direction == "up" and self._must_wait(migration, run):
                return RunResult(run.run_id, direction, tuple(results), migration.name)
            results.append(self._execute(direction, migration, run))
        return RunResult(run.run_id, direction, tuple(results))

    def _must_wait(self, migration: LoadedMigration, run: _Run) -> bool:
        """The ``requires`` guard: True to stop cleanly here; raises when asked to."""
        if migration.kind != "regular" or not migration.requires:
            return False  # a background migration registers as blocked instead
        waiting = self.background.waiting_for(migration.requires)
        if not waiting:
            return False
        if run.options.on_background_pending == "stop":
            log.info("run %s: %s waits for %d", run.run_id, migration.name, len(waiting))
            self.background.stopped_for(migration, waiting)
            return True
        listed = ", ".join(f"{entry['migration']} ({entry['status']})" for entry in waiting)
        raise BackgroundPendingError(
            f"{migration.name} requires background migration(s) that have not completed: {listed}",
            {"migration": migration.name, "waits_for": waiting},
        )

    def _execute(
        self, direction: Direction, migration: LoadedMigration, run: _Run
    ) -> MigrationResult:
        run.lock.assert_held()
        started = monotonic()
        details: dict[str, Any] = {}

        def body(session: ClientSession | None) -> None:
            ctx = self._context(migration, direction, run, session)
            details.clear()
            details.update(self._call(direction, migration, ctx))
            run.lock.assert_held(session=session)
            if direction == "up":
                record = _record(migration, "applied", started, run)
                self.changelog.record_applied(record, session=session)
            else:
                self.changelog.remove(migration.name, session=session)

        try:
            if self._in_transaction(migration):
                with self.client.start_session() as session:
                    session.with_transaction(body)
            else:
                body(None)
        except Exception as exc:
            error = _as_migronaut_error(exc, migration, direction)
            self._remember_failure(direction, migration, started, run, error)
            if error is exc:
                raise
            raise error from exc
        duration = int(elapsed_ms(started))
        status = _result_status(direction)
        log.info("run %s: %s %s in %d ms", run.run_id, status, migration.name, duration)
        if migration.kind == "background":
            self.background.recorded(migration, direction, details)
        if direction == "up" and migration.kind == "background":
            self.background.after_applied(migration, self._context(migration, "up", run, None))
        return MigrationResult(migration.name, migration.kind, status, duration, details)

    def _context(
        self,
        migration: LoadedMigration,
        direction: Direction,
        run: _Run,
        session: ClientSession | None,
    ) -> MigrationContext:
        return MigrationContext(
            name=migration.name,
            direction=direction,
            db=self.db,
            client=self.client,
            session=session,
            run_id=run.run_id,
            log=logging.getLogger(f"migronaut.migration.{migration.name}"),
            cancel=run.options.cancel,
        )

    def _call(
        self, direction: Direction, migration: LoadedMigration, ctx: MigrationContext
    ) -> dict[str, Any]:
        if migration.kind == "background":
            if direction == "up":
                return self.background.register(migration, ctx)
            return self.background.revert(migration, ctx)
        function = migration.up if direction == "up" else migration.down
        assert function is not None  # checked before the run started
        function(ctx)
        return {}

    def _remember_failure(
        self,
        direction: Direction,
        migration: LoadedMigration,
        started: float,
        run: _Run,
        error: MigronautError,
    ) -> None:
        log.error("run %s: %s of %s failed: %s", run.run_id, direction, migration.name, error.code)
        if direction != "up":
            return
        record = _record(migration, "failed", started, run, error=error)
        try:
            self.changelog.record_failed(record)
        except PyMongoError:
            log.warning("run %s: could not record the failure of %s", run.run_id, migration.name)


def _as_migronaut_error(
    exc: Exception, migration: LoadedMigration, direction: Direction
) -> MigronautError:
    """Classify what a migration raised; messages name the type, never its values."""
    if isinstance(exc, MigronautError):
        return exc
    context = {"name": migration.name, "direction": direction, "error_type": type(exc).__name__}
    if isinstance(exc, PyMongoError):
        return StoreError(
            f"migration {migration.name} ({direction}) failed in MongoDB: {type(exc).__name__}",
            context,
        )
    return MigrationFailedError(
        f"migration {migration.name} ({direction}) raised {type(exc).__name__}", context
    )


def with_default_user(actor: Actor) -> Actor:
    """``actor``, its ``requested_by`` defaulting to the OS user (none when it cannot be read)."""
    if actor.requested_by is not None:
        return actor
    try:
        user = getpass.getuser()[:100] or None
    except (KeyError, OSError):
        user = None
    return Actor(requested_by=user, reason=actor.reason)


def _record(
    migration: LoadedMigration,
    status: Literal["applied", "failed"],
    started: float,
    run: _Run,
    *,
    error: MigronautError | None = None,
) -> ChangelogRecord:
    return ChangelogRecord(
        name=migration.name,
        status=status,
        kind=migration.kind,
        checksum=migration.checksum,
        applied_at=utc_now(),
        duration_ms=int(elapsed_ms(started)),
        run_id=run.run_id,
        description=migration.description,
        requested_by=run.actor.requested_by,
        reason=run.actor.reason,
        error={"code": error.code, "message": error.message} if error else None,
    )


def _result_status(direction: Direction) -> Literal["applied", "reverted"]:
    """A run's word for a migration it ran, whatever its kind (as the changelog records it:
    a registered background migration is applied; ``kind`` tells the two apart)."""
    return "reverted" if direction == "down" else "applied"


def new_run_id() -> str:
    """A short id for one run, recorded with each of its changelog records."""
    return uuid.uuid4().hex[:12]


__all__ = [
    "BackgroundHooks",
    "MigrationContext",
    "MigrationResult",
    "MigrationRunner",
    "RunOptions",
    "RunResult",
    "StatusRow",
    "new_run_id",
    "with_default_user",
]
