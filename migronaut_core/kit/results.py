"""The typed results of the kit's reads that had only a JSON shape before.

Each is a frozen, slotted dataclass built from what the engine reads (a
runnable row, a control history entry, a converge log entry, a drift watcher's
row, a drift poll's report); its ``to_dict()`` is the JSON the kit's old
dict-returning methods gave, by the one conversion of
:mod:`migronaut_core.json_shape`, so the CLI's ``--json`` and the UI show what
they showed before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from migronaut_core.bson_values import json_safe
from migronaut_core.json_shape import json_field, to_json_dict

__all__ = [
    "ConvergeLogEntry",
    "DriftFinding",
    "HistoryEntry",
    "RunnableMigration",
    "VerifyReport",
    "WatchLeader",
    "WatchResume",
    "WatchStatus",
]


def _time(value: Any) -> datetime | None:
    """A datetime as it is, ISO text (a JSON row's time) parsed; None for anything else."""
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return None
    return None


@dataclass(frozen=True, slots=True)
class RunnableMigration:
    """A background migration with work to do, and its status (``pending``, ``running``…)."""

    name: str = field(metadata=json_field(name="migration"))
    status: str

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> RunnableMigration:
        return cls(name=row["migration"], status=row["status"])

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One entry of a background migration's control history: what, from, to, who, why, when.

    ``action`` is the control or engine act (``pause``, ``retry``, ``unlock``…);
    ``status_from`` and ``status_to`` the statuses it moved between (None when
    it moved none); ``by`` who asked. ``details`` holds the entry as recorded,
    JSON-safe, which is also its ``to_dict()`` (entries of some acts carry more,
    e.g. an unlock's ``lock`` and ``leases``).
    """

    action: str | None
    status_from: str | None
    status_to: str | None
    by: Any
    reason: str | None
    at: datetime | None
    details: Mapping[str, Any]

    @classmethod
    def from_document(cls, entry: Mapping[str, Any]) -> HistoryEntry:
        return cls(
            action=entry.get("action"),
            status_from=entry.get("from"),
            status_to=entry.get("to"),
            by=json_safe(entry.get("by")),
            reason=entry.get("reason"),
            at=_time(entry.get("at")),
            details=json_safe(dict(entry)),
        )

    def to_dict(self) -> dict[str, Any]:
        """The entry as recorded, JSON-safe (times as ISO text)."""
        return dict(self.details)


@dataclass(frozen=True, slots=True)
class ConvergeLogEntry:
    """One act of converge: a version index ``created`` or ``dropped``, by whom and when."""

    collection: str | None
    action: str | None
    index: str | None
    key: Mapping[str, Any]
    at: datetime | None
    by: Mapping[str, Any]

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ConvergeLogEntry:
        """From the row the converge log shows (``collection, action, index, key, at, by``)."""
        return cls(
            collection=row.get("collection"),
            action=row.get("action"),
            index=row.get("index"),
            key=dict(row.get("key") or {}),
            at=_time(row.get("at")),
            by=dict(row.get("by") or {}),
        )

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


@dataclass(frozen=True, slots=True)
class WatchLeader:
    """The process leading a collection's drift watcher."""

    host: str | None
    pid: int | None
    owner: str | None
    since: datetime | None


@dataclass(frozen=True, slots=True)
class WatchResume:
    """Where a new leader would resume: whether a position is saved, its time, how far behind."""

    saved: bool
    at: datetime | None
    lag_seconds: float | None


@dataclass(frozen=True, slots=True)
class WatchStatus:
    """What a collection's drift watcher recorded: state, leader, counters, last event.

    Never the resume token nor the fencing token.
    """

    collection: str
    state: str
    edges: tuple[Any, ...]
    target: Any
    leader: WatchLeader | None
    counters: Mapping[str, int]
    last_event_at: datetime | None
    last_error: str | None
    updated_at: datetime | None
    fresh: bool
    resume: WatchResume

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> WatchStatus:
        """From the row the watch store shows (see its ``watch_view``)."""
        leader = row.get("leader")
        resume = row.get("resume") or {}
        return cls(
            collection=row["collection"],
            state=row["state"],
            edges=tuple(row.get("edges") or ()),
            target=row.get("target"),
            leader=None
            if leader is None
            else WatchLeader(
                host=leader.get("host"),
                pid=leader.get("pid"),
                owner=leader.get("owner"),
                since=_time(leader.get("since")),
            ),
            counters=dict(row.get("counters") or {}),
            last_event_at=_time(row.get("last_event_at")),
            last_error=row.get("last_error"),
            updated_at=_time(row.get("updated_at")),
            fresh=bool(row.get("fresh")),
            resume=WatchResume(
                saved=bool(resume.get("saved")),
                at=_time(resume.get("at")),
                lag_seconds=resume.get("lag_seconds"),
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


@dataclass(frozen=True, slots=True)
class DriftFinding:
    """A completed migration whose collection holds old-shape documents again, and what
    the poll did: ``reopened``, ``unchanged`` (a reopen that did not apply) or ``reported``."""

    migration: str
    collection: str
    action: str


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """What a drift poll checked: migrations checked, those that drifted, those skipped."""

    checked: int
    drifted: tuple[DriftFinding, ...]
    skipped: int

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> VerifyReport:
        return cls(
            checked=row["checked"],
            drifted=tuple(
                DriftFinding(
                    migration=item["migration"],
                    collection=item["collection"],
                    action=item["action"],
                )
                for item in row["drifted"]
            ),
            skipped=row["skipped"],
        )

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)
