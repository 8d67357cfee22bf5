"""The background engine as the kit and the runner see it.

:class:`BackgroundService` loads background migration files, registers them when
``up`` applies them (and reverts or withdraws them on ``down``), guards regular
migrations that ``require`` them, and offers every operation the kit exposes:
coordinate, run a slice, drive, status, controls.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pymongo import MongoClient
from pymongo.database import Database

from migronaut_core import files
from migronaut_core.background import audit as audits
from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.control import actions as controls
from migronaut_core.background.coordinator import Answer, Driver, coordinate
from migronaut_core.background.drift import verify as drift
from migronaut_core.background.drift import watch as watching
from migronaut_core.background.dry_run import DryRunReport, StepDryRunReport
from migronaut_core.background.dry_run import dry_run as preview
from migronaut_core.background.events import Events
from migronaut_core.background.indexes import ConvergeReport
from migronaut_core.background.indexes import converge as converge_collections
from migronaut_core.background.lanes.driver import drive
from migronaut_core.background.lanes.lane import SliceResult, run_slice
from migronaut_core.background.lifecycle import requires_status, try_unblock, waiting_for
from migronaut_core.background.runtime import LoadedBackground, Runtime
from migronaut_core.background.spec import check_slice_ms, resolve_spec
from migronaut_core.background.store import BackgroundStore, WatchStore, watch_view
from migronaut_core.background.views import history_view, partition_view, state_view
from migronaut_core.changelog import Actor
from migronaut_core.config import Config
from migronaut_core.definitions import CollectionDefinition, Versioning, load_definitions
from migronaut_core.errors import (
    BackgroundPendingError,
    ConfigInvalidError,
    IrreversibleMigrationError,
    MigrationInvalidExportError,
    NotAppliedError,
)
from migronaut_core.files import LoadedMigration

if TYPE_CHECKING:
    from migronaut_core.runner import Direction, MigrationContext

log = logging.getLogger("migronaut_core.background")


class BackgroundService:
    """Background migrations over one database; one per kit, safe to share across threads."""

    def __init__(
        self,
        config: Config,
        client: MongoClient[dict[str, Any]],
        db: Database[dict[str, Any]],
        events: Events,
    ) -> None:
        self.config = config
        self.events = events
        self.store = BackgroundStore(db, config.background_collections)
        self.runtime = Runtime(
            db=db,
            client=client,
            store=self.store,
            events=events,
            load=self.load,
            lock_collection=config.lock_collection,
            ttl_seconds=config.lock_ttl_seconds,
            on_completed=self._unblock_dependents,
            shard_aware=config.background_shard_aware,
        )
        self._cache: dict[str, LoadedBackground] = {}
        self._cache_lock = threading.Lock()
        self._indexed = False
        self._definitions: dict[str, CollectionDefinition] | None = None

    @property
    def migrations_dir(self) -> Path:
        return self.config.migrations_dir

    def ready(self) -> None:
        """Create the store's indexes once per service (idempotent on the server)."""
        if not self._indexed:
            self.store.ensure_indexes()
            self._indexed = True

    # -- loading files ---------------------------------------------------------------------

    def load(self, name: str, *, tolerant: bool = False) -> LoadedBackground:
        """A background migration file, resolved and validated; cached by checksum.

        :param tolerant: for a registered migration (whose stored spec stands):
            collection definitions that do not load are warned about and passed over.
        """
        file = files.find(self.migrations_dir, name)
        checksum = file.checksum()
        with self._cache_lock:
            hit = self._cache.get(name)
        if hit is not None and hit.checksum == checksum:
            return hit
        migration = files.load(file)
        try:
            declared, complete = self._declared(migration), True
        except ConfigInvalidError as exc:
            if not tolerant:
                raise
            self.runtime.warn_once(
                f"definitions:{name}",
                "the collection definitions do not load (%s); %s goes by the spec it was "
                "registered with",
                exc.message,
                name,
            )
            declared, complete = None, False
        loaded = self._resolved(migration, declared)
        if complete:  # never remember a file resolved without its definitions
            with self._cache_lock:
                self._cache[name] = loaded
        return loaded

    # -- collection definitions -----------------------------------------------------------

    def definitions(self) -> list[CollectionDefinition]:
        """The declared collections (read once per service).

        :raises ConfigInvalidError: a definition or definition file is malformed.
        """
        if self._definitions is None:
            found = load_definitions(
                self.config.collections,
                self.config.collections_dir,
                reserved=self.config.bookkeeping_collections,
            )
            self._definitions = {definition.name: definition for definition in found}
        return list(self._definitions.values())

    def versioning_of(self, collection: str) -> Versioning | None:
        """A declared collection's versioning, or ``None``.

        :raises ConfigInvalidError: the definitions do not load.
        """
        if self.config.collections is None and self.config.collections_dir is None:
            return None
        self.definitions()
        assert self._definitions is not None
        definition = self._definitions.get(collection)
        return None if definition is None else definition.versioning

    def converge(self) -> ConvergeReport:
        """Create the version index of every declared collection; never drops one.

        See :func:`migronaut_core.background.indexes.converge`.
        """
        report = converge_collections(self.runtime, self.definitions())
        for collection in report.collections:
            self.runtime.forget_indexes(collection.collection)
        return report

    def resolve(self, migration: LoadedMigration) -> LoadedBackground:
        """Resolve a background migration file against its collection's declared versioning.

        :raises ConfigInvalidError: the spec is invalid, contradicts the declared
            versioning, or the definitions do not load.
        """
        return self._resolved(migration, self._declared(migration))

    def _resolved(
        self, migration: LoadedMigration, declared: Versioning | None
    ) -> LoadedBackground:
        if migration.kind != "background":
            raise MigrationInvalidExportError(
                f"{migration.name} is not a background migration", {"name": migration.name}
            )
        spec, fns = resolve_spec(
            migration.name,
            migration.module,
            versioning=None if declared is None else declared.to_dict(),
        )
        if spec.collection in self.config.bookkeeping_collections:
            raise MigrationInvalidExportError(
                f"background migration {migration.name} targets one of migronaut's own collections",
                {"name": migration.name},
            )
        return LoadedBackground(
            name=migration.name,
            spec=spec,
            fns=fns,
            checksum=migration.checksum,
            requires=migration.requires,
            description=migration.description,
        )

    def _declared(self, migration: LoadedMigration) -> Versioning | None:
        """The declared versioning of the collection a background file names, if any."""
        raw = getattr(migration.module, "background", None)
        collection = raw.get("collection") if isinstance(raw, Mapping) else None
        if not isinstance(collection, str) or collection in self.config.bookkeeping_collections:
            return None
        return self.versioning_of(collection)

    # -- the runner's hooks -----------------------------------------------------------

    def check(self, migration: LoadedMigration, direction: Direction) -> None:
        """Everything that would make ``up``/``down`` fail, checked before anything is written."""
        if migration.requires and direction == "up":
            self._check_requires(migration)
        if migration.kind != "background":
            return
        if direction == "up":
            self.resolve(migration)
            return
        self.ready()
        state = self.store.get(migration.name)
        spec = self.resolve(migration).spec
        if not spec.reversible and state is not None and self._has_rewritten(state):
            raise IrreversibleMigrationError(
                f"background migration {migration.name} has no revert and has rewritten "
                "documents: it cannot be reverted",
                {"name": migration.name},
            )

    def _check_requires(self, migration: LoadedMigration) -> None:
        sequence = {item.name for item in files.discover(self.migrations_dir)}
        for required in migration.requires:
            if required not in sequence:
                raise MigrationInvalidExportError(
                    f"{migration.name} requires {required}, which is not a migration of the "
                    "sequence",
                    {"name": migration.name, "requires": required},
                )
            if files.load(files.find(self.migrations_dir, required)).kind != "background":
                raise MigrationInvalidExportError(
                    f"{migration.name} requires {required}, which is not a background "
                    "migration (regular migrations already run in order)",
                    {"name": migration.name, "requires": required},
                )

    def register(self, migration: LoadedMigration, ctx: MigrationContext) -> dict[str, Any]:
        """``up`` of a background migration: register it (blocked while requirements are open)."""
        self.ready()
        loaded = self.resolve(migration)
        waits = waiting_for(self.runtime, loaded.requires)
        status = "blocked" if waits else "pending"
        self.store.register(
            migration.name,
            {
                "status": status,
                "mode": loaded.spec.mode,
                "direction": "forward",
                "spec": loaded.spec.to_document(),
                "checksum": loaded.checksum,
                "requires": list(loaded.requires),
                "waits_for": waits,
                "collection": loaded.spec.collection,
                "description": loaded.description,
            },
            by=None,
        )
        self.runtime.emit(
            "background:registered",
            {"migration": migration.name, "status": status, "direction": "forward"},
        )
        return {"status": status, "direction": "forward", "waits_for": waits}

    def revert(self, migration: LoadedMigration, ctx: MigrationContext) -> dict[str, Any]:
        """``down``: register the way back, or withdraw one that has rewritten nothing."""
        self.ready()
        loaded = self.resolve(migration)
        if loaded.spec.reversible:
            self.store.register(
                migration.name,
                {
                    "status": "pending",
                    "mode": loaded.spec.mode,
                    "direction": "revert",
                    "spec": loaded.spec.to_document(),
                    "checksum": loaded.checksum,
                    "requires": [],
                    "waits_for": [],
                    "collection": loaded.spec.collection,
                    "description": loaded.description,
                },
                action="revert",
            )
            return {"status": "pending", "direction": "revert"}
        state = self.store.get(migration.name)
        if state is not None and self._has_rewritten(state):
            raise IrreversibleMigrationError(
                f"background migration {migration.name} has no revert and has rewritten "
                "documents: it cannot be reverted",
                {"name": migration.name},
            )
        self.store.delete(migration.name)
        return {"status": "withdrawn"}

    def waiting_for(self, requires: Sequence[str]) -> list[dict[str, Any]]:
        """The requirements that have not completed (driven to the end first in inline mode)."""
        self.ready()
        rows = [row for row in requires_status(self.runtime, requires) if not row["done"]]
        if rows and self.config.background_inline:
            for row in rows:
                if row["status"] != "unregistered":
                    self._run_inline(row["migration"])
            rows = [row for row in requires_status(self.runtime, requires) if not row["done"]]
        return [{"migration": row["migration"], "status": row["status"]} for row in rows]

    def after_applied(self, migration: LoadedMigration, ctx: MigrationContext) -> None:
        if self.config.background_inline:
            self._run_inline(migration.name)

    def _run_inline(self, name: str) -> None:
        state = self.store.get(name)
        if state is None:
            return
        for required in state.get("waits_for") or [] if state["status"] == "blocked" else []:
            self._run_inline(required)
        log.info("running %s inline", name)
        spec_doc = state.get("spec") or {}
        view = self.run(name, concurrency=int(spec_doc.get("max_parallel", 1)))
        if view.get("status") == "blocked":
            raise BackgroundPendingError(
                f"background migration {name} cannot run inline: it waits for "
                f"{', '.join(view.get('waits_for', []))}",
                {"migration": name},
            )

    def _has_rewritten(self, state: dict[str, Any]) -> bool:
        if state.get("status") == "completed" or (state.get("totals") or {}).get("migrated"):
            return True
        return any(
            (partition.get("counters") or {}).get("migrated")
            for partition in self.store.list_partitions(state["_id"])
        )

    def _unblock_dependents(self, name: str) -> None:
        for state in self.store.list_states({"requires": name, "status": "blocked"}):
            try_unblock(self.runtime, state)

    # -- operations ------------------------------------------------------------------------

    def _registered(self, name: str) -> dict[str, Any]:
        files.validate_name(name)
        self.ready()
        state = self.store.get(name)
        if state is None:
            raise NotAppliedError(
                f"background migration {name} is not registered; run `migronaut up` first",
                {"migration": name},
            )
        return state

    def coordinate(
        self, name: str, *, driver: Driver | None = None, cancel: CancelToken | None = None
    ) -> Answer:
        """One coordinator step (see :mod:`~migronaut_core.background.coordinator`)."""
        files.validate_name(name)
        self.ready()
        return coordinate(self.runtime, name, driver=driver, cancel=cancel)

    def run_slice(
        self, name: str, *, slice_ms: int | None = None, cancel: CancelToken | None = None
    ) -> SliceResult:
        """One slice of one lane (see :mod:`~migronaut_core.background.lanes.lane`)."""
        files.validate_name(name)
        if slice_ms is not None:
            check_slice_ms(slice_ms)
        self.ready()
        return run_slice(self.runtime, name, slice_ms=slice_ms, cancel=cancel)

    def run(
        self,
        name: str,
        *,
        concurrency: int = 1,
        slice_ms: int | None = None,
        until_done: bool = True,
        cancel: CancelToken | None = None,
    ) -> dict[str, Any]:
        """Drive it from this process with up to ``concurrency`` lanes; the final status."""
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigInvalidError(
                "concurrency must be a positive integer", {"key": "concurrency"}
            )
        if slice_ms is not None:
            check_slice_ms(slice_ms)
        self._registered(name)
        return drive(
            self.runtime,
            name,
            concurrency=concurrency,
            slice_ms=slice_ms,
            until_done=until_done,
            cancel=cancel,
        )

    def status(self, name: str) -> dict[str, Any] | None:
        files.validate_name(name)
        self.ready()
        state = self.store.get(name)
        return None if state is None else state_view(self.store, state)

    def statuses(self) -> list[dict[str, Any]]:
        self.ready()
        return [state_view(self.store, state) for state in self.store.list_states()]

    def partitions(self, name: str) -> list[dict[str, Any]]:
        state = self._registered(name)
        return [
            partition_view(partition)
            for partition in self.store.list_partitions(name, generation=state["generation"])
        ]

    def history(self, name: str) -> list[dict[str, Any]]:
        return history_view(self._registered(name))

    def runnable(self) -> list[dict[str, Any]]:
        """Migrations with work to do (blocked ones whose requirements are met are unblocked)."""
        self.ready()
        rows = []
        for state in self.store.list_states({"status": {"$in": ["pending", "running", "blocked"]}}):
            current = try_unblock(self.runtime, state) if state["status"] == "blocked" else state
            if current is not None:
                rows.append({"migration": current["_id"], "status": current["status"]})
        return rows

    def control(
        self,
        name: str,
        action: controls.Action,
        *,
        actor: Actor | None = None,
        from_start: bool = False,
        wait: bool = False,
    ) -> controls.ControlResult:
        self._registered(name)
        result = controls.control(self.runtime, name, action, actor=actor, from_start=from_start)
        if wait and action in ("pause", "cancel"):
            stopped = controls.wait_for_lanes(self.runtime, name)
            return controls.ControlResult(result.applied, result.status, stopped=stopped)
        return result

    def repin(self, name: str, *, actor: Actor | None = None) -> tuple[controls.ControlResult, str]:
        self._registered(name)
        return controls.repin(self.runtime, name, actor=actor)

    def unlock(self, name: str, *, actor: Actor | None = None) -> dict[str, Any]:
        self._registered(name)
        return controls.unlock(self.runtime, name, actor=actor)

    def verify(
        self,
        *,
        on_drift: str | None = None,
        collections: Sequence[str] | None = None,
        actor: Actor | None = None,
    ) -> dict[str, Any]:
        """Probe completed migrations for old-shape documents (see :mod:`.drift`).

        ``on_drift`` defaults to ``background_on_drift``; in drift mode
        ``stream``/``both`` the collections a fresh watcher streams are skipped.
        """
        if on_drift is None:
            on_drift = self.config.background_on_drift
        checked = "report" if on_drift == "report" else _reopen_only(on_drift)
        self.ready()
        streamed: set[str] = set()
        if self.config.background_drift in ("stream", "both"):
            streamed = set(self._watch_store().streaming_collections())
        return drift.verify(
            self.runtime,
            on_drift=checked,
            collections=collections,
            actor=actor,
            streamed=streamed,
        )

    def audit(
        self, *, stale_after_seconds: float = audits.STALE_AFTER_SECONDS
    ) -> list[audits.Finding]:
        """What needs a look on the background side (see :mod:`.audit`)."""
        return audits.audit(
            self.runtime,
            migrations_dir=self.migrations_dir,
            watch=self._watch_store() if self.config.background_drift != "poll" else None,
            stale_after_seconds=stale_after_seconds,
        )

    def wait_for_lanes(self, name: str, *, timeout_seconds: float = 120.0) -> bool:
        self._registered(name)
        return controls.wait_for_lanes(self.runtime, name, timeout_seconds=timeout_seconds)

    # -- the live drift watcher ----------------------------------------------------------

    def watch(
        self,
        *,
        collections: Sequence[str] | None = None,
        on_drift: str = "reopen",
        cancel: CancelToken | None = None,
        batch_size: int = 100,
        batch_ms: int = 200,
        refresh_seconds: float = 10.0,
        leader_retry_seconds: float | None = None,
    ) -> watching.Watcher:
        """Start the change-stream drift watcher (see :mod:`.watch`); returns its handle.

        Options are checked first, then the deployment (a standalone server has no
        change streams), before anything is written.
        """
        settings = watching.watch_settings(
            ttl_seconds=self.config.lock_ttl_seconds,
            collections=collections,
            on_drift=on_drift,
            batch_size=batch_size,
            batch_ms=batch_ms,
            refresh_seconds=refresh_seconds,
            leader_retry_seconds=leader_retry_seconds,
        )
        watching.require_change_streams(self.runtime)
        self.ready()
        return watching.start_watch(self.runtime, self._watch_store(), settings, cancel=cancel)

    def watch_status(self, collection: str | None = None) -> Any:
        """The watcher rows (one collection's, None if it has none; or all), never a token."""
        rows = self._watch_store().statuses(collection)
        if collection is not None:
            return watch_view(rows[0]) if rows else None
        return [watch_view(row) for row in rows]

    def _watch_store(self) -> WatchStore:
        return WatchStore(self.runtime.db, self.config.background_collections.watch)

    # -- dry runs ----------------------------------------------------------------------------

    def dry_run(
        self,
        name: str,
        *,
        sample: int | None = None,
        first: int | None = None,
        validate: bool = False,
        steps: int | None = None,
        from_start: bool = False,
    ) -> DryRunReport | StepDryRunReport:
        """Preview a background migration, registered or not, writing nothing (see :mod:`.dry_run`).

        No index is ensured and no state is created: only reads, and with
        ``validate`` a transaction that is always aborted.
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
