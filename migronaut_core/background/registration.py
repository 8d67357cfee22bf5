"""Where the runner meets the background engine: register, revert, and the ``requires`` guard.

:class:`RunnerHooks` is the kit's :class:`~migronaut_core.runner.BackgroundHooks`:
``up`` registers a background migration (``blocked`` while what it requires
has not completed), ``down`` registers the way back or withdraws one that has
rewritten nothing, and a regular migration that ``requires`` background ones
waits for them. With ``background_inline`` the engine drives each one to its
end right there. :func:`unblock_dependents` is the runtime's ``on_completed``;
:func:`runnable` lists what has work, unblocking what may go on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from migronaut_core import files
from migronaut_core.background.lanes.driver import drive
from migronaut_core.background.lifecycle import requires_status, try_unblock, waiting_for
from migronaut_core.background.loading import BackgroundFiles
from migronaut_core.background.runtime import LoadedBackground, Runtime
from migronaut_core.background.spec import BackgroundSpec, read_stored
from migronaut_core.background.store import StateDocument
from migronaut_core.background.validator import held, restore
from migronaut_core.config import Config
from migronaut_core.errors import (
    BackgroundPendingError,
    BaselineConflictError,
    ConfigInvalidError,
    IrreversibleMigrationError,
    MigrationInvalidExportError,
)
from migronaut_core.files import LoadedMigration

if TYPE_CHECKING:
    from migronaut_core.runner import Direction, DownAction, MigrationContext

log = logging.getLogger("migronaut_core.background")


class RunnerHooks:
    """The runner's background hooks over one kit's runtime and files.

    :param ready: makes sure the store's indexes exist before anything is written.
    """

    def __init__(
        self,
        runtime: Runtime,
        background_files: BackgroundFiles,
        config: Config,
        *,
        ready: Callable[[], None],
    ) -> None:
        self.runtime = runtime
        self.files = background_files
        self.config = config
        self._ready = ready

    def check(self, migration: LoadedMigration, direction: Direction) -> None:
        """Everything that would make ``up``/``down`` fail, checked before anything is
        written; reads only (a preview calls it too)."""
        if migration.requires and direction == "up":
            self._check_requires(migration)
        if migration.kind != "background":
            return
        if direction == "up":
            self.files.resolve(migration)
            return
        _, spec, state = self._registered_spec(migration)
        if not spec.reversible and not _undone(state) and self._rewritten(migration.name, state):
            raise _irreversible(migration.name)

    def prepare(self) -> None:
        """Create the store's indexes: before a registration, which may run in a transaction."""
        self._ready()

    def down_action(self, migration: LoadedMigration) -> DownAction:
        """What ``down`` would do with a background migration: ``revert`` or ``withdraw``
        (an undone one: ``revert``, its undo being the way back)."""
        _, spec, state = self._registered_spec(migration)
        return "revert" if spec.reversible or _undone(state) else "withdraw"

    def unfinished(self, requires: Sequence[str]) -> list[dict[str, Any]]:
        """The requirements that have not completed, as ``{migration, status}``; reads only."""
        rows = requires_status(self.runtime, requires)
        return [
            {"migration": row["migration"], "status": row["status"]}
            for row in rows
            if not row["done"]
        ]

    def check_adoptable(self, migration: LoadedMigration) -> None:
        """A baseline adopts a background migration only when migronaut never registered it.

        :raises BaselineConflictError: it has a state (a registration, a revert).
        """
        if migration.kind != "background":
            return
        state = self.runtime.store.states.get(
            migration.name, projection={"status": 1, "direction": 1}
        )
        if state is not None:
            raise BaselineConflictError(
                f"background migration {migration.name} has a state ({state.get('direction')}, "
                f"{state.get('status')}): a baseline adopts only migrations migronaut never ran",
                {"name": migration.name},
            )

    def _check_requires(self, migration: LoadedMigration) -> None:
        migrations_dir = self.config.migrations_dir
        sequence = {item.name for item in files.discover(migrations_dir)}
        for required in migration.requires:
            if required not in sequence:
                raise MigrationInvalidExportError(
                    f"{migration.name} requires {required}, which is not a migration of the "
                    "sequence",
                    {"name": migration.name, "requires": required},
                )
            if required > migration.name:
                raise ConfigInvalidError(
                    f"{migration.name} requires {required}, which sorts after it: `requires` "
                    "must name earlier migrations (a later one could never be done first)",
                    {"key": "requires", "name": migration.name, "requires": required},
                )
            if files.load(files.find(migrations_dir, required)).kind != "background":
                raise MigrationInvalidExportError(
                    f"{migration.name} requires {required}, which is not a background "
                    "migration (regular migrations already run in order)",
                    {"name": migration.name, "requires": required},
                )

    def register(self, migration: LoadedMigration, ctx: MigrationContext) -> dict[str, Any]:
        """``up`` of a background migration: register it (blocked while requirements are open).

        Writes through ``ctx.session`` (in the run's transaction when it has one). A
        forward registration of this very file already there is one whose changelog
        record was never written (a run killed between the two writes, without
        transactions): it is completed as it stands, its progress kept.
        """
        loaded = self.files.resolve(migration)
        state = self.runtime.store.states.get(migration.name)
        if _registered_as(state, loaded.checksum, "forward"):
            assert state is not None
            waits = list(state.get("waits_for") or [])
            return {
                "status": state["status"],
                "direction": "forward",
                "mode": loaded.spec.mode,
                "waits_for": waits,
            }
        waits = waiting_for(self.runtime, loaded.requires)
        status = "blocked" if waits else "pending"
        self.runtime.store.states.register(
            migration.name,
            _registration(loaded, loaded.spec, status=status, direction="forward", waits_for=waits),
            by=None,
            session=ctx.session,
        )
        return {
            "status": status,
            "direction": "forward",
            "mode": loaded.spec.mode,
            "waits_for": waits,
        }

    def revert(self, migration: LoadedMigration, ctx: MigrationContext) -> dict[str, Any]:
        """``down``: register the way back, or withdraw one that has rewritten nothing.

        Goes by the spec registered at ``up`` (the file's functions, whatever its
        spec says now; collection definitions that do not load are passed over; a
        migration already undone from its journal keeps its undo).
        A validator its finalize set is removed first: the collection's validation
        is restored exactly as it was before (:func:`~.validator.restore`), so the
        revert's old-shape writes are accepted.

        :raises PrivilegeMissingError: the restoring ``collMod`` was refused; nothing
            was written.
        :raises LockAlreadyHeldError: a coordinator step of a finalizing migration held
            its lock past one lock TTL; nothing was written.
        """
        loaded, spec, state = self._registered_spec(migration)
        undone = _undone(state)
        if undone or (spec.reversible and _registered_as(state, loaded.checksum, "revert")):
            assert state is not None
            return {
                "status": state["status"],
                "direction": "revert",
                "mode": spec.mode,
                "waits_for": [],
            }
        if not spec.reversible and self._rewritten(migration.name, state):
            raise _irreversible(migration.name)
        with held(self.runtime, state):
            if state is not None:
                restore(self.runtime, state)
            if not spec.reversible:
                self.runtime.store.states.delete(migration.name, session=ctx.session)
                return {"status": "withdrawn", "waits_for": []}
            self.runtime.store.states.register(
                migration.name,
                _registration(loaded, spec, status="pending", direction="revert", waits_for=[]),
                action="revert",
                session=ctx.session,
            )
        return {"status": "pending", "direction": "revert", "mode": spec.mode, "waits_for": []}

    def recorded(
        self, migration: LoadedMigration, direction: Direction, details: dict[str, Any]
    ) -> None:
        """``background:registered``, once the changelog holds the ``up`` or ``down``:
        a registration or a registered revert (with the spec's ``mode``), or a
        withdrawal, with ``waits_for``."""
        self.runtime.emit("background:registered", {"migration": migration.name, **details})

    def stopped_for(self, migration: LoadedMigration, waiting: list[dict[str, Any]]) -> None:
        """``background:waiting``: the run stopped before ``migration`` (``{migration, status}``
        of each requirement not completed)."""
        self.runtime.emit(
            "background:waiting", {"migration": migration.name, "waits_for": list(waiting)}
        )

    def waiting_for(self, requires: Sequence[str]) -> list[dict[str, Any]]:
        """The requirements that have not completed (driven to the end first in inline mode)."""
        rows = self.unfinished(requires)
        if rows and self.config.background_inline:
            self._ready()
            for row in rows:
                if row["status"] != "unregistered":
                    self._run_inline(row["migration"])
            rows = self.unfinished(requires)
        return rows

    def _registered_spec(
        self, migration: LoadedMigration
    ) -> tuple[LoadedBackground, BackgroundSpec, StateDocument | None]:
        """The file, the spec it runs by and its state: the spec stored at registration
        when there is one (the file may have been edited since), else the file's."""
        state = self.runtime.store.states.get(migration.name)
        if state is None or not state.get("spec"):
            loaded = self.files.resolve(migration)
            return loaded, loaded.spec, state
        loaded = self.files.resolve(migration, tolerant=True)
        return loaded, read_stored(state["spec"], name=migration.name), state

    def _rewritten(self, name: str, state: StateDocument | None) -> bool:
        """Whether documents may be in the new shape: progress on its state, or adopted."""
        if state is not None:
            return self._has_rewritten(state)
        adopted_of = self.runtime.adopted_of
        return adopted_of is not None and name in adopted_of([name])

    def after_applied(self, migration: LoadedMigration, ctx: MigrationContext) -> None:
        """With ``background_inline``, run the just-registered migration to its end now."""
        if self.config.background_inline:
            self._run_inline(migration.name)

    def _run_inline(self, name: str) -> None:
        state = self.runtime.store.states.get(name)
        if state is None:
            return
        for required in state.get("waits_for") or [] if state["status"] == "blocked" else []:
            self._run_inline(required)
        log.info("running %s inline", name)
        spec_doc = state.get("spec") or {}
        view = drive(self.runtime, name, concurrency=int(spec_doc.get("max_parallel", 1)))
        if view.get("status") == "blocked":
            waits_for = [str(other) for other in view.get("waits_for", [])]
            raise BackgroundPendingError(
                f"background migration {name} cannot run inline: it waits for "
                f"{', '.join(waits_for)}",
                # As the run's requires guard says it: ``{migration, status}`` each.
                {"migration": name, "waits_for": self.unfinished(waits_for)},
            )

    def _has_rewritten(self, state: StateDocument) -> bool:
        if state.get("status") == "completed" or (state.get("totals") or {}).get("migrated"):
            return True
        return any(
            (partition.get("counters") or {}).get("migrated")
            for partition in self.runtime.store.partitions.list_partitions(state["_id"])
        )


def runnable(rt: Runtime) -> list[dict[str, Any]]:
    """Migrations with work to do, oldest first (blocked ones whose requirements are met are
    unblocked): ``{migration, status}``."""
    rows = []
    waiting = {"status": {"$in": ["pending", "running", "blocked"]}}
    for state in rt.store.states.list_states(waiting):
        current = try_unblock(rt, state) if state["status"] == "blocked" else state
        if current is not None:
            rows.append({"migration": current["_id"], "status": current["status"]})
    return rows


def unblock_dependents(rt: Runtime, name: str) -> None:
    """``name`` completed: move the blocked migrations that required it on, if they can."""
    for state in rt.store.states.list_states({"requires": name, "status": "blocked"}):
        try_unblock(rt, state)


def _registration(
    loaded: LoadedBackground,
    spec: BackgroundSpec,
    *,
    status: str,
    direction: str,
    waits_for: list[str],
) -> dict[str, Any]:
    return {
        "status": status,
        "mode": spec.mode,
        "direction": direction,
        "spec": spec.to_document(),
        "checksum": loaded.checksum,
        "requires": list(loaded.requires) if direction == "forward" else [],
        "waits_for": waits_for,
        "collection": spec.collection,
        "description": loaded.description,
    }


def _registered_as(state: StateDocument | None, checksum: str, direction: str) -> bool:
    """Whether ``state`` is a registration of this file in ``direction`` already."""
    return (
        state is not None
        and state.get("direction", "forward") == direction
        and state.get("checksum") == checksum
    )


def _undone(state: StateDocument | None) -> bool:
    """Whether ``state`` is the undo of its migration (``background undo``): ``down``
    keeps it as the way back, writing nothing more."""
    return state is not None and state.get("undo") == "journal"


def _irreversible(name: str) -> IrreversibleMigrationError:
    return IrreversibleMigrationError(
        f"background migration {name} has no revert and has rewritten documents: it cannot "
        "be reverted",
        {"name": name},
    )
