"""Converge: bring declared collections to what their definitions need.

Today that is the *version index* every background migration over a declared
collection reads through: which one is the rule of
:mod:`~migronaut_core.background.indexes.rules` (:func:`wanted_version_index`).

Converge only creates. An index that already has the wanted key (under any
name) is left as it is, and no index is ever dropped — a shard key's index
least of all. Creating an index is idempotent, so converge is safe to run on
every deploy and from several processes at once.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from migronaut_core.background.indexes.rules import (
    check_version_indexes,
    same_index_key,
    wanted_version_index,
)
from migronaut_core.definitions import CollectionDefinition
from migronaut_core.required_indexes import RequiredIndex, missing_error

if TYPE_CHECKING:
    from migronaut_core.background.runtime import Runtime

__all__ = ["ConvergeReport", "IndexReport", "converge"]

log = logging.getLogger("migronaut_core.background.indexes")

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


def _converge_one(rt: Runtime, definition: CollectionDefinition, create: bool) -> IndexReport:
    versioning = definition.versioning
    if versioning is None:
        return IndexReport(definition.name, "skipped")
    wanted = wanted_version_index(rt, definition.name, versioning.field, versioning.revision_field)
    key, sharding, note = wanted.key, wanted.sharding, wanted.note
    collection = rt.db[definition.name]
    for index in collection.list_indexes():
        if same_index_key(index["key"], key):
            return IndexReport(
                definition.name, "exists", dict(key), str(index["name"]), sharding, note
            )
    if not create:  # dropped since it was checked: still never created here
        raise missing_error([RequiredIndex(definition.name, tuple(key))])
    name = collection.create_index(key)
    log.info("converge: created the version index %s on %s", name, definition.name)
    return IndexReport(definition.name, "created", dict(key), name, sharding, note)


def converge(
    rt: Runtime, definitions: Sequence[CollectionDefinition], *, create: bool = True
) -> ConvergeReport:
    """Create the version index of every declared collection that has versioning.

    Idempotent; creates, never drops. Which index: :func:`wanted_version_index`.

    :param create: false (``ensure_indexes = false``): create nothing, only check
        that every one exists (each is then reported ``exists``).
    :returns: one :class:`IndexReport` per definition, in order.
    :raises IndexMissingError: ``create`` is false and some are missing.
    """
    if not create:
        check_version_indexes(rt, definitions)
    return ConvergeReport(
        tuple(_converge_one(rt, definition, create) for definition in definitions)
    )
