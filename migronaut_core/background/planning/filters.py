"""The small pieces both partitioners build their queries from.

:func:`conjunction` joins filter parts with ``$and``; :func:`is_nan` tells a
NaN (a double or a decimal) apart, because no inequality reaches a NaN, so it
is never a range bound and needs a condition of its own.

Pure: no database. Values handled here are document values: never in messages.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from bson.decimal128 import Decimal128

__all__ = ["conjunction", "is_nan"]


def conjunction(parts: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Return the ``$and`` of the non-empty ``parts``, unwrapped when one or none."""
    kept = [dict(part) for part in parts if part]
    if not kept:
        return {}
    if len(kept) == 1:
        return kept[0]
    return {"$and": kept}


def is_nan(value: Any) -> bool:
    """Whether ``value`` is a NaN double or a NaN ``Decimal128``."""
    if isinstance(value, float):
        return math.isnan(value)
    return isinstance(value, Decimal128) and value.to_decimal().is_nan()
