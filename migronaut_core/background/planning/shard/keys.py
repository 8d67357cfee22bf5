"""Shard keys, and what every write to a sharded collection must carry.

A :class:`ShardKey` is read from ``config.collections`` (fields in order, each
ranged or ``hashed``). Writing: every guarded write carries the document's
shard-key values (:func:`shard_key_write_filter`), so ``mongos`` targets one
shard; a transform that changes a shard-key field is a document error
(``shard-key``, :func:`shard_key_refusal`), never a write. Both partitioners of
a sharded collection get these two rules from :class:`ShardKeyWrites`.

Reading: a sharded collection's version index is
``{<field>: 1, <shard key fields>, _id: 1}`` (:func:`sharded_version_index_key`).

Shard-key values are document values: never in messages or logs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from migronaut_core.background.planning.partition.protocol import Refusal
from migronaut_core.bson_values import bson_equal
from migronaut_core.errors import ConfigInvalidError

__all__ = [
    "HASHED",
    "KeyValues",
    "ShardKey",
    "ShardKeyWrites",
    "key_expressions",
    "shard_key_refusal",
    "shard_key_write_filter",
    "sharded_version_index_key",
]

HASHED: Final = "hashed"

#: Shard-key values in key order (a chunk bound, a sampled key).
KeyValues = tuple[Any, ...]

_MISSING: Final = object()


@dataclass(frozen=True, slots=True)
class ShardKey:
    """A shard key: its fields in order, each ``1`` (ranged) or ``"hashed"``.

    :raises ConfigInvalidError: (from :meth:`from_document`) a malformed key.
    """

    fields: tuple[tuple[str, int | str], ...]

    @classmethod
    def from_document(cls, key: Any) -> ShardKey:
        """Read a key pattern as ``config.collections`` stores it (``{"a": 1, "b": "hashed"}``)."""
        if not isinstance(key, Mapping) or not key:
            raise ConfigInvalidError("a shard key must be a non-empty document", {"key": "key"})
        fields: list[tuple[str, int | str]] = []
        for name, kind in key.items():
            if not isinstance(name, str) or not name or name.startswith("$"):
                raise ConfigInvalidError("a shard key names a field badly", {"key": "key"})
            if kind == HASHED:
                fields.append((name, HASHED))
            elif isinstance(kind, int | float) and not isinstance(kind, bool) and kind == 1:
                fields.append((name, 1))
            else:
                raise ConfigInvalidError(
                    "a shard key field must be 1 or 'hashed'", {"key": "key", "field": name}
                )
        if sum(kind == HASHED for _, kind in fields) > 1:
            raise ConfigInvalidError("a shard key has at most one hashed field", {"key": "key"})
        return cls(tuple(fields))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.fields)

    @property
    def hashed(self) -> bool:
        """Whether a field of the key is hashed."""
        return any(kind == HASHED for _, kind in self.fields)

    def to_document(self) -> dict[str, int | str]:
        """Return the key pattern (``{"a": 1, "b": "hashed"}``), as status shows it."""
        return dict(self.fields)


def _path_value(doc: Mapping[str, Any], path: str) -> Any:
    """Return the value at a dotted ``path`` of ``doc``, or :data:`_MISSING`."""
    value: Any = doc
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _equality(value: Any) -> Any:
    """A filter value that matches ``value`` by equality (a regex or operator-like document
    would otherwise be read as a condition)."""
    if isinstance(value, Mapping) and any(str(key).startswith("$") for key in value):
        return {"$eq": value}
    if hasattr(value, "pattern") and hasattr(value, "flags"):
        return {"$eq": value}
    return value


def shard_key_write_filter(key: ShardKey, doc: Mapping[str, Any]) -> dict[str, Any]:
    """Return the conditions that pin ``doc``'s shard-key values (``null`` when missing).

    ``_id`` is left out: every guarded write names it already.
    """
    conditions: dict[str, Any] = {}
    for name in key.names:
        if name == "_id":
            continue
        value = _path_value(doc, name)
        conditions[name] = None if value is _MISSING else _equality(value)
    return conditions


def shard_key_refusal(
    key: ShardKey, before: Mapping[str, Any], after: Mapping[str, Any]
) -> Refusal | None:
    """Refuse a transform that changes (sets, unsets or rewrites) a shard-key field."""
    for name in key.names:
        if name == "_id":
            continue  # the engine refuses an _id change on its own
        old, new = _path_value(before, name), _path_value(after, name)
        same = old is new if _MISSING in (old, new) else bson_equal(old, new)
        if not same:
            return Refusal(
                "shard-key",
                f"the transform changes the shard key field {name!r}; a background migration "
                "never moves a document between chunks",
            )
    return None


def sharded_version_index_key(field_name: str, key: ShardKey) -> list[tuple[str, int | str]]:
    """Return the version index of a sharded collection: ``{field: 1, <key fields>, _id: 1}``.

    The version field leads, so a pass reads one version with tight bounds and
    a drift probe is one index seek; the shard-key fields follow (a hashed one
    stays hashed), so a chunk range of that version is one contiguous index
    range; ``_id`` closes it unless the key holds it already.
    """
    fields: list[tuple[str, int | str]] = [(field_name, 1), *key.fields]
    if "_id" not in key.names:
        fields.append(("_id", 1))
    return fields


def key_expressions(key: ShardKey) -> list[Any]:
    """The aggregation expressions of a document's shard-key values, as the index keys them."""
    return [
        {"$toHashedIndexKey": {"$ifNull": [f"${name}", None]}}
        if kind == HASHED
        else {"$ifNull": [f"${name}", None]}
        for name, kind in key.fields
    ]


class ShardKeyWrites:
    """The writes of a partitioner over a sharded collection: they carry its :attr:`key`."""

    key: ShardKey

    def write_filter(self, doc: Mapping[str, Any]) -> dict[str, Any]:
        """Return the document's shard-key values, so ``mongos`` targets its shard."""
        return shard_key_write_filter(self.key, doc)

    def check_transform(
        self, before: Mapping[str, Any], after: Mapping[str, Any]
    ) -> Refusal | None:
        """Refuse a transform that changes a shard-key field (a ``shard-key`` document error)."""
        return shard_key_refusal(self.key, before, after)
