"""The rules of the one JSON conversion (:mod:`migronaut_core.json_shape`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone

from migronaut_core.errors import NotAppliedError
from migronaut_core.json_shape import json_field, to_json, to_json_dict

OFFSET_TIME = datetime(2026, 1, 2, 5, 4, 5, tzinfo=timezone(timedelta(hours=2)))


@dataclass(frozen=True, slots=True)
class Inner:
    at: datetime | None


@dataclass(frozen=True, slots=True)
class Outer:
    number: int = field(metadata=json_field(name="pass"))
    inner: Inner
    items: tuple[Inner, ...]
    labels: tuple[tuple[str, int], ...]
    note: str | None = field(default=None, metadata=json_field(omit="none"))
    flag: bool = field(default=False, metadata=json_field(omit="empty"))
    token: str = field(default="secret", metadata=json_field(omit="always"))
    stored_at: datetime | None = field(default=None, metadata=json_field(time="isoformat"))


def test_fields_in_order_renamed_nested_and_converted() -> None:
    value = Outer(1, Inner(OFFSET_TIME), (Inner(None),), (("a", 1),), stored_at=OFFSET_TIME)
    assert to_json_dict(value) == {
        "pass": 1,
        "inner": {"at": "2026-01-02T03:04:05+00:00"},
        "items": [{"at": None}],
        "labels": [["a", 1]],
        "stored_at": "2026-01-02T05:04:05+02:00",
    }
    assert list(to_json_dict(value)) == ["pass", "inner", "items", "labels", "stored_at"]


def test_omitted_only_as_the_rule_says() -> None:
    value = Outer(0, Inner(None), (), (), note="", flag=True)
    shown = to_json_dict(value)
    assert shown["note"] == ""
    assert shown["flag"] is True
    assert shown["pass"] == 0
    assert "token" not in shown
    assert shown["stored_at"] is None


def test_mappings_errors_and_plain_values() -> None:
    error = NotAppliedError("nope", {"migration": "m"})
    assert to_json({"a": (1, 2), "b": {"c": datetime(2026, 1, 2, tzinfo=UTC)}}) == {
        "a": [1, 2],
        "b": {"c": "2026-01-02T00:00:00+00:00"},
    }
    assert to_json([error]) == [error.to_dict()]
    assert to_json("text") == "text"
    assert to_json(Inner) is Inner
