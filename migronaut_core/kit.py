"""The kit: one object that owns a connection and runs every migronaut operation.

The CLI, the Airflow provider and user code all go through :class:`Migronaut`.
It connects lazily (creating one is free, e.g. while Airflow parses a DAG file)
and owns the client it creates; a client passed in is borrowed and left open.

The kit is the one facade: it wires the runner and the background engine's
:class:`~migronaut_core.background.runtime.Runtime` (with the file cache of
:mod:`~migronaut_core.background.loading` and the runner hooks of
:mod:`~migronaut_core.background.registration`) and calls each operation with
them. It is long because it is the whole public surface with its docstrings;
the work itself happens in the modules it calls.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from pymongo import MongoClient
from pymongo.database import Database
from pymongo.errors import ConfigurationError, PyMongoError

from migronaut_core import files
from migronaut_core.audit import Finding, audit_runner
from migronaut_core.audit import fold as fold_findings
from migronaut_core.background import audit as audits
from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.control import actions as controls
from migronaut_core.background.control.actions import ControlAction, ControlResult
from migronaut_core.background.coordinator import Answer, Driver, coordinate
from migronaut_core.background.drift import verify as drift
from migronaut_core.background.drift import watch as watching
from migronaut_core.background.drift.watch import Watcher
from migronaut_core.background.dry_run import DryRunReport, StepDryRunReport
from migronaut_core.background.dry_run import dry_run as preview
from migronaut_core.background.events import Events, Listener
from migronaut_core.background.indexes import ConvergeReport
from migronaut_core.background.indexes import converge as converge_collections
from migronaut_core.background.lanes.driver import drive
from migronaut_core.background.lanes.lane import SliceResult, run_slice
from migronaut_core.background.loading import BackgroundFiles
from migronaut_core.background.registration import RunnerHooks, runnable, unblock_dependents
from migronaut_core.background.runtime import Runtime
from migronaut_core.background.spec import check_slice_ms
from migronaut_core.background.store import (
    BackgroundStore,
    ConvergeLog,
    WatchStore,
    converge_entry_view,
    watch_view,
)
from migronaut_core.background.telemetry import Telemetry
from migronaut_core.background.views import (
    BackgroundStatusView,
    history_view,
    partition_view,
    read_status,
    read_statuses,
    registered_names,
)
from migronaut_core.baseline import BaselineResult
from migronaut_core.baseline import baseline as adopt
from migronaut_core.changelog import Actor
from migronaut_core.config import Config, load_config
from migronaut_core.errors import ConfigInvalidError, ConnectionFailedError, NotAppliedError
from migronaut_core.lock import LockInfo
from migronaut_core.preview import RunPlan, plan_down, plan_up
from migronaut_core.required_indexes import ensure_indexes
from migronaut_core.runner import (
    MigrationRunner,
    RunOptions,
    RunResult,
    StatusRow,
    with_default_user,
)
from migronaut_core.scrub import redact_uri

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider


class Migronaut:
    """Runs migrations against one MongoDB database.

    :param config: settings; by default read from files and environment
        (:func:`~migronaut_core.config.load_config`) with ``overrides`` on top.
    :param client: an existing client to borrow instead of connecting.
    :param tracer_provider: where background spans go (OpenTelemetry's global by default).
    :param meter_provider: where background metrics go (OpenTelemetry's global by default).
    :param overrides: config keys, e.g. ``uri=…, database=…``.
    """

    def __init__(
        self,
        config: Config | None = None,
        *,
        client: MongoClient[dict[str, Any]] | None = None,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        **overrides: Any,
    ) -> None:
        if config is not None and overrides:
            raise ConfigInvalidError(
                "pass either a Config or config keys, not both", {"key": next(iter(overrides))}
            )
        self.config = config if config is not None else load_config(overrides)
        self._client = client
        self._owns_client = client is None
        self.events = Events()
        self._telemetry = Telemetry(tracer_provider, meter_provider)
        self._runner: MigrationRunner | None = None
        self._runtime: Runtime | None = None
        self._files = BackgroundFiles(self.config, warn_once=self._warn_once)
        self._indexed = False

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
        self._runtime = None
        self._files = BackgroundFiles(self.config, warn_once=self._warn_once)
        self._indexed = False

    def __enter__(self) -> Migronaut:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- wiring --------------------------------------------------------------------------

    @property
    def runner(self) -> MigrationRunner:
        if self._runner is None:
            hooks = RunnerHooks(self.runtime, self._files, self.config, ready=self._ready)
            self._runner = MigrationRunner(self.config, self.client, self.db, background=hooks)
        return self._runner

    @property
    def runtime(self) -> Runtime:
        """The background engine's wiring over this kit's database (built on first use)."""
        if self._runtime is None:
            self._runtime = self._wire()
        return self._runtime

    def _wire(self) -> Runtime:
        def on_completed(name: str) -> None:
            unblock_dependents(runtime, name)

        def adopted_of(names: Sequence[str]) -> set[str]:
            return self.runner.changelog.adopted_names(names)

        runtime = Runtime(
            db=self.db,
            client=self.client,
            store=BackgroundStore(self.db, self.config.background_collections),
            events=self.events,
            load=self._files.load,
            lock_collection=self.config.lock_collection,
            ttl_seconds=self.config.lock_ttl_seconds,
            on_completed=on_completed,
            adopted_of=adopted_of,
            shard_aware=self.config.background_shard_aware,
            telemetry=self._telemetry,
            bookkeeping=self.config.bookkeeping_collections,
        )
        return runtime

    def _ready(self) -> None:
        """Create migronaut's indexes before the first write (once per connection).

        With ``ensure_indexes = false`` only check them: every missing one is
        named (:class:`IndexMissingError`) before anything is written.
        """
        if not self._indexed:
            required = [
                *self.runner.changelog.required_indexes(),
                *self.runtime.store.required_indexes(),
            ]
            ensure_indexes(self.db, required, create=self.config.ensure_indexes)
            self._indexed = True

    def _checked_first(self) -> None:
        """With ``ensure_indexes = false``, check every index before a run takes its lock."""
        if not self.config.ensure_indexes:
            self._ready()

    def _warn_once(self, key: str, message: str, *args: Any) -> None:
        self.runtime.warn_once(key, message, *args)

    def _registered(self, name: str) -> dict[str, Any]:
        """The state of a registered background migration; reads only.

        :raises NotAppliedError: it is not registered.
        """
        files.validate_name(name)
        state = self.runtime.store.get(name)
        if state is None:
            raise NotAppliedError(
                f"background migration {name} is not registered; run `migronaut up` first",
                {"migration": name},
            )
        return state

    # -- migrations ----------------------------------------------------------------------

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
        self._checked_first()
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
        self._checked_first()
        return self.runner.down(to=to, options=opts)

    def status(self) -> list[StatusRow]:
        """Return one row per migration, oldest first."""
        return self.runner.status()

    def plan_up(
        self,
        *,
        to: str | None = None,
        only: str | None = None,
        allow_checksum_mismatch: bool = False,
    ) -> RunPlan:
        """What :meth:`up` would do now, in order, and the refusal it would meet; writes
        nothing (no lock, no index). See :mod:`migronaut_core.preview`."""
        return plan_up(
            self.runner, to=to, only=only, allow_checksum_mismatch=allow_checksum_mismatch
        )

    def plan_down(self, *, to: str | None = None) -> RunPlan:
        """What :meth:`down` would do now, newest first, and the refusal it would meet
        (an irreversible target); writes nothing."""
        return plan_down(self.runner, to=to)

    def baseline(
        self,
        *,
        to: str,
        requested_by: str | None = None,
        reason: str | None = None,
        wait_for_lock_seconds: float = 0,
    ) -> BaselineResult:
        """Record every migration up to ``to`` as applied, adopted, without running it.

        For a database that already has them. See :mod:`migronaut_core.baseline`.

        :raises BaselineConflictError: a later migration is applied, or a background
            one up to ``to`` was registered by migronaut.
        """
        opts = RunOptions(
            wait_for_lock_seconds=wait_for_lock_seconds,
            actor=Actor(requested_by=requested_by, reason=reason),
        )
        self._checked_first()
        return adopt(self.runner, to=to, options=opts)

    def create(self, title: str, *, background: bool = False) -> Path:
        """Create a migration file from a template; needs no database."""
        return files.write_new(self.config.migrations_dir, title, background=background)

    def inspect_lock(self) -> LockInfo | None:
        """Return who holds the run lock, if anyone ever took it."""
        return self.runner.run_lock(Actor()).inspect()

    def converge(
        self,
        *,
        prune: bool = False,
        requested_by: str | None = None,
        reason: str | None = None,
    ) -> ConvergeReport:
        """Create the version index of every declared collection (``collections``,
        ``collections_dir``) that declares versioning.

        ``{field: 1, _id: 1}``, or on a sharded collection the variant carrying
        the shard key (see :mod:`migronaut_core.background.indexes`); idempotent.
        Every index it creates (or drops) is recorded in the converge log with
        ``requested_by`` (default: the OS user) and ``reason``. With
        ``ensure_indexes = false`` it creates nothing (and records nothing): it
        only checks that each one exists.

        :param prune: then drop the version indexes converge created that no
            declared collection wants any more — never an index it did not
            create, never one the shard key may need, never one a background
            migration not completed reads through (those are reported kept).
        :returns: what was created and what existed, collection by collection,
            and what prune dropped or kept.
        :raises ConfigInvalidError: the collection definitions do not load, or
            ``prune`` with ``ensure_indexes = false`` (before anything is done).
        :raises IndexMissingError: ``ensure_indexes = false`` and some are missing.
        """
        actor = with_default_user(Actor(requested_by=requested_by, reason=reason))
        report = converge_collections(
            self.runtime,
            self._files.definitions(),
            self._converge_log(),
            actor=actor,
            create=self.config.ensure_indexes,
            prune_undeclared=prune,
        )
        touched = [item.collection for item in report.collections]
        for collection in {*touched, *(item.collection for item in report.pruned)}:
            self.runtime.forget_indexes(collection)
        return report

    def converge_log(
        self, *, collection: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """What converge created and dropped, newest first; reads only.

        Each entry: ``collection``, ``action`` (``created``/``dropped``),
        ``index`` (its name), ``key``, ``at``, ``by`` (requested_by, reason,
        host, pid).

        :raises ConfigInvalidError: ``limit`` is not a positive integer.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigInvalidError("limit must be a positive integer", {"key": "limit"})
        entries = self._converge_log().read(collection, limit)
        return [converge_entry_view(entry) for entry in entries]

    def _converge_log(self) -> ConvergeLog:
        return ConvergeLog(self.db, self.config.background_collections.converge_log)

    # -- background migrations ------------------------------------------------------------

    def on(self, event: str, listener: Listener) -> Callable[[], None]:
        """Subscribe to engine events (``background:*``, or ``"*"``); returns an unsubscribe."""
        return self.events.on(event, listener)

    def coordinate_background(
        self, name: str, *, driver: Driver | None = None, cancel: CancelToken | None = None
    ) -> Answer:
        """One coordinator step; idempotent, safe from any number of processes."""
        files.validate_name(name)
        self._ready()
        return coordinate(self.runtime, name, driver=driver, cancel=cancel)

    def run_background_slice(
        self, name: str, *, slice_ms: int | None = None, cancel: CancelToken | None = None
    ) -> SliceResult:
        """One slice of one lane: claim a partition, work it until ``slice_ms``, release."""
        files.validate_name(name)
        if slice_ms is not None:
            check_slice_ms(slice_ms)
        self._ready()
        return run_slice(self.runtime, name, slice_ms=slice_ms, cancel=cancel)

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
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigInvalidError(
                "concurrency must be a positive integer", {"key": "concurrency"}
            )
        if slice_ms is not None:
            check_slice_ms(slice_ms)
        self._registered(name)
        self._ready()
        return drive(
            self.runtime,
            name,
            concurrency=concurrency,
            slice_ms=slice_ms,
            until_done=until_done,
            cancel=cancel,
        )

    def runnable_background(self) -> list[dict[str, Any]]:
        """Background migrations with work to do, oldest first."""
        self._ready()
        return runnable(self.runtime)

    # -- reading (no index is created, nothing is written) ---------------------------------

    def background_status(self, name: str | None = None) -> Any:
        """The status view of one background migration (None if unregistered), or of all."""
        if name is None:
            return [view.to_dict() for view in self.background_status_views()]
        files.validate_name(name)
        view = self.background_status_view(name)
        return None if view is None else view.to_dict()

    def background_status_view(self, name: str) -> BackgroundStatusView | None:
        """The typed status of one background migration; None when it is not registered.

        Reads only: no index is created and nothing is written (a blocked one
        is not unblocked here).
        """
        return read_status(self.runtime.store, name)

    def background_status_views(
        self,
        *,
        names: Collection[str] | None = None,
        statuses: Collection[str] | None = None,
    ) -> list[BackgroundStatusView]:
        """The typed status of every registered background migration, oldest first.

        :param names: only these migrations.
        :param statuses: only those in these statuses (empty or None: any).
        Reads only, like :meth:`background_status_view`.
        """
        return read_statuses(self.runtime.store, names=names, statuses=statuses)

    def background_names(self) -> list[str]:
        """Every registered background migration, oldest first; reads only."""
        return registered_names(self.runtime.store)

    def background_partitions(self, name: str) -> list[dict[str, Any]]:
        """The partitions of the current generation: scope, cursor, counters, lease holder."""
        state = self._registered(name)
        partitions = self.runtime.store.list_partitions(name, generation=state["generation"])
        return [partition_view(partition) for partition in partitions]

    def background_history(self, name: str) -> list[dict[str, Any]]:
        """The control history: action, from, to, who, why, when."""
        return history_view(self._registered(name))

    # -- controls ------------------------------------------------------------------------

    def control_background(
        self,
        name: str,
        action: ControlAction,
        *,
        reason: str | None = None,
        actor: str | None = None,
        wait: bool = False,
        repin: bool = False,
    ) -> ControlResult:
        """Apply any of the :data:`~migronaut_core.CONTROL_ACTIONS` to a background migration.

        ``pause``/``cancel``: lanes stop before their next batch (``wait`` until
        they have, ``stopped`` says whether in time). ``resume``: back to
        pending, or blocked while its requirements are open. ``retry``: a failed
        or cancelled one from its checkpoints (a completed one is reopened over
        what is left); ``retry_from_start`` drops all progress; either pins the
        file on disk first with ``repin``. ``repin``: the file on disk becomes
        its version (its checksum in the changelog too; ``replan`` says whether
        its partitions are planned again). ``unlock``: clears the coordinator
        lock and every lease (``lock``, ``leases``; its status is unchanged).
        Recorded in its history with ``actor`` (default: the OS user) and ``reason``.

        :raises ConfigInvalidError: an unknown action, or an option it does not take.
        :raises NotAppliedError: it is not registered.
        :raises BackgroundConflictError: the action does not fit its status.
        """
        action = controls.check_control(action, wait=wait, repin=repin)
        who = with_default_user(Actor(requested_by=actor, reason=reason))
        self._registered(name)
        self._ready()
        if action == "unlock":
            return controls.unlock(self.runtime, name, actor=who)
        if action == "repin":
            return self._repin(name, who)
        if repin:
            self._repin(name, who)
        if action == "retry_from_start":
            return controls.control(self.runtime, name, "retry", actor=who, from_start=True)
        result = controls.control(self.runtime, name, action, actor=who)
        if wait:
            return replace(result, stopped=controls.wait_for_lanes(self.runtime, name))
        return result

    def _repin(self, name: str, actor: Actor) -> ControlResult:
        result, checksum = controls.repin(self.runtime, name, actor=actor)
        self.runner.changelog.set_checksum(name, checksum)
        return result

    def pause_background(
        self,
        name: str,
        *,
        requested_by: str | None = None,
        reason: str | None = None,
        wait: bool = False,
    ) -> ControlResult:
        """Pause; lanes stop before their next batch (``wait`` until they have)."""
        return self.control_background(name, "pause", actor=requested_by, reason=reason, wait=wait)

    def resume_background(
        self, name: str, *, requested_by: str | None = None, reason: str | None = None
    ) -> ControlResult:
        """Resume a paused one (back to blocked while its requirements are open)."""
        return self.control_background(name, "resume", actor=requested_by, reason=reason)

    def cancel_background(
        self,
        name: str,
        *,
        requested_by: str | None = None,
        reason: str | None = None,
        wait: bool = False,
    ) -> ControlResult:
        """Cancel; lanes stop before their next batch (``wait`` until they have)."""
        return self.control_background(name, "cancel", actor=requested_by, reason=reason, wait=wait)

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
        action: ControlAction = "retry_from_start" if from_start else "retry"
        return self.control_background(name, action, actor=requested_by, reason=reason, repin=repin)

    def repin_background(
        self, name: str, *, requested_by: str | None = None, reason: str | None = None
    ) -> ControlResult:
        """Pin the file on disk as the migration's version (its checksum in the changelog too)."""
        return self.control_background(name, "repin", actor=requested_by, reason=reason)

    def unlock_background(
        self, name: str, *, requested_by: str | None = None, reason: str | None = None
    ) -> dict[str, Any]:
        """Clear the coordinator lock and every lease of a stuck background migration."""
        result = self.control_background(name, "unlock", actor=requested_by, reason=reason)
        return {"lock": result.lock, "leases": result.leases}

    # -- drift ---------------------------------------------------------------------------

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
            In drift mode ``stream`` (``background_drift``) the poll is the safety
            net: collections whose watcher is streaming and fresh are skipped. In
            ``both`` it polls every collection, streamed or not.
        :returns: ``{checked, drifted: [{migration, collection, action}], skipped}``.
        """
        actor = Actor(requested_by=requested_by, reason=reason) if requested_by or reason else None
        chosen = self.config.background_on_drift if on_drift is None else on_drift
        checked = "report" if chosen == "report" else _reopen_only(chosen)
        self._ready()
        streamed: set[str] = set()
        if self.config.background_drift == "stream":
            streamed = set(self._watch_store().streaming_collections())
        return drift.verify(
            self.runtime, on_drift=checked, collections=collections, actor=actor, streamed=streamed
        )

    def audit_background(self, *, stale_after_seconds: float = 15 * 60.0) -> list[Finding]:
        """Findings of the background side; read-only.

        Registered migrations whose file changed (checksum) or is missing; running
        ones without progress for ``stale_after_seconds`` and without a live lease;
        declarative migrations whose collection lacks the version index; dead
        watchers (drift mode ``stream``/``both``). See
        :mod:`migronaut_core.background.audit`.
        """
        return audits.audit(
            self.runtime,
            migrations_dir=self.config.migrations_dir,
            watch=self._watch_store() if self.config.background_drift != "poll" else None,
            stale_after_seconds=stale_after_seconds,
        )

    def audit(self, *, stale_after_seconds: float = 15 * 60.0) -> list[Finding]:
        """Everything that needs an operator's look, general then background; read-only.

        The run lock (held, or stale: a killed run), the collection definitions
        (do they load), every migration (pending, failed, its file changed since
        it was applied or gone, its file does not load), the changelog records
        (readable), and the background findings of :meth:`audit_background`;
        each fact once (see :mod:`migronaut_core.audit`). A finding with
        severity ``error`` is something a run would refuse or trip over.
        """
        general = audit_runner(
            lock=self.inspect_lock(),
            records=self.runner.changelog.documents(),
            migrations_dir=self.config.migrations_dir,
            definitions=self._files.definitions,
        )
        background = self.audit_background(stale_after_seconds=stale_after_seconds)
        return fold_findings(general, background)

    def watch_background(
        self,
        *,
        collections: list[str] | None = None,
        on_drift: str | None = None,
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
        migration or only ``report`` them (a ``background:drift`` event);
        default: ``background_on_drift``.

        :returns: a :class:`~migronaut_core.background.drift.watch.Watcher` with
            ``running``, ``status()`` and ``stop()``; ``cancel`` stops it too.
        :raises ConfigInvalidError: a bad option, or a standalone server (no
            change streams: keep drift mode ``poll``).
        """
        settings = watching.watch_settings(
            ttl_seconds=self.config.lock_ttl_seconds,
            collections=collections,
            on_drift=self.config.background_on_drift if on_drift is None else on_drift,
            batch_size=batch_size,
            batch_ms=batch_ms,
            refresh_seconds=refresh_seconds,
            leader_retry_seconds=leader_retry_seconds,
        )
        watching.require_change_streams(self.runtime)
        self._ready()
        return watching.start_watch(self.runtime, self._watch_store(), settings, cancel=cancel)

    def background_watch_status(self, collection: str | None = None) -> Any:
        """What the drift watchers recorded: state, leader, counters, last event.

        One row per watched collection (or the one asked for, None when it has
        none); never the resume token.
        """
        rows = self._watch_store().statuses(collection)
        if collection is not None:
            return watch_view(rows[0]) if rows else None
        return [watch_view(row) for row in rows]

    def _watch_store(self) -> WatchStore:
        return WatchStore(self.runtime.db, self.config.background_collections.watch)

    # -- dry runs ------------------------------------------------------------------------

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
            100) from the last checkpoint in a transaction that is always aborted.
            User code's ``ctx.db`` and ``ctx.client`` are bound to that
            transaction (with ``validate`` too), with ``ctx.session`` or without;
            a plain preview refuses their writes, and any dry run refuses writes
            to migronaut's own collections (``DryRunRefusedError``, reported as
            the document's or the step's error).
        :param from_start: for step migrations: start from no checkpoint rather
            than the registered one.
        :raises ConfigInvalidError: ``sample`` with ``first``, a size out of
            range, or step options for a declarative migration.
        :raises TransactionsUnsupportedError: ``validate`` on a standalone server.
        """
        files.validate_name(name)
        return preview(
            self.runtime,
            name,
            sample=sample,
            first=first,
            validate=validate,
            steps=steps,
            from_start=from_start,
        )


def _reopen_only(on_drift: str) -> drift.OnDrift:
    if on_drift != "reopen":
        raise ConfigInvalidError("on_drift must be 'reopen' or 'report'", {"key": "on_drift"})
    return "reopen"
