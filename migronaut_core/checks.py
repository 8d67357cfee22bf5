"""Names, numbers and choices: each rule of a setting written once.

Config, collection definitions, background specs and the engine's arguments all
check their values here, so the same name gets the same answer everywhere. Each
rule comes in two forms:

* ``*_problem(value, ...)`` returns what is wrong as words to put after the
  key's name, or ``None``: for callers that shape their own error (the spec
  validator's dotted paths, a definition file's source);
* ``check_*(key, value, ...)`` returns the value, typed, or raises
  :class:`~migronaut_core.errors.ConfigInvalidError` ``"<key> <problem>"`` with
  ``context == {"key": key}``.

The words name the key and the rule, never the value (at most its type): a
value may come from a document. Bounds are inclusive; ``bool`` is never a number.
"""

from __future__ import annotations

import math
import re
import tomllib
import zoneinfo
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, cast, get_args

from migronaut_core.errors import ConfigInvalidError

__all__ = [
    "MAX_COLLECTION_BYTES",
    "MAX_FIELD_BYTES",
    "MAX_INT64",
    "MAX_NAMESPACE_BYTES",
    "NestedSettingError",
    "check_choice",
    "check_collection_name",
    "check_field_name",
    "check_int",
    "check_number",
    "choice_problem",
    "choices",
    "clock_time_problem",
    "collection_name_problem",
    "field_name_problem",
    "int_problem",
    "number_problem",
    "read_toml",
    "time_zone_problem",
    "wrong_type",
]


class NestedSettingError(ValueError):
    """A value inside a nested setting that does not fit: ``problem`` (words after the
    key) at ``path`` (keys and indexes below the setting's own key).

    Raised by the parsers of nested settings (maintenance windows, health limits);
    callers turn it into their typed error naming the whole key
    (``background_windows.0.days``), never the value.
    """

    def __init__(self, problem: str, *path: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.path = path


#: The largest integer BSON stores (int64): the default upper bound of an integer.
MAX_INT64: Final = 2**63 - 1
#: MongoDB's limit on a namespace (``<database>.<collection>``), in bytes of UTF-8.
MAX_NAMESPACE_BYTES: Final = 255
#: The longest collection name any database can hold: the shortest database
#: name and its dot take two of the namespace's bytes.
MAX_COLLECTION_BYTES: Final = MAX_NAMESPACE_BYTES - 2
#: The longest field name migronaut stamps or reads, in bytes of UTF-8.
MAX_FIELD_BYTES: Final = 255

_COLLECTION_RULE: Final = (
    "must be a valid collection name (not empty, no '$' or NUL, not starting or ending with '.')"
)
_FIELD_RULE: Final = "must be a top-level field name (no dots, no leading $, no NUL)"


def wrong_type(value: object, expected: type | tuple[type, ...]) -> str:
    """`` (got <type>)`` when ``value`` is not of ``expected`` (a bool never is), else ``""``.

    Names the type a value had, never the value.
    """
    if isinstance(value, expected) and not isinstance(value, bool):
        return ""
    return f" (got {type(value).__name__})"


def _utf8_size(text: str) -> int | None:
    """Bytes of ``text`` in UTF-8, or ``None`` when it cannot be encoded (a lone surrogate)."""
    try:
        return len(text.encode())
    except UnicodeEncodeError:
        return None


# ─── Names ────────────────────────────────────────────────────────────────────


def collection_name_problem(value: object, *, database: str | None = None) -> str | None:
    """What makes ``value`` no MongoDB collection name, or ``None``.

    A name is text of 1 to :data:`MAX_COLLECTION_BYTES` bytes of UTF-8 (no lone
    surrogates), without ``$`` or NUL, not starting with ``system.`` (MongoDB's)
    and not starting or ending with a dot. Given the ``database``, the whole
    namespace must fit :data:`MAX_NAMESPACE_BYTES`.
    """
    if not isinstance(value, str):
        return f"{_COLLECTION_RULE}{wrong_type(value, str)}"
    if not value or "$" in value or "\x00" in value or value.startswith(".") or value.endswith("."):
        return _COLLECTION_RULE
    if value.startswith("system."):
        return "must not start with 'system.' (MongoDB's own collections)"
    size = _utf8_size(value)
    if size is None:
        return "must be valid UTF-8 (no lone surrogates)"
    if size > MAX_COLLECTION_BYTES:
        return f"must be at most {MAX_COLLECTION_BYTES} bytes of UTF-8"
    if database is not None and (_utf8_size(database) or 0) + 1 + size > MAX_NAMESPACE_BYTES:
        return f"must fit, with the database name and a dot, in {MAX_NAMESPACE_BYTES} bytes"
    return None


def field_name_problem(value: object) -> str | None:
    """What makes ``value`` no top-level field name migronaut may stamp or read, or ``None``.

    A field name is text of 1 to :data:`MAX_FIELD_BYTES` bytes of UTF-8 (no lone
    surrogates), without dots or NUL, not starting with ``$``, and not ``_id``.
    """
    if not isinstance(value, str):
        return f"{_FIELD_RULE}{wrong_type(value, str)}"
    if not value or value.startswith("$") or "." in value or "\x00" in value:
        return _FIELD_RULE
    size = _utf8_size(value)
    if size is None:
        return "must be valid UTF-8 (no lone surrogates)"
    if size > MAX_FIELD_BYTES:
        return f"must be at most {MAX_FIELD_BYTES} bytes of UTF-8"
    if value == "_id":
        return "cannot be _id"
    return None


def check_collection_name(
    key: str, value: object, *, database: str | None = None, label: str | None = None
) -> str:
    """Return ``value`` if it is a collection name (:func:`collection_name_problem`).

    :param label: how the message names the key, when not by ``key`` alone.
    :raises ConfigInvalidError: naming ``key`` and the rule.
    """
    _raise(key, collection_name_problem(value, database=database), label)
    return cast(str, value)


def check_field_name(key: str, value: object) -> str:
    """Return ``value`` if it is a field name (:func:`field_name_problem`).

    :raises ConfigInvalidError: naming ``key`` and the rule.
    """
    _raise(key, field_name_problem(value))
    return cast(str, value)


# ─── Numbers ──────────────────────────────────────────────────────────────────


def int_problem(value: object, low: int, high: int = MAX_INT64) -> str | None:
    """What makes ``value`` no integer from ``low`` to ``high`` (inclusive), or ``None``."""
    if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
        return None
    span = f">= {low}" if high == MAX_INT64 else f"between {low} and {high}"
    return f"must be an integer {span}{wrong_type(value, int)}"


def number_problem(
    value: object, low: float, high: float | None = None, *, unit: str = ""
) -> str | None:
    """What makes ``value`` no number (int or float) from ``low`` to ``high``, or ``None``.

    NaN is never within bounds; without ``high`` there is no upper bound but
    infinity is still refused.
    """
    if isinstance(value, int | float) and not isinstance(value, bool):
        within = math.isfinite(value) and low <= value and (high is None or value <= high)
        if within:
            return None
    span = f">= {low:g}" if high is None else f"between {low:g} and {high:g}"
    suffix = f" {unit}" if unit else ""
    return f"must be a number {span}{suffix}{wrong_type(value, (int, float))}"


def check_int(
    key: str, value: object, low: int, high: int = MAX_INT64, *, label: str | None = None
) -> int:
    """Return ``value`` if it is an integer from ``low`` to ``high`` (inclusive).

    :param label: how the message names the key, when not by ``key`` alone.
    :raises ConfigInvalidError: naming the key and the bounds.
    """
    _raise(key, int_problem(value, low, high), label)
    return int(cast(int, value))


def check_number(
    key: str, value: object, low: float, high: float | None = None, *, unit: str = ""
) -> float:
    """Return ``value`` as a float if it is a number from ``low`` to ``high`` (inclusive).

    :param unit: named after the bounds (``seconds``).
    :raises ConfigInvalidError: naming the key and the bounds.
    """
    _raise(key, number_problem(value, low, high, unit=unit))
    return float(cast(float, value))


# ─── Durations ────────────────────────────────────────────────────────────────

#: The units a duration written as text may carry, in seconds.
DURATION_UNITS: Final = {"s": 1, "m": 60, "h": 3_600, "d": 86_400}


def duration_seconds(value: object) -> int | None:
    """Return a duration in whole seconds: an integer, or text ``<n><unit>``
    (``s``, ``m``, ``h``, ``d``: ``"7d"``, ``"36h"``); ``None`` when it is neither."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and len(value) >= 2 and value[-1] in DURATION_UNITS:
        digits = value[:-1]
        if digits.isascii() and digits.isdigit():
            return int(digits) * DURATION_UNITS[value[-1]]
    return None


def duration_problem(value: object, low: int, high: int) -> str | None:
    """What makes ``value`` no duration from ``low`` to ``high`` seconds, or ``None``."""
    seconds = duration_seconds(value)
    if seconds is not None and low <= seconds <= high:
        return None
    return (
        f"must be a duration between {low} and {high} seconds: an integer of seconds or "
        f"text such as '7d', '36h', '90m'{wrong_type(value, (int, str))}"
    )


# ─── Choices ──────────────────────────────────────────────────────────────────


def choices(literal: Any) -> tuple[str, ...]:
    """The strings a ``Literal[...]`` type allows, in order."""
    options = get_args(literal)
    if not options or not all(isinstance(option, str) for option in options):
        raise TypeError("choices() takes a Literal of strings")
    return options


def choice_problem(value: object, options: Sequence[str]) -> str | None:
    """What makes ``value`` none of ``options``, or ``None``."""
    if isinstance(value, str) and value in options:
        return None
    return f"must be one of {', '.join(map(repr, options))}{wrong_type(value, str)}"


def check_choice(key: str, value: object, options: Sequence[str]) -> str:
    """Return ``value`` if it is one of ``options`` (see :func:`choices`).

    :raises ConfigInvalidError: naming the key and the options.
    """
    _raise(key, choice_problem(value, options))
    return cast(str, value)


# ─── Clock times and time zones ───────────────────────────────────────────────

_CLOCK_TIME: Final = re.compile(r"^([01][0-9]|2[0-4]):([0-5][0-9])$")


def clock_time_problem(value: object, *, allow_end_of_day: bool = False) -> str | None:
    """What makes ``value`` no ``HH:MM`` wall-clock time (``24:00`` only as an end), or ``None``."""
    matched = _CLOCK_TIME.match(value) if isinstance(value, str) else None
    if matched is not None:
        hours, minutes = int(matched.group(1)), int(matched.group(2))
        if hours < 24 or (allow_end_of_day and minutes == 0):
            return None
    latest = "24:00" if allow_end_of_day else "23:59"
    return f"must be a time of day as HH:MM, 00:00 to {latest}{wrong_type(value, str)}"


def time_zone_problem(value: object) -> str | None:
    """What makes ``value`` no IANA time zone name known here (``Europe/Paris``), or ``None``."""
    if isinstance(value, str) and value and "\x00" not in value:
        try:
            zoneinfo.ZoneInfo(value)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
            pass
        else:
            return None
    return f"must be an IANA time zone name such as 'Europe/Paris' or 'UTC'{wrong_type(value, str)}"


# ─── Files ────────────────────────────────────────────────────────────────────


def read_toml(path: Path, *, key: str) -> dict[str, Any]:
    """Return the TOML file at ``path`` as a table.

    :param key: the setting that led to the file, for the error's context.
    :raises ConfigInvalidError: the file is not valid TOML (naming the file and
        where the parser stopped).
    """
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigInvalidError(
            f"{path} is not valid TOML ({exc})", {"key": key, "path": str(path)}
        ) from exc


def _raise(key: str, problem: str | None, label: str | None = None) -> None:
    if problem is not None:
        raise ConfigInvalidError(f"{label or key} {problem}", {"key": key})
