"""Which migrations a run touches, and the file check every run makes first.

One home for the choice of targets, shared by the runner (``up``, ``down``) and
its previews (``--plan``), so a preview lists exactly what the run would do:
pending files in name order for ``up``, applied records newest first for
``down``, and the applied files that changed since they were applied.
"""

from __future__ import annotations

from pathlib import Path

from migronaut_core import files
from migronaut_core.changelog import ChangelogRecord
from migronaut_core.errors import ChecksumMismatchError, ConfigInvalidError, NotAppliedError
from migronaut_core.files import MigrationFile


def check_up_arguments(migrations_dir: Path, *, to: str | None, only: str | None) -> None:
    """Check ``up``'s target names before anything else.

    :raises ConfigInvalidError: both are given.
    :raises MigrationFileError: a name is malformed or names no file.
    """
    if to is not None and only is not None:
        raise ConfigInvalidError("give `to` or `only`, not both", {"key": "to"})
    for name in (to, only):
        if name is not None:
            files.find(migrations_dir, name)


def pending_targets(
    available: list[MigrationFile],
    applied: dict[str, ChangelogRecord],
    *,
    to: str | None,
    only: str | None,
) -> list[MigrationFile]:
    """The files ``up`` applies, in order: every pending one, those up to ``to``, or ``only``."""
    if only is not None:
        if only in applied:
            return []
        return [item for item in available if item.name == only]
    pending = [item for item in available if item.name not in applied]
    if to is not None:
        pending = [item for item in pending if item.name <= to]
    return pending


def down_targets(applied: dict[str, ChangelogRecord], to: str | None) -> list[str]:
    """The migrations ``down`` reverts, newest first: the last one, or every one after ``to``.

    :raises NotAppliedError: ``to`` is not applied.
    """
    newest_first = sorted(
        applied.values(), key=lambda record: (record.applied_at, record.name), reverse=True
    )
    if to is None:
        return [newest_first[0].name] if newest_first else []
    if to not in applied:
        raise NotAppliedError(f"migration {to} is not applied", {"name": to})
    return [record.name for record in newest_first if record.name > to]


def check_checksums(
    available: list[MigrationFile],
    applied: dict[str, ChangelogRecord],
    *,
    allow_mismatch: bool,
) -> None:
    """Refuse to run when an applied file changed since it was applied.

    :raises ChecksumMismatchError: one did, and ``allow_mismatch`` is off.
    """
    changed = changed_since_applied(available, applied)
    if changed and not allow_mismatch:
        raise ChecksumMismatchError(
            f"applied migration file(s) changed since they were applied: {', '.join(changed)}"
            "; restore them, or run with allow_checksum_mismatch",
            {"names": changed},
        )


def changed_since_applied(
    available: list[MigrationFile], applied: dict[str, ChangelogRecord]
) -> list[str]:
    """The applied migrations whose file changed since they were applied, in name order."""
    return [
        item.name
        for item in available
        if item.name in applied and item.checksum() != applied[item.name].checksum
    ]
