"""One JSON conversion for every result type: a frozen dataclass to its JSON-safe dict.

The result types the kit returns (status views, run results, reports, answers)
say on their fields how they appear in JSON, with :func:`json_field` metadata:
a JSON name other than the attribute's, or the value of another field as the
name (a dry run's ``first`` or ``sample``), a field left out when it is None,
when it is empty or always (what never leaves the process, such as a typed copy
the JSON shows elsewhere). What the JSON shows that is derived (a report's
totals) is a field too, set from the others when the result is built
(``init=False``). :func:`to_json_dict` and :func:`to_json` apply those rules; a
result type's ``to_dict()`` is one call of them, so the CLI's ``--json``, the
UI's JSON API and Airflow's XCom show one shape per type. Two build theirs by
hand, as no field rule says it: the dry run's ``DocumentPreview`` (either its
changes or its error, and the ``_id`` as stored values are shown) and the kit's
``HistoryEntry`` (the control history's entry as it was recorded, whatever keys
it has).

Values are converted recursively: a dataclass to its own ``to_dict()`` when it
has one (so a type nested in another shows the shape it shows alone), else to
its dict (fields in declaration order), a mapping to a dict, a tuple or list to
a list, a datetime to ISO text in UTC (:func:`~migronaut_core.bson_values.iso_time`),
a :class:`~migronaut_core.errors.MigronautError` to its ``to_dict()``; anything
else is kept as it is (views hold JSON-safe values already).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from migronaut_core.bson_values import iso_time
from migronaut_core.errors import MigronautError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["JsonRule", "Omit", "TimeStyle", "json_field", "to_json", "to_json_dict"]

#: When a field is left out of the JSON: ``never``; ``none``, when it is None;
#: ``empty``, when it is falsy (False, 0, an empty text or collection); ``always``.
Omit = Literal["never", "none", "empty", "always"]
#: How a datetime field is written: ``utc``, ISO text in UTC (:func:`iso_time`);
#: ``isoformat``, the value's own ``isoformat()`` (no conversion, as stored).
TimeStyle = Literal["utc", "isoformat"]

_KEY: Final = "migronaut.json"


@dataclass(frozen=True, slots=True)
class JsonRule:
    """How one field appears in JSON (see :func:`json_field`)."""

    name: str | None = None
    omit: Omit = "never"
    time: TimeStyle = "utc"
    name_from: str | None = None


_PLAIN: Final = JsonRule()


def json_field(
    *,
    name: str | None = None,
    omit: Omit = "never",
    time: TimeStyle = "utc",
    name_from: str | None = None,
) -> dict[str, JsonRule]:
    """Field metadata for :func:`to_json_dict`: ``field(metadata=json_field(...))``.

    :param name: the JSON key, when it differs from the attribute's name.
    :param omit: when the field is left out (see :data:`Omit`).
    :param time: how a datetime is written (see :data:`TimeStyle`).
    :param name_from: another field whose value (a text) is the JSON key instead.
    """
    return {_KEY: JsonRule(name=name, omit=omit, time=time, name_from=name_from)}


def to_json_dict(result: DataclassInstance) -> dict[str, Any]:
    """The JSON-safe dict of a dataclass instance, by its fields' :func:`json_field` rules."""
    shown: dict[str, Any] = {}
    for item in fields(result):
        rule: JsonRule = item.metadata.get(_KEY, _PLAIN)
        value = getattr(result, item.name)
        if _omitted(rule.omit, value):
            continue
        key = str(getattr(result, rule.name_from)) if rule.name_from else rule.name or item.name
        if rule.time == "isoformat" and isinstance(value, datetime.datetime):
            shown[key] = value.isoformat()
        else:
            shown[key] = to_json(value)
    return shown


def to_json(value: Any) -> Any:
    """``value`` made JSON-safe: dataclasses, mappings, sequences and times converted."""
    if isinstance(value, MigronautError):
        return value.to_dict()
    if is_dataclass(value) and not isinstance(value, type):
        own = getattr(value, "to_dict", None)
        return own() if callable(own) else to_json_dict(value)
    if isinstance(value, Mapping):
        return {key: to_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(item) for item in value]
    if isinstance(value, datetime.datetime):
        return iso_time(value)
    return value


def _omitted(omit: Omit, value: Any) -> bool:
    if omit == "never":
        return False
    if omit == "none":
        return value is None
    if omit == "empty":
        return not value
    return True
