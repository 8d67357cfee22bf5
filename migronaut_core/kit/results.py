"""The typed results of the kit's reads that had only a JSON shape before.

Each is a frozen, slotted dataclass built from what the engine reads (a
runnable row, a control history entry, a converge log entry and a drift
watcher's row as the store keeps them, a drift poll's report); its times are
the stored ones, in UTC. Its ``to_dict()`` is the JSON the kit's old
dict-returning methods gave, by the one conversion of
:mod:`migronaut_core.json_shape` (a history entry's: the entry as recorded), so
the CLI's ``--json`` and the UI show what they showed before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from migronaut_core.background.store import (
    WATCH_COUNTERS,
    ConvergeLogDocument,
    WatchStatusRow,
    resume_position,
)
from migronaut_core.bson_values import json_safe
from migronaut_core.clock import aware
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
    """A stored time as it is; None for anything else."""
    return value if isinstance(value, datetime) else None


def _utc(value: Any) -> datetime | None:
    """A stored time in UTC (a naive one, from a client without ``tz_aware``, is UTC);
    None for anything else."""
    return aware(value).astimezone(UTC) if isinstance(value, datetime) else None


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
    def from_document(cls, entry: ConvergeLogDocument) -> ConvergeLogEntry:
        """From the entry as the converge log keeps it."""
        return cls(
            collection=entry.get("collection"),
            action=entry.get("action"),
            index=entry.get("index"),
            key=json_safe(dict(entry.get("key") or {})),
            at=_utc(entry.get("at")),
            by=dict(entry.get("by") or {}),
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
    def from_document(cls, row: WatchStatusRow) -> WatchStatus:
        """From the row as the watch store reads it (``statuses``): every counter of
        :data:`~migronaut_core.background.store.WATCH_COUNTERS` (0 when it has none),
        where a new leader would resume, never the tokens."""
        leader = row.get("leader")
        counters = dict.fromkeys(WATCH_COUNTERS, 0)
        counters.update({key: int(value) for key, value in (row.get("counters") or {}).items()})
        saved = bool(row.get("resume_saved"))
        at, lag = resume_position(row)
        return cls(
            collection=row["_id"],
            state=row.get("state", "starting"),
            edges=tuple(row.get("edges") or ()),
            target=row.get("target"),
            leader=WatchLeader(
                host=leader.get("host"),
                pid=leader.get("pid"),
                owner=leader.get("owner"),
                since=_utc(leader.get("since")),
            )
            if leader
            else None,
            counters=counters,
            last_event_at=_utc(row.get("last_event_at")),
            last_error=row.get("last_error"),
            updated_at=_utc(row.get("updated_at")),
            fresh=bool(row.get("fresh", False)),
            resume=WatchResume(saved=saved, at=_utc(at), lag_seconds=lag),
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
