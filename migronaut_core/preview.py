"""Previews of ``up`` and ``down`` (``--plan``): what a run would do, writing nothing.

A plan lists the migrations the run would touch, in the order it would touch
them, with their kind, what they ``requires`` and which of those have not
completed yet (``waits_for``), and what the run would do with each. It makes
the run's checks (changed files, ``requires``, transactions, irreversible
targets) and reports the first refusal the run would meet, instead of raising
it. It reads the changelog and the background states and nothing else: no lock
is taken, no index created, no collection touched.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from migronaut_core import files
from migronaut_core.errors import IrreversibleMigrationError, MigronautError
from migronaut_core.files import LoadedMigration, MigrationKind
from migronaut_core.json_shape import json_field, to_json_dict
from migronaut_core.runner import Direction, MigrationRunner
from migronaut_core.targets import (
    check_checksums,
    check_up_arguments,
    down_targets,
    pending_targets,
)

Action = Literal["apply", "register", "revert", "withdraw"]
#: The ``status`` of a requirement that this same run would register before.
PLANNED = "planned"


@dataclass(frozen=True, slots=True)
class PlannedMigration:
    """One migration of a plan.

    ``action``: ``apply`` (a regular ``up``), ``register`` (a background ``up``),
    ``revert`` (a regular ``down``, or a background one registering its way
    back) or ``withdraw`` (a one-way background one that has rewritten nothing).
    ``waits_for``: the requirements not completed, ``{migration, status}``; a
    regular migration with any stops the run there, a background one registers
    ``blocked``. ``refusal``: why the run would refuse this migration.
    """

    name: str
    kind: MigrationKind
    action: Action
    requires: tuple[str, ...] = ()
    waits_for: tuple[dict[str, str], ...] = ()
    refusal: MigronautError | None = field(
        default=None, metadata=json_field(name="refused", omit="none")
    )

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


@dataclass(frozen=True, slots=True)
class RunPlan:
    """What ``up`` or ``down`` would do now; ``refusal`` is the error it would stop with
    before running anything (then it would run none of them)."""

    direction: Direction
    migrations: tuple[PlannedMigration, ...]
    refusal: MigronautError | None = field(default=None, metadata=json_field(name="refused"))

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


def plan_up(
    runner: MigrationRunner,
    *,
    to: str | None = None,
    only: str | None = None,
    allow_checksum_mismatch: bool = False,
) -> RunPlan:
    """What ``up`` with these arguments would do; writes nothing.

    :raises ConfigInvalidError: ``to`` with ``only``.
    :raises MigrationFileError: a name is unknown or malformed, or a target does not load.
    """
    check_up_arguments(runner.migrations_dir, to=to, only=only)
    available = files.discover(runner.migrations_dir)
    applied = runner.changelog.applied()
    loaded = [files.load(item) for item in pending_targets(available, applied, to=to, only=only)]
    refusals: list[MigronautError] = []
    _collect(refusals, check_checksums, available, applied, allow_mismatch=allow_checksum_mismatch)
    planned: list[PlannedMigration] = []
    for migration in loaded:
        refusal = _refusal(runner, migration, "up")
        refusals.extend([refusal] if refusal is not None else [])
        earlier = {item.name for item in planned}
        planned.append(_planned_up(runner, migration, earlier, refusal))
    _collect(refusals, runner.check_transactions, loaded)
    return RunPlan("up", tuple(planned), refusals[0] if refusals else None)


def plan_down(runner: MigrationRunner, *, to: str | None = None) -> RunPlan:
    """What ``down`` with these arguments would do; writes nothing.

    :raises NotAppliedError: ``to`` is not applied.
    :raises MigrationFileError: a name is malformed, or a target's file is missing or
        does not load.
    """
    if to is not None:
        files.validate_name(to)
    names = down_targets(runner.changelog.applied(), to)
    loaded = [files.load(files.find(runner.migrations_dir, name)) for name in names]
    refusals: list[MigronautError] = []
    planned = []
    for migration in loaded:
        refusal = _refusal(runner, migration, "down")
        refusals.extend([refusal] if refusal is not None else [])
        planned.append(_planned_down(runner, migration, refusal))
    _collect(refusals, runner.check_transactions, loaded)
    return RunPlan("down", tuple(planned), refusals[0] if refusals else None)


def _planned_up(
    runner: MigrationRunner,
    migration: LoadedMigration,
    earlier: set[str],
    refusal: MigronautError | None,
) -> PlannedMigration:
    waits: list[dict[str, str]] = []
    if migration.requires and refusal is None:
        for entry in runner.background.unfinished(migration.requires):
            planned_here = entry["migration"] in earlier and entry["status"] == "unregistered"
            waits.append({**entry, "status": PLANNED} if planned_here else entry)
    return PlannedMigration(
        name=migration.name,
        kind=migration.kind,
        action="register" if migration.kind == "background" else "apply",
        requires=migration.requires,
        waits_for=tuple(waits),
        refusal=refusal,
    )


def _planned_down(
    runner: MigrationRunner, migration: LoadedMigration, refusal: MigronautError | None
) -> PlannedMigration:
    action: Action = "revert"
    if migration.kind == "background" and refusal is None:
        action = runner.background.down_action(migration)
    elif isinstance(refusal, IrreversibleMigrationError) and migration.kind == "background":
        action = "withdraw"
    return PlannedMigration(migration.name, migration.kind, action, refusal=refusal)


def _refusal(
    runner: MigrationRunner, migration: LoadedMigration, direction: Direction
) -> MigronautError | None:
    """The error the run's checks would raise for this migration, or None."""
    try:
        runner.check_target(migration, direction)
    except MigronautError as exc:
        return exc
    return None


def _collect(
    refusals: list[MigronautError], check: Callable[..., object], *args: Any, **kwargs: Any
) -> None:
    try:
        check(*args, **kwargs)
    except MigronautError as exc:
        refusals.append(exc)
