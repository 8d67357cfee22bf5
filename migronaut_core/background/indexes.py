"""Converge: bring declared collections to what their definitions need.

Today that is the *version index* every background migration over a declared
collection reads through (DESIGN §3.4):

- ``{field: 1, _id: 1}`` on an unsharded collection (and wherever
  ``background_shard_aware = "off"``, whose ``_id``-range reads need exactly it);
- on a sharded collection, the variant that carries the shard key,
  ``{field: 1, <shard key fields>, _id: 1}`` (a hashed field stays hashed;
  :func:`~migronaut_core.background.planning.shard.sharded_version_index_key`): the
  version field leads, so one version is one tight index range and drift
  probes stay a single seek; the shard-key fields follow, so each chunk range
  of that version is contiguous and the shard-aware partitioner can bound its
  reads with ``min``/``max``;
- the plain variant when the shard key cannot be read (no privilege on
  ``config``) or holds the version or revision field itself.

Converge only creates. An index that already has the wanted key (under any
name) is left as it is, and no index is ever dropped — a shard key's index
least of all. Creating an index is idempotent, so converge is safe to run on
every deploy and from several processes at once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from migronaut_core.background.planning.shard import UNKNOWN, sharded_version_index_key
from migronaut_core.definitions import CollectionDefinition

if TYPE_CHECKING:
    from migronaut_core.background.runtime import Runtime
    from migronaut_core.background.spec import BackgroundSpec

__all__ = ["ConvergeReport", "IndexReport", "converge"]

log = logging.getLogger(__name__)

Action = Literal["created", "exists", "skipped"]


@dataclass(frozen=True, slots=True)
class IndexReport:
    """What converge did for one declared collection.

    :param collection: the collection.
    :param action: ``created``, ``exists`` (an index with that key was there
        already), or ``skipped`` (no versioning declared).
    :param index: the version index's key pattern (``None`` when skipped).
    :param name: the index's name on the server.
    :param sharding: ``off`` (not sharded, or shard-awareness off), ``shard``
        (the shard-key variant) or ``unknown`` (sharded, key unreadable).
    :param note: why the plain variant was chosen on a sharded collection.
    """

    collection: str
    action: Action
    index: dict[str, Any] | None = None
    name: str | None = None
    sharding: str = "off"
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "collection": self.collection,
            "action": self.action,
            "index": self.index,
            "name": self.name,
            "sharding": self.sharding,
        }
        if self.note is not None:
            data["note"] = self.note
        return data


@dataclass(frozen=True, slots=True)
class ConvergeReport:
    """Everything one converge did, collection by collection."""

    collections: tuple[IndexReport, ...]

    @property
    def created(self) -> tuple[IndexReport, ...]:
        """The indexes this converge created."""
        return tuple(item for item in self.collections if item.action == "created")

    def to_dict(self) -> dict[str, Any]:
        return {
            "collections": [item.to_dict() for item in self.collections],
            "created": len(self.created),
        }


def _wanted(
    rt: Runtime, collection: str, field: str, revision_field: str | None
) -> tuple[list[tuple[str, Any]], str, str | None]:
    """The version index a collection needs: its key, its sharding mode, and a note."""
    plain: list[tuple[str, Any]] = [(field, 1), ("_id", 1)]
    if rt.shard_aware == "off" or not rt.shards.is_sharded():
        return plain, "off", None
    facts = rt.shards.sharding_of(f"{rt.db.name}.{collection}")
    if facts is None:
        return plain, "off", None
    if facts is UNKNOWN:
        return (
            plain,
            "unknown",
            "the shard key cannot be read (config needs clusterMonitor): the plain version "
            "index was chosen",
        )
    if field in facts.key.names or (
        revision_field is not None and revision_field in facts.key.names
    ):
        return (
            plain,
            "shard",
            "the shard key holds the version or revision field: background migrations over "
            "it split by _id",
        )
    return sharded_version_index_key(field, facts.key), "shard", None


def _converge_one(rt: Runtime, definition: CollectionDefinition) -> IndexReport:
    versioning = definition.versioning
    if versioning is None:
        return IndexReport(definition.name, "skipped")
    key, sharding, note = _wanted(rt, definition.name, versioning.field, versioning.revision_field)
    collection = rt.db[definition.name]
    for index in collection.list_indexes():
        if same_index_key(index["key"], key):
            return IndexReport(
                definition.name, "exists", dict(key), str(index["name"]), sharding, note
            )
    name = collection.create_index(key)
    log.info("converge: created the version index %s on %s", name, definition.name)
    return IndexReport(definition.name, "created", dict(key), name, sharding, note)


def converge(rt: Runtime, definitions: Sequence[CollectionDefinition]) -> ConvergeReport:
    """Create the version index of every declared collection that has versioning.

    Idempotent; creates, never drops. See the module docstring for which index.

    :returns: one :class:`IndexReport` per definition, in order.
    """
    return ConvergeReport(tuple(_converge_one(rt, definition) for definition in definitions))


# -- the version index rule ---------------------------------------------------------


def version_index_key(spec: BackgroundSpec) -> list[tuple[str, int]]:
    return [(spec.field, 1), ("_id", 1)]


def same_index_key(live: Mapping[str, Any], wanted: Sequence[tuple[str, Any]]) -> bool:
    """Whether an index's key pattern is ``wanted``: same fields, order and directions."""
    have = list(live.items())
    if len(have) != len(wanted):
        return False
    for (name, kind), (wanted_name, wanted_kind) in zip(have, wanted, strict=True):
        if name != wanted_name or _direction(kind) != _direction(wanted_kind):
            return False
    return True


def _direction(kind: Any) -> Any:
    """An index key's direction, comparable across numeric types (``1``, ``1.0``, ``Int64(1)``)."""
    if isinstance(kind, int | float) and not isinstance(kind, bool):
        return float(kind)
    return str(kind)


def has_index(rt: Runtime, collection: str, wanted: Sequence[tuple[str, Any]]) -> bool:
    return any(same_index_key(key, wanted) for key in rt.index_keys(collection))


def version_hint(rt: Runtime, spec: BackgroundSpec) -> list[tuple[str, int]] | None:
    """The version index to hint, when the collection has it; warn once when it does not."""
    assert spec.collection is not None
    if has_index(rt, spec.collection, version_index_key(spec)):
        return version_index_key(spec)
    rt.warn_once(
        f"index:{spec.collection}",
        "%s has no {%s: 1, _id: 1} index: background migrations over it scan the collection "
        "(create it, or declare versioning and converge)",
        spec.collection,
        spec.field,
    )
    return None


def probe_hint(rt: Runtime, spec: BackgroundSpec) -> list[tuple[str, Any]] | None:
    """The index a drift probe (one equality on the version field) reads through.

    The version index; else any index led by the version field ascending — on a
    sharded collection, the version index that carries the shard key; else none
    (warned once, as :func:`version_hint` does).
    """
    assert spec.collection is not None
    if has_index(rt, spec.collection, version_index_key(spec)):
        return version_index_key(spec)
    for key in rt.index_keys(spec.collection):
        first = next(iter(key.items()), None)
        if first is not None and first[0] == spec.field and _direction(first[1]) == 1.0:
            return list(key.items())
    return version_hint(rt, spec)
