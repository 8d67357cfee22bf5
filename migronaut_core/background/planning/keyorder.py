"""The order MongoDB sorts BSON values in, for shard-key bounds compared client-side.

The shard-aware partitioner compares chunk bounds with sampled shard-key values
(which chunk a sampled value falls in, whether a cut point lies strictly inside
a chunk) without asking the server each time. It needs the server's *sort*
order, which is total across types (unlike query inequalities, which apply
type bracketing): values of different brackets compare by bracket
(:data:`~migronaut_core.background.planning.brackets.BRACKETS`), values of one bracket
by value — numbers numerically whatever their BSON type, strings by their
UTF-8 bytes (no collation), embedded documents field by field, binary data by
length, then subtype, then bytes.

Pure: no database, no logging. Values compared here may be natural keys; they
never leave this module in a message.
"""

from __future__ import annotations

import datetime
import functools
import uuid
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Final

from bson.binary import Binary
from bson.dbref import DBRef
from bson.decimal128 import Decimal128

from migronaut_core.background.planning.brackets import BRACKETS, bracket_of
from migronaut_core.bson_values import UUID_SUBTYPE

__all__ = ["compare_keys", "compare_values", "key_sort"]

_RANK: Final = {bracket.name: index for index, bracket in enumerate(BRACKETS)}


def _sign(a: Any, b: Any) -> int:
    return int(a > b) - int(a < b)


def _number(value: Any) -> Decimal:
    if isinstance(value, Decimal128):
        return value.to_decimal()
    if isinstance(value, float):
        return Decimal(value)
    return Decimal(int(value))


def _compare_numbers(a: Any, b: Any) -> int:
    x, y = _number(a), _number(b)
    # NaN sorts before every other number, and all NaNs are equal.
    if x.is_nan() or y.is_nan():
        return _sign(not x.is_nan(), not y.is_nan())
    return _sign(x, y)


def _utf8(value: str) -> bytes:
    return value.encode("utf-8", "surrogatepass")


def _pairs(value: Mapping[str, Any] | DBRef) -> list[tuple[str, Any]]:
    mapping = value.as_doc() if isinstance(value, DBRef) else value
    return list(mapping.items())


def _compare_objects(a: Mapping[str, Any] | DBRef, b: Mapping[str, Any] | DBRef) -> int:
    left, right = _pairs(a), _pairs(b)
    for (name_a, value_a), (name_b, value_b) in zip(left, right, strict=False):
        order = _sign(_RANK[bracket_of(value_a)], _RANK[bracket_of(value_b)])
        if order == 0:
            order = _sign(_utf8(str(name_a)), _utf8(str(name_b)))
        if order == 0:
            order = compare_values(value_a, value_b)
        if order != 0:
            return order
    return _sign(len(left), len(right))


def _compare_arrays(a: Sequence[Any], b: Sequence[Any]) -> int:
    for value_a, value_b in zip(a, b, strict=False):
        order = compare_values(value_a, value_b)
        if order != 0:
            return order
    return _sign(len(a), len(b))


def _binary(value: bytes | uuid.UUID) -> tuple[int, int, bytes]:
    if isinstance(value, uuid.UUID):
        return 16, UUID_SUBTYPE, value.bytes
    subtype = value.subtype if isinstance(value, Binary) else 0
    return len(value), subtype, bytes(value)


def _millis(value: Any) -> int:
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        delta: datetime.timedelta = value - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
        return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
    return int(value)  # DatetimeMS


def _regex(value: Any) -> tuple[str, int]:
    pattern = value.pattern
    if isinstance(pattern, bytes):
        pattern = pattern.decode("utf-8", "replace")
    return str(pattern), int(value.flags)


_WITHIN: Final[dict[str, Callable[[Any, Any], int]]] = {
    "number": _compare_numbers,
    "string": lambda a, b: _sign(_utf8(str(a)), _utf8(str(b))),
    "object": _compare_objects,
    "array": _compare_arrays,
    "binData": lambda a, b: _sign(_binary(a), _binary(b)),
    "objectId": lambda a, b: _sign(a.binary, b.binary),
    "bool": lambda a, b: _sign(bool(a), bool(b)),
    "date": lambda a, b: _sign(_millis(a), _millis(b)),
    "timestamp": lambda a, b: _sign((a.time, a.inc), (b.time, b.inc)),
    "regex": lambda a, b: _sign(_regex(a), _regex(b)),
    "code": lambda a, b: _sign(str(a), str(b)),
}


def compare_values(a: Any, b: Any) -> int:
    """Return -1, 0 or 1 as ``a`` sorts before, with or after ``b`` on the server.

    ``MinKey``, ``null`` (and a missing value, passed as ``None``) and
    ``MaxKey`` each equal themselves; ``1``, ``1.0`` and ``Int64(1)`` are equal.

    :raises ConfigInvalidError: for a value BSON cannot store.
    """
    rank_a, rank_b = bracket_of(a), bracket_of(b)
    if rank_a != rank_b:
        return _sign(_RANK[rank_a], _RANK[rank_b])
    within = _WITHIN.get(rank_a)
    return 0 if within is None else within(a, b)


def compare_keys(a: Sequence[Any], b: Sequence[Any]) -> int:
    """Compare two shard-key values given as value tuples in key order (lexicographic)."""
    for value_a, value_b in zip(a, b, strict=True):
        order = compare_values(value_a, value_b)
        if order != 0:
            return order
    return 0


#: A ``sorted(..., key=key_sort)`` key for value tuples in server order.
key_sort: Final = functools.cmp_to_key(compare_keys)
