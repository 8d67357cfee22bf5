"""The kit: one object that owns a connection and runs every migronaut operation.

The CLI, the Airflow provider and user code all go through :class:`Migronaut`.
It connects lazily (creating one is free, e.g. while Airflow parses a DAG file)
and owns the client it creates; a client passed in is borrowed and left open.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from pymongo import MongoClient
from pymongo.database import Database
from pymongo.errors import ConfigurationError, PyMongoError

from migronaut_core import files
from migronaut_core.background.audit import Finding
from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.control.actions import Action, ControlResult
from migronaut_core.background.coordinator import Answer, Driver
from migronaut_core.background.drift.watch import Watcher
from migronaut_core.background.dry_run import DryRunReport, StepDryRunReport
from migronaut_core.background.events import Events, Listener
from migronaut_core.background.indexes import ConvergeReport
from migronaut_core.background.lanes.lane import SliceResult
from migronaut_core.background.service import BackgroundService
from migronaut_core.changelog import Actor
from migronaut_core.config import Config, load_config
from migronaut_core.errors import ConfigInvalidError, ConnectionFailedError
from migronaut_core.lock import LockInfo
from migronaut_core.runner import (
    BackgroundHooks,
    MigrationRunner,
    RunOptions,
    RunResult,
    StatusRow,
    with_default_user,
)
from migronaut_core.scrub import redact_uri


class Migronaut:
    """Runs migrations against one MongoDB database.

    :param config: settings; by default read from files and environment
        (:func:`~migronaut_core.config.load_config`) with ``overrides`` on top.
    :param client: an existing client to borrow instead of connecting.
    :param overrides: config keys, e.g. ``uri=…, database=…``.
    """

    def __init__(
        self,
        config: Config | None = None,
        *,
        client: MongoClient[dict[str, Any]] | None = None,
        background: BackgroundHooks | None = None,
        **overrides: Any,
    ) -> None:
        if config is not None and overrides:
            raise ConfigInvalidError(
                "pass either a Config or config keys, not both", {"key": next(iter(overrides))}
            )
        self.config = config if config is not None else load_config(overrides)
        self._client = client
        self._owns_client = client is None
        self._hooks = background
        self.events = Events()
        self._runner: MigrationRunner | None = None
        self._background: BackgroundService | None = None

    # -- connection ----------------------------------------------------------------------

    @property
    def client(self) -> MongoClient[dict[str, Any]]:
        if self._client is None:
            self._client = self._connect()
        return self._client

    @property
    def db(self) -> Database[dict[str, Any]]:
        return self.client[self.config.database_name()]

    def _connect(self) -> MongoClient[dict[str, Any]]:
        self.config.database_name()  # a missing database fails before connecting
        try:
            client: MongoClient[dict[str, Any]] = MongoClient(
                self.config.uri,
                serverSelectionTimeoutMS=self.config.server_selection_timeout_ms,
                appname="migronaut",
                tz_aware=True,
            )
            client.admin.command("ping")
        except ConfigurationError as exc:
            raise ConfigInvalidError(
                f"uri is not usable: {type(exc).__name__}", {"key": "uri"}
            ) from exc
        except PyMongoError as exc:
            raise ConnectionFailedError(
                f"cannot reach MongoDB at {redact_uri(self.config.uri)} "
                f"({type(exc).__name__}); is the server running?",
                {"uri": redact_uri(self.config.uri)},
            ) from exc
        return client

    def close(self) -> None:
        """Close the client if this kit created it; the kit can connect again later."""
        if self._client is not None and self._owns_client:
            self._client.close()
            self._client = None
        self._runner = None
        self._background = None

    def __enter__(self) -> Migronaut:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- the runner ------------------------------------------------------------------------

    @property
    def runner(self) -> MigrationRunner:
        if self._runner is None:
            self._runner = MigrationRunner(
                self.config, self.client, self.db, background=self._hooks or self.background
            )
        return self._runner

    @property
    def background(self) -> BackgroundService:
        """The background engine over this kit's database (see the ``*_background`` methods)."""
        if self._background is None:
            self._background = BackgroundService(self.config, self.client, self.db, self.events)
        return self._background

    def up(
        self,
        *,
        to: str | None = None,
        only: str | None = None,
        requested_by: str | None = None,
        reason: str | None = None,
        wait_for_lock_seconds: float = 0,
        allow_checksum_mismatch: bool = False,
        on_background_pending: str = "error",
        options: RunOptions | None = None,
    ) -> RunResult:
        """Apply pending migrations (all, up to ``to``, or ``only`` one)."""
        opts = options or RunOptions(
            wait_for_lock_seconds=wait_for_lock_seconds,
            actor=Actor(requested_by=requested_by, reason=reason),
            allow_checksum_mismatch=allow_checksum_mismatch,
            on_background_pending=on_background_pending,  # type: ignore[arg-type]
        )
        return self.runner.up(to=to, only=only, options=opts)

    def down(
        self,
        *,
        to: str | None = None,
        requested_by: str | None = None,
        reason: str | None = None,
        wait_for_lock_seconds: float = 0,
        options: RunOptions | None = None,
    ) -> RunResult:
        """Revert the last applied migration, or all applied after ``to``."""
        opts = options or RunOptions(
            wait_for_lock_seconds=wait_for_lock_seconds,
            actor=Actor(requested_by=requested_by, reason=reason),
        )
        return self.runner.down(to=to, options=opts)

    def status(self) -> list[StatusRow]:
        """Return one row per migration, oldest first."""
        return self.runner.status()

    def create(self, title: str, *, background: bool = False) -> Path:
        """Create a migration file from a template; needs no database."""
        return files.write_new(self.config.migrations_dir, title, background=background)

    def inspect_lock(self) -> LockInfo | None:
        """Return who holds the run lock, if anyone ever took it."""
        return self.runner.run_lock(Actor()).inspect()

    def converge(self) -> ConvergeReport:
        """Create the version index of every declared collection (``collections``,
        ``collections_dir``) that declares versioning.

        ``{field: 1, _id: 1}``, or on a sharded collection the variant carrying
        the shard key (see :mod:`migronaut_core.background.indexes`). Creates, never drops;
        idempotent.

        :returns: what was created and what existed, collection by collection.
        :raises ConfigInvalidError: the collection definitions do not load.
        """
        return self.background.converge()

    # -- background migrations ------------------------------------------------------------

    def on(self, event: str, listener: Listener) -> Callable[[], None]:
        """Subscribe to engine events (``background:*``, or ``"*"``); returns an unsubscribe."""
        return self.events.on(event, listener)

    def coordinate_background(
        self, name: str, *, driver: Driver | None = None, cancel: CancelToken | None = None
    ) -> Answer:
        """One coordinator step; idempotent, safe from any number of processes."""
        return self.background.coordinate(name, driver=driver, cancel=cancel)

    def run_background_slice(
        self, name: str, *, slice_ms: int | None = None, cancel: CancelToken | None = None
    ) -> SliceResult:
        """One slice of one lane: claim a partition, work it until ``slice_ms``, release."""
        return self.background.run_slice(name, slice_ms=slice_ms, cancel=cancel)

    def run_background(
        self,
        name: str,
        *,
        concurrency: int = 1,
        slice_ms: int | None = None,
        until_done: bool = True,
        cancel: CancelToken | None = None,
    ) -> dict[str, Any]:
        """Drive a background migration from this process with up to ``concurrency`` lanes.

        :returns: its status view (completed, paused, cancelled or blocked).
        :raises BackgroundFailedError: it failed.
        :raises RunAbortedError: ``cancel`` fired (it resumes from its checkpoints later).
        """
        return self.background.run(
            name, concurrency=concurrency, slice_ms=slice_ms, until_done=until_done, cancel=cancel
        )

    def background_status(self, name: str | None = None) -> Any:
        """The status view of one background migration (None if unregistered), or of all."""
        if name is None:
            return self.background.statuses()
        return self.background.status(name)

    def background_partitions(self, name: str) -> list[dict[str, Any]]:
        """The partitions of the current generation: scope, cursor, counters, lease holder."""
        return self.background.partitions(name)

    def background_history(self, name: str) -> list[dict[str, Any]]:
        """The control history: action, from, to, who, why, when."""
        return self.background.history(name)

    def runnable_background(self) -> list[dict[str, Any]]:
        """Background migrations with work to do, oldest first."""
        return self.background.runnable()

    def _control(
        self,
        name: str,
        action: Action,
        requested_by: str | None,
        reason: str | None,
        **options: Any,
    ) -> ControlResult:
        actor = with_default_user(Actor(requested_by=requested_by, reason=reason))
        return self.background.control(name, action, actor=actor, **options)

    def pause_background(
        self,
        name: str,
        *,
        requested_by: str | None = None,
        reason: str | None = None,
        wait: bool = False,
    ) -> ControlResult:
        """Pause; lanes stop before their next batch (``wait`` until they have)."""
        return self._control(name, "pause", requested_by, reason, wait=wait)

    def resume_background(
        self, name: str, *, requested_by: str | None = None, reason: str | None = None
    ) -> ControlResult:
        """Resume a paused one (back to blocked while its requirements are open)."""
        return self._control(name, "resume", requested_by, reason)

    def cancel_background(
        self,
        name: str,
        *,
        requested_by: str | None = None,
        reason: str | None = None,
        wait: bool = False,
    ) -> ControlResult:
        """Cancel; lanes stop before their next batch (``wait`` until they have)."""
        return self._control(name, "cancel", requested_by, reason, wait=wait)

    def retry_background(
        self,
        name: str,
        *,
        requested_by: str | None = None,
        reason: str | None = None,
        from_start: bool = False,
        repin: bool = False,
    ) -> ControlResult:
        """Retry a failed or cancelled one (or reopen a completed one over what is left)."""
        if repin:
            self.repin_background(name, requested_by=requested_by, reason=reason)
        return self._control(name, "retry", requested_by, reason, from_start=from_start)

    def repin_background(
        self, name: str, *, requested_by: str | None = None, reason: str | None = None
    ) -> ControlResult:
        """Pin the file on disk as the migration's version (its checksum in the changelog too)."""
        actor = with_default_user(Actor(requested_by=requested_by, reason=reason))
        result, checksum = self.background.repin(name, actor=actor)
        self.runner.changelog.set_checksum(name, checksum)
        return result

    def unlock_background(
        self, name: str, *, requested_by: str | None = None, reason: str | None = None
    ) -> dict[str, Any]:
        """Clear the coordinator lock and every lease of a stuck background migration."""
        actor = with_default_user(Actor(requested_by=requested_by, reason=reason))
        return self.background.unlock(name, actor=actor)

    def verify_background(
        self,
        *,
        on_drift: str | None = None,
        collections: list[str] | None = None,
        requested_by: str | None = None,
        reason: str | None = None,
    ) -> dict[str, Any]:
        """Find old-shape documents that reappeared after completion; reopen or report.

        :param on_drift: ``reopen`` or ``report``; default: ``background_on_drift``.
            In drift mode ``stream``/``both`` (``background_drift``), collections
            whose watcher is streaming and fresh are skipped.
        :returns: ``{checked, drifted: [{migration, collection, action}], skipped}``.
        """
        actor = Actor(requested_by=requested_by, reason=reason) if requested_by or reason else None
        return self.background.verify(on_drift=on_drift, collections=collections, actor=actor)

    def audit_background(self, *, stale_after_seconds: float = 15 * 60.0) -> list[Finding]:
        """Findings of the background side; read-only.

        Registered migrations whose file changed (checksum) or is missing; running
        ones without progress for ``stale_after_seconds`` and without a live lease;
        declarative migrations whose collection lacks the version index; dead
        watchers (drift mode ``stream``/``both``). See
        :mod:`migronaut_core.background.audit`.
        """
        return self.background.audit(stale_after_seconds=stale_after_seconds)

    def watch_background(
        self,
        *,
        collections: list[str] | None = None,
        on_drift: str = "reopen",
        cancel: CancelToken | None = None,
        batch_size: int = 100,
        batch_ms: int = 200,
        refresh_seconds: float = 10.0,
        leader_retry_seconds: float | None = None,
    ) -> Watcher:
        """Start the live drift watcher in background threads and return its handle.

        One change stream per collection with a completed forward background
        migration (or per one of ``collections``), led by one process at a time
        across all processes (the ``watch:<collection>`` lock; the others stand
        by and take over when the leader dies). Old-shape writes are upgraded
        moments after they land, through the lanes' write path; at-least-once
        (the resume token is saved after each batch). ``on_drift``: what to do
        with old-shape documents it cannot upgrade itself — those found by the
        probe of a fresh start, or whose upgrade failed: ``reopen`` the
        migration or only ``report`` them.

        :returns: a :class:`~migronaut_core.background.drift.watch.Watcher` with
            ``running``, ``status()`` and ``stop()``; ``cancel`` stops it too.
        :raises ConfigInvalidError: a bad option, or a standalone server (no
            change streams: keep drift mode ``poll``).
        """
        return self.background.watch(
            collections=collections,
            on_drift=on_drift,
            cancel=cancel,
            batch_size=batch_size,
            batch_ms=batch_ms,
            refresh_seconds=refresh_seconds,
            leader_retry_seconds=leader_retry_seconds,
        )

    def background_watch_status(self, collection: str | None = None) -> Any:
        """What the drift watchers recorded: state, leader, counters, last event.

        One row per watched collection (or the one asked for, None when it has
        none); never the resume token.
        """
        return self.background.watch_status(collection)

    def dry_run_background(
        self,
        name: str,
        *,
        sample: int | None = None,
        first: int | None = None,
        validate: bool = False,
        steps: int | None = None,
        from_start: bool = False,
    ) -> DryRunReport | StepDryRunReport:
        """Preview a background migration, registered or not, on a few documents; write nothing.

        Picks ``sample`` random matching documents (20 when neither ``sample``
        nor ``first`` is given) or the ``first`` n by ``_id`` (1 to 10,000), runs
        the transform on copies and reports, per document, the fields the rewrite
        would set and unset (names only) or why it would fail. A registered
        migration is previewed with its registered spec, direction and excluded
        documents; its state is not touched.

        :param validate: also run the real write path in a snapshot transaction
            that is always aborted: unique indexes and validators are checked
            (failures are reported with reason ``write``).
        :param steps: for step migrations: run this many steps (default 1, at most
            100) from the last checkpoint in a transaction that is always aborted;
            only writes made with ``ctx.session`` are rolled back.
        :param from_start: for step migrations: start from no checkpoint rather
            than the registered one.
        :raises ConfigInvalidError: ``sample`` with ``first``, a size out of
            range, or step options for a declarative migration.
        :raises TransactionsUnsupportedError: ``validate`` on a standalone server.
        """
        return self.background.dry_run(
            name,
            sample=sample,
            first=first,
            validate=validate,
            steps=steps,
            from_start=from_start,
        )

    def wait_for_background_lanes(self, name: str, *, timeout_seconds: float = 120.0) -> bool:
        """Wait until no lane holds a lease; False on timeout."""
        return self.background.wait_for_lanes(name, timeout_seconds=timeout_seconds)
