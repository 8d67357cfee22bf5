"""The target-wide brake: stop every background migration's lanes, with a reason.

Stored once per target (the budget document, :mod:`migronaut_core.background.store.budget`),
so every process and machine sees the same brake. While it is on, every lane
holds at its next batch boundary (outcome ``held``, ``held_by.signal`` ``brake``;
see :mod:`migronaut_core.background.throttle.budget`) and releases its
partition; its migration's status stays ``running``. It ends when released or
once its optional ``until`` has passed. Each setting and release is kept in the
brake's log with who asked, when, why and until when.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Final, Literal, get_args

from migronaut_core.background.runtime import Runtime
from migronaut_core.background.store import BrakeDocument, BrakeLogDocument
from migronaut_core.background.throttle.budget import brake_ended
from migronaut_core.changelog import Actor
from migronaut_core.clock import aware, utc_now
from migronaut_core.errors import ConfigInvalidError
from migronaut_core.json_shape import json_field, to_json_dict

__all__ = [
    "BRAKE_ACTIONS",
    "BrakeAction",
    "BrakeLogEntry",
    "BrakeView",
    "brake_log",
    "brake_status",
    "parse_until",
    "release",
    "set_brake",
]

log = logging.getLogger("migronaut_core.background")

#: The target-wide actions beside the per-migration controls (the control DAG offers both).
BrakeAction = Literal["brake", "release"]
BRAKE_ACTIONS: Final[tuple[BrakeAction, ...]] = get_args(BrakeAction)


@dataclass(frozen=True, slots=True)
class BrakeView:
    """The target's brake: ``on`` (in force now), and as set: why, by whom, since, until.

    ``changed`` says whether the call that answered it set or released it (False:
    already so, or only read).
    """

    on: bool
    reason: str | None = field(default=None, metadata=json_field(omit="none"))
    requested_by: str | None = field(default=None, metadata=json_field(omit="none"))
    at: datetime | None = field(default=None, metadata=json_field(omit="none"))
    until: datetime | None = field(default=None, metadata=json_field(omit="none"))
    changed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


@dataclass(frozen=True, slots=True)
class BrakeLogEntry:
    """One setting (``brake``) or ``release`` of the brake: who, when, why, until."""

    action: str
    at: datetime
    reason: str | None = field(default=None, metadata=json_field(omit="none"))
    requested_by: str | None = field(default=None, metadata=json_field(omit="none"))
    until: datetime | None = field(default=None, metadata=json_field(omit="none"))

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


def parse_until(text: str | None) -> datetime | None:
    """An ``until`` given as text (the CLI's, a DAG's parameter): ISO 8601 with a time zone;
    blank: none.

    :raises ConfigInvalidError: (``key`` ``until``) it does not read as a time.
    """
    if text is None or not text.strip():
        return None
    try:
        return datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigInvalidError(
            "until must be an ISO 8601 time with a time zone (e.g. 2026-12-03T18:00:00Z)",
            {"key": "until"},
        ) from None


def check_until(until: datetime | None, now: datetime) -> datetime | None:
    """``until`` as a UTC time in the future, or None.

    :raises ConfigInvalidError: (``key`` ``until``) it has no time zone or has passed.
    """
    if until is None:
        return None
    if not isinstance(until, datetime) or until.tzinfo is None:
        raise ConfigInvalidError(
            "until must be a time with a time zone (e.g. 2026-12-03T18:00:00Z)", {"key": "until"}
        )
    if until <= now:
        raise ConfigInvalidError("until must be in the future", {"key": "until"})
    return until.astimezone(UTC)


def set_brake(
    rt: Runtime, *, actor: Actor, until: datetime | None = None, now: datetime | None = None
) -> BrakeView:
    """Set the brake (replacing one in force) with ``actor``'s reason, required.

    :raises ConfigInvalidError: no reason, or a bad ``until``; nothing was written.
    """
    at = now or utc_now()
    if actor.reason is None:
        raise ConfigInvalidError("the brake needs a reason", {"key": "reason"})
    doc: BrakeDocument = {"reason": actor.reason, "at": at, "until": check_until(until, at)}
    if actor.requested_by is not None:
        doc["requested_by"] = actor.requested_by
    changed = rt.store.budget.set_brake(doc)
    rt.budget.forget()
    log.warning(
        "the brake is on (%s, by %s%s): every background lane holds at its next batch",
        actor.reason,
        actor.requested_by or "unknown",
        f", until {doc['until'].isoformat()}" if doc["until"] is not None else "",
    )
    rt.emit("background:brake", {"action": "brake", **_json_of(doc)})
    return replace(_view(doc, at), changed=changed)


def release(rt: Runtime, *, actor: Actor) -> BrakeView:
    """Release the brake; ``changed`` False when it was off (nothing is logged then)."""
    entry: BrakeLogDocument = {"action": "release", "at": utc_now()}
    if actor.reason is not None:
        entry["reason"] = actor.reason
    if actor.requested_by is not None:
        entry["requested_by"] = actor.requested_by
    if not rt.store.budget.release_brake(entry):
        return BrakeView(on=False)
    rt.budget.forget()
    log.warning("the brake is released (by %s)", actor.requested_by or "unknown")
    rt.emit("background:brake", {"action": "release", **_json_of(entry)})
    return BrakeView(on=False, changed=True)


def brake_status(rt: Runtime, *, now: datetime | None = None) -> BrakeView:
    """The brake as stored (``on`` False once its ``until`` has passed)."""
    stored = rt.store.budget.brake()
    if stored is None:
        return BrakeView(on=False)
    return _view(stored, now or utc_now())


def brake_log(rt: Runtime) -> list[BrakeLogEntry]:
    """Every setting and release kept, oldest first."""
    return [
        BrakeLogEntry(
            action=entry["action"],
            at=aware(entry["at"]),
            reason=entry.get("reason"),
            requested_by=entry.get("requested_by"),
            until=_utc_or_none(entry.get("until")),
        )
        for entry in rt.store.budget.brake_log()
    ]


def _view(doc: BrakeDocument, now: datetime) -> BrakeView:
    return BrakeView(
        on=not brake_ended(doc, now),
        reason=doc["reason"],
        requested_by=doc.get("requested_by"),
        at=aware(doc["at"]),
        until=_utc_or_none(doc.get("until")),
    )


def _utc_or_none(value: datetime | None) -> datetime | None:
    return None if value is None else aware(value)


def _json_of(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {
        key: value.isoformat() if isinstance(value, datetime) else value
        for key, value in doc.items()
    }
