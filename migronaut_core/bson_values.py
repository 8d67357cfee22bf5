r"""BSON values as the server sees them: type names, exact equality, copies, id keys.

pymongo decodes several BSON types to one Python type (``int`` is int32 or
int64 by size; ``bytes`` and ``Binary`` subtype 0 are one BSON type), and
Python's ``==`` says ``1 == 1.0 == True``. Migrations must not: a field whose
stored BSON type would change is a real change, and two ``_id``\ s the server
treats as one must map to one key. Everything here is pure and carries no
document value into any message.
"""

from __future__ import annotations

import base64
import calendar
import contextlib
import copy
import datetime
import json
import math
import re
import uuid
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any, Final

import pendulum
from bson import json_util
from bson.binary import Binary
from bson.code import Code
from bson.datetime_ms import DatetimeMS
from bson.dbref import DBRef
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.regex import Regex
from bson.timestamp import Timestamp

from migronaut_core.errors import ConfigInvalidError

__all__ = [
    "INT32_MAX",
    "INT32_MIN",
    "UUID_SUBTYPE",
    "bson_equal",
    "bson_type_name",
    "canonical_id_key",
    "clone_document",
    "clone_value",
    "iso_time",
    "json_safe",
    "to_decimal",
]

#: The range of a BSON int32; a Python ``int`` outside it is stored as an int64.
INT32_MIN: Final = -(2**31)
INT32_MAX: Final = 2**31 - 1
#: The ``Binary`` subtype of a standard UUID.
UUID_SUBTYPE: Final = 4

#: Values that are immutable and may be shared between a document and its copy.
_IMMUTABLE: Final = (
    str,
    int,
    float,
    bytes,
    ObjectId,
    Decimal128,
    Timestamp,
    datetime.datetime,
    DatetimeMS,
    uuid.UUID,
    MinKey,
    MaxKey,
    type(None),
)


# ─── BSON-exact equality ──────────────────────────────────────────────────────


def bson_type_name(value: Any) -> str:
    """Return the ``$type`` alias of the BSON type ``value`` is stored as.

    As pymongo's default encoder picks it: a Python ``int`` is ``"int"`` when it
    fits 32 bits and ``"long"`` otherwise, ``Int64`` is always ``"long"``,
    ``bytes`` and ``uuid.UUID`` are ``"binData"``, any mapping or ``DBRef`` is
    ``"object"``, a tuple is an ``"array"``. ``"unknown"`` for a type the
    default encoder does not handle.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, Int64):
        return "long"
    if isinstance(value, int):
        return "int" if INT32_MIN <= value <= INT32_MAX else "long"
    if isinstance(value, Code):
        return "javascript" if value.scope is None else "javascriptWithScope"
    for types, kind in _KIND_CHECKS:
        if isinstance(value, types):
            return kind
    return "unknown"


#: Checked in order, after bool, int and Code (subclasses of int and str).
_KIND_CHECKS: Final[tuple[tuple[type | tuple[type, ...], str], ...]] = (
    (str, "string"),
    (float, "double"),
    ((Mapping, DBRef), "object"),
    (ObjectId, "objectId"),
    ((list, tuple), "array"),
    ((datetime.datetime, DatetimeMS), "date"),
    (Decimal128, "decimal"),
    ((bytes, uuid.UUID), "binData"),
    (Timestamp, "timestamp"),
    ((Regex, re.Pattern), "regex"),
    (MinKey, "minKey"),
    (MaxKey, "maxKey"),
)


def _date_millis(value: datetime.datetime | DatetimeMS) -> int:
    """Return the milliseconds since the epoch BSON stores for ``value``.

    A naive datetime is UTC, and microseconds are truncated to milliseconds,
    as the encoder does: two datetimes within one millisecond store the same.
    """
    if isinstance(value, DatetimeMS):
        return int(value)
    offset = value.utcoffset()
    if offset is not None:
        value = value - offset
    return calendar.timegm(value.timetuple()) * 1000 + value.microsecond // 1000


#: The regex flags BSON keeps, in the order the encoder writes their letters.
_REGEX_FLAGS: Final = (
    ("i", re.IGNORECASE),
    ("l", re.LOCALE),
    ("m", re.MULTILINE),
    ("s", re.DOTALL),
    ("u", re.UNICODE),
    ("x", re.VERBOSE),
)


def _regex_parts(value: Regex[Any] | re.Pattern[Any]) -> tuple[Any, str]:
    """Return ``(pattern, flags)`` as BSON stores them (flags as ``ilmsux`` letters)."""
    pattern = value.pattern
    if isinstance(pattern, bytes):
        with contextlib.suppress(UnicodeDecodeError):
            pattern = pattern.decode("utf-8")
    flags = int(value.flags)
    return pattern, "".join(letter for letter, bit in _REGEX_FLAGS if flags & bit)


def _binary_parts(value: bytes | uuid.UUID) -> tuple[int, bytes]:
    if isinstance(value, uuid.UUID):
        return UUID_SUBTYPE, value.bytes
    if isinstance(value, Binary):
        return value.subtype, bytes(value)
    return 0, bytes(value)


def _as_mapping(value: Mapping[str, Any] | DBRef) -> Mapping[str, Any]:
    return value.as_doc() if isinstance(value, DBRef) else value


def _double_equal(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def _mapping_equal(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    if len(a) != len(b):
        return False
    return all(
        ka == kb and bson_equal(va, vb)
        for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True)
    )


def _sequence_equal(a: Sequence[Any], b: Sequence[Any]) -> bool:
    return len(a) == len(b) and all(bson_equal(x, y) for x, y in zip(a, b, strict=True))


def _binary_equal(a: bytes | uuid.UUID, b: bytes | uuid.UUID) -> bool:
    # A native UUID's bytes depend on the client's uuid_representation: only
    # another UUID is surely the same; against raw Binary, say "different".
    if isinstance(a, uuid.UUID) or isinstance(b, uuid.UUID):
        return isinstance(a, uuid.UUID) and isinstance(b, uuid.UUID) and a == b
    return _binary_parts(a) == _binary_parts(b)


def _opaque_equal(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    try:
        return bool(a == b)
    except Exception:  # a value that cannot even compare is "different"
        return False


def _same_kind_equal(kind: str, a: Any, b: Any) -> bool:
    if kind in ("null", "minKey", "maxKey"):
        return True
    if kind == "double":
        return _double_equal(a, b)
    if kind == "decimal":
        return bool(a.bid == b.bid)
    if kind == "object":
        return _mapping_equal(_as_mapping(a), _as_mapping(b))
    if kind == "array":
        return _sequence_equal(a, b)
    if kind == "binData":
        return _binary_equal(a, b)
    if kind == "date":
        return _date_millis(a) == _date_millis(b)
    if kind == "regex":
        return _regex_parts(a) == _regex_parts(b)
    if kind == "javascript":
        return str(a) == str(b)
    if kind == "javascriptWithScope":
        return str(a) == str(b) and bson_equal(a.scope, b.scope)
    if kind == "unknown":
        return _opaque_equal(a, b)
    # bool, int, long, string, objectId, timestamp: value equality within the type.
    return bool(a == b)


def bson_equal(a: Any, b: Any) -> bool:
    """Return whether ``a`` and ``b`` would be stored as the same BSON value.

    Stricter than ``==`` and than the server's query equality: ``True`` is not
    ``1``, an ``int32`` ``1`` is not ``Int64(1)`` nor ``1.0`` nor
    ``Decimal128("1")``, ``0.0`` is not ``-0.0``, ``Decimal128("1.0")`` is not
    ``Decimal128("1.00")``; NaN equals NaN. Embedded documents compare field
    by field *in order* (``{a, b}`` is not ``{b, a}``), arrays element-wise.
    A Python ``int`` is the ``int32`` or ``int64`` the encoder would pick for
    it; ``bytes`` is binary subtype 0; datetimes compare at the millisecond
    the encoder keeps (naive = UTC). A native ``uuid.UUID`` equals only an
    equal ``uuid.UUID`` (its stored bytes depend on the client's UUID
    representation). Values of types this cannot place are equal only when
    of one type and ``==``: a spurious "different" costs one rewritten field,
    a spurious "same" would lose a change.
    """
    if a is b:
        return True  # one object encodes one way (NaN included, which equals itself here)
    kind_of_a = type(a)
    if kind_of_a is type(b) and kind_of_a in _PLAIN_EQUAL:
        return bool(a == b)
    kind = bson_type_name(a)
    if kind != bson_type_name(b):
        return False
    return _same_kind_equal(kind, a, b)


#: Exact types whose equal values always encode to the same BSON bytes.
_PLAIN_EQUAL: Final = frozenset({str, int, bool, ObjectId})


# ─── Copies ───────────────────────────────────────────────────────────────────


def clone_value(value: Any) -> Any:
    """A deep copy of one BSON value that shares what is immutable (cheap on the hot path)."""
    if type(value) in _PLAIN_IMMUTABLE:
        return value
    if isinstance(value, _IMMUTABLE) and not isinstance(value, Code):
        return value
    if isinstance(value, Mapping):
        return {key: clone_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [clone_value(item) for item in value]
    if isinstance(value, tuple):
        return tuple(clone_value(item) for item in value)
    return copy.deepcopy(value)


#: Exact immutable types, checked before the slower ``isinstance`` of :data:`_IMMUTABLE`.
_PLAIN_IMMUTABLE: Final = frozenset(
    {str, int, float, bool, type(None), ObjectId, datetime.datetime}
)


def clone_document(doc: Mapping[str, Any]) -> dict[str, Any]:
    """Return a deep copy of ``doc`` a transform may mutate freely.

    Embedded documents (any mapping, ``SON`` and ``RawBSONDocument`` included)
    become ``dict``s in the same field order, lists stay lists, and every BSON
    value keeps its class (``Int64``, ``Decimal128``, ``Binary`` subtypes,
    ``ObjectId``…); immutable values are shared, anything else is deep-copied.
    """
    if not isinstance(doc, Mapping):
        raise ConfigInvalidError("only a document (a mapping) can be cloned")
    return {key: clone_value(value) for key, value in doc.items()}


def to_decimal(value: int | float | Decimal128) -> Decimal:
    """A number of any BSON numeric type as an exact ``Decimal``."""
    if isinstance(value, Decimal128):
        return value.to_decimal()
    return Decimal(int(value)) if isinstance(value, int) else Decimal(value)


# ─── Canonical id keys ────────────────────────────────────────────────────────


def _number_key(value: int | float | Decimal128) -> str:
    """Return one string per numeric *value*, whatever its numeric BSON type."""
    number = to_decimal(value)
    if number.is_nan():
        return "NaN"
    if number.is_infinite():
        return "Infinity" if number > 0 else "-Infinity"
    if number.is_zero():
        return "0"
    sign, digits, exponent = number.as_tuple()
    text = "".join(map(str, digits)).rstrip("0")
    scale = int(exponent) + len(digits) - len(text)
    return f"{'-' if sign else ''}{text}e{scale}"


def _key_tree(value: Any) -> Any:
    kind = bson_type_name(value)
    if kind in ("null", "minKey", "maxKey"):
        return [kind]
    if kind in ("int", "long", "double", "decimal"):
        return ["number", _number_key(value)]
    if kind in ("bool", "string"):
        return [kind, value if kind == "string" else bool(value)]
    if kind == "objectId":
        return [kind, str(value)]
    if kind == "binData":
        subtype, data = _binary_parts(value)
        return [kind, subtype, base64.b64encode(data).decode("ascii")]
    if kind == "object":
        return [kind, [[str(k), _key_tree(v)] for k, v in _as_mapping(value).items()]]
    if kind == "array":
        return [kind, [_key_tree(item) for item in value]]
    return _rare_key_tree(kind, value)


def _rare_key_tree(kind: str, value: Any) -> Any:
    if kind == "date":
        return [kind, _date_millis(value)]
    if kind == "timestamp":
        return [kind, value.time, value.inc]
    if kind == "regex":
        return [kind, *map(str, _regex_parts(value))]
    if kind == "javascript":
        return [kind, str(value)]
    if kind == "javascriptWithScope":
        return [kind, str(value), _key_tree(value.scope)]
    return ["opaque", type(value).__qualname__, repr(value)]


def canonical_id_key(value: Any) -> str:
    """Return a stable string that identifies the ``_id`` ``value`` — a dict/set key.

    Two values get one key exactly when the server's ``_id`` index would hold
    them as the same key (under the simple collation): values of different
    BSON types never share a key (``ObjectId(h)`` vs the string ``h``,
    ``True`` vs ``1``, a date vs its milliseconds), while the numeric types
    are one bracket compared by value, as the server does — ``1``, ``1.0``,
    ``Int64(1)`` and ``Decimal128("1.00")`` are one key (the unique index
    refuses a second document with any of them), ``-0.0`` is ``0``, and every
    NaN is one key. Embedded documents keep their field order (``{a, b}`` and
    ``{b, a}`` are two ids to the server). A native ``uuid.UUID`` keys as
    binary subtype 4 (the standard representation), so it meets the
    ``Binary`` a client without UUID decoding reads back. The same value
    always gets the same key, across processes and releases.
    """
    return json.dumps(_key_tree(value), ensure_ascii=False, separators=(",", ":"))


# ─── As JSON ───────────────────────────────────────────────────────────────────


def iso_time(value: Any) -> str | None:
    """A datetime as ISO text in UTC; None for anything else."""
    if isinstance(value, datetime.datetime):
        return pendulum.instance(value).in_timezone("UTC").isoformat()
    return None


def json_safe(value: Any) -> Any:
    """Make a stored value JSON-safe: dates as ISO text, other BSON as extended JSON text."""
    if isinstance(value, Mapping):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    if isinstance(value, datetime.datetime):
        return iso_time(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return json_util.dumps(value, json_options=json_util.RELAXED_JSON_OPTIONS)
