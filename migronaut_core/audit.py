"""The general audit: what needs an operator's look, read-only, in one shape.

:func:`audit_runner` checks what the runner keeps; the kit folds the background
engine's findings (:mod:`migronaut_core.background.audit`) in with :func:`fold`.
Every finding is a :class:`Finding`; an ``error`` is something a run would
refuse or trip over, a ``warning`` something to look at:

================================  =========  ===================================================
kind                              severity   when
================================  =========  ===================================================
``lock_held``                     warning    the run lock is held: a run is in progress
``lock_stale``                    warning    the run lock was never released and expired: a
                                             run was killed (the next one takes it over)
``definitions_invalid``           error      the collection definitions do not load
``file_invalid``                  error      a migration file has a malformed name, or a
                                             pending one does not load
``pending``                       warning    a migration is not applied yet
``failed``                        error      a migration's last attempt failed
``checksum_mismatch``             error      an applied migration's file changed since
                                             (``up`` refuses to run)
``file_missing``                  warning    an applied migration's file is gone (an error
                                             for a registered background one)
``record_invalid``                error      a changelog record cannot be read
``checksum_changed`` … (more)     —          the background findings, see
                                             :mod:`migronaut_core.background.audit`
================================  =========  ===================================================

Messages name migrations, collections, locks and times, never document values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from migronaut_core import files
from migronaut_core.changelog import ChangelogRecord
from migronaut_core.errors import MigronautError
from migronaut_core.json_shape import to_json_dict
from migronaut_core.lock import LockInfo
from migronaut_core.targets import changed_since_applied

__all__ = ["Finding", "FindingKind", "Severity", "audit_runner", "fold"]

FindingKind = Literal[
    "lock_held",
    "lock_stale",
    "definitions_invalid",
    "file_invalid",
    "pending",
    "failed",
    "checksum_mismatch",
    "file_missing",
    "record_invalid",
    "checksum_changed",
    "stalled",
    "missing_version_index",
    "dead_watcher",
]
Severity = Literal["warning", "error"]

_RECORD_STATUSES = ("applied", "failed")
_RECORD_KINDS = ("regular", "background")


@dataclass(frozen=True, slots=True)
class Finding:
    """One audit finding.

    :param kind: what was found (see the module docstring).
    :param migration: the migration it concerns, if any.
    :param collection: the collection it concerns, if any.
    :param message: what and what to do; never document values.
    :param severity: ``warning`` or ``error``.
    """

    kind: FindingKind
    migration: str | None
    collection: str | None
    message: str
    severity: Severity

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


def audit_runner(
    *,
    lock: LockInfo | None,
    records: Iterable[Mapping[str, Any]],
    migrations_dir: Path,
    definitions: Callable[[], object],
) -> list[Finding]:
    """The runner's findings: the run lock, the definitions, then migration by migration.

    :param lock: the run lock as the server sees it (None: never taken).
    :param records: the changelog records as stored.
    :param definitions: loads the collection definitions (raises
        :class:`MigronautError` when they do not load).
    """
    findings = list(_lock_findings(lock))
    try:
        definitions()
    except MigronautError as error:
        findings.append(
            Finding(
                "definitions_invalid",
                None,
                None,
                f"the collection definitions do not load: {error.message}",
                "error",
            )
        )
    readable, broken = _read_records(records)
    findings.extend(broken)
    findings.extend(_migration_findings(readable, migrations_dir))
    return findings


def fold(general: Sequence[Finding], background: Sequence[Finding]) -> list[Finding]:
    """One list: the general findings, then the background ones, each fact said once.

    A background migration whose file changed is the changelog's
    ``checksum_mismatch`` (an error: ``up`` refuses); one whose file is gone is the
    background's ``file_missing`` (an error: its lanes need the file).
    """
    mismatched = {f.migration for f in general if f.kind == "checksum_mismatch"}
    missing = {f.migration for f in background if f.kind == "file_missing"}
    return [
        *(f for f in general if not (f.kind == "file_missing" and f.migration in missing)),
        *(
            f
            for f in background
            if not (f.kind == "checksum_changed" and f.migration in mismatched)
        ),
    ]


def _lock_findings(lock: LockInfo | None) -> Iterator[Finding]:
    if lock is None:
        return
    who = f"{lock.requested_by or 'pid ' + str(lock.pid)} on {lock.host or '?'}"
    since = lock.acquired_at.isoformat() if lock.acquired_at else "?"
    if lock.held:
        yield Finding(
            "lock_held",
            None,
            None,
            f"the run lock is held by {who} since {since}: a run is in progress "
            f"(it expires {lock.expires_at.isoformat()} unless renewed)",
            "warning",
        )
    elif lock.stale:
        yield Finding(
            "lock_stale",
            None,
            None,
            f"the run lock taken by {who} at {since} expired without being released "
            f"({lock.expires_at.isoformat()}): that run was killed; the next run takes the "
            "lock over — check what it was applying (`migronaut status`)",
            "warning",
        )


def _read_records(
    documents: Iterable[Mapping[str, Any]],
) -> tuple[dict[str, ChangelogRecord], list[Finding]]:
    readable: dict[str, ChangelogRecord] = {}
    broken: list[Finding] = []
    for doc in documents:
        name = doc.get("_id")
        problem = _record_problem(doc)
        if problem is None:
            try:
                readable[str(name)] = ChangelogRecord.from_document(dict(doc))
                continue
            except (KeyError, TypeError, ValueError):
                problem = "a field of it has the wrong type"
        shown = name if isinstance(name, str) and len(name) <= 200 and name.isprintable() else None
        broken.append(
            Finding(
                "record_invalid",
                shown,
                None,
                f"the changelog record {shown or '(unnamed)'} cannot be read: {problem}; "
                "status and up cannot judge it (fix or remove the record)",
                "error",
            )
        )
    return readable, broken


def _record_problem(doc: Mapping[str, Any]) -> str | None:
    """What makes a stored changelog record unreadable, or None."""
    try:
        files.validate_name(doc["_id"])
    except (MigronautError, KeyError):
        return "its name is not a migration name"
    if doc.get("status", "applied") not in _RECORD_STATUSES:
        return "its status is neither applied nor failed"
    if doc.get("kind", "regular") not in _RECORD_KINDS:
        return "its kind is neither regular nor background"
    if not isinstance(doc.get("applied_at"), datetime):
        return "it has no applied_at time"
    if doc.get("status", "applied") == "applied" and not isinstance(doc.get("checksum"), str):
        return "it has no checksum"
    return None


def _migration_findings(
    records: Mapping[str, ChangelogRecord], migrations_dir: Path
) -> Iterator[Finding]:
    try:
        found = files.discover(migrations_dir)
    except MigronautError as error:
        yield Finding(
            "file_invalid",
            None,
            None,
            f"{migrations_dir} holds a file that is not a migration: {error.message}",
            "error",
        )
        return
    available = {item.name: item for item in found}
    applied = {name: record for name, record in records.items() if record.status == "applied"}
    changed = set(changed_since_applied(found, applied))
    for name in sorted(set(available) | set(records)):
        file, record = available.get(name), records.get(name)
        if record is not None and record.status == "applied":
            yield from _applied_findings(record, file, migrations_dir, changed=name in changed)
        elif record is not None:
            yield _failed_finding(record)
        elif file is not None:
            yield from _pending_findings(name, file)


def _applied_findings(
    record: ChangelogRecord,
    file: files.MigrationFile | None,
    migrations_dir: Path,
    *,
    changed: bool,
) -> Iterator[Finding]:
    name = record.name
    if file is None:
        yield Finding(
            "file_missing",
            name,
            None,
            f"{name} is applied but its file {name}.py is not in {migrations_dir} "
            "(it cannot be reverted)",
            "warning",
        )
    elif changed:
        remedy = (
            "`migronaut background repin` pins the file on disk"
            if record.kind == "background"
            else "restore the file, or run with --allow-checksum-mismatch"
        )
        yield Finding(
            "checksum_mismatch",
            name,
            None,
            f"{name}.py changed since {name} was applied: `up` refuses to run ({remedy})",
            "error",
        )


def _failed_finding(record: ChangelogRecord) -> Finding:
    code = (record.error or {}).get("code") or "unknown error"
    return Finding(
        "failed",
        record.name,
        None,
        f"the last attempt of {record.name} failed ({code}) at "
        f"{record.applied_at.isoformat()}; fix it and run `migronaut up` again",
        "error",
    )


def _pending_findings(name: str, file: files.MigrationFile) -> Iterator[Finding]:
    try:
        files.load(file)
    except MigronautError as error:
        yield Finding(
            "file_invalid",
            name,
            None,
            f"{name} is pending and its file does not load: {error.message}",
            "error",
        )
        return
    yield Finding("pending", name, None, f"{name} is not applied yet", "warning")
