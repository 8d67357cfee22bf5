"""Converge: bring declared collections to what their definitions need.

Today that is the *version index* every background migration over a declared
collection reads through: which one is the rule of
:mod:`~migronaut_core.background.indexes.rules` (:func:`wanted_version_index`).

Converge creates. An index that already has the wanted key (under any name) is
left as it is. Each index it creates is recorded in the converge log (what,
when, by whom); with ``prune`` it then drops the ones it created that nothing
declares any more (:mod:`~migronaut_core.background.indexes.prune`: never a
user's index, never one a shard key may need), recorded too. Creating an index
is idempotent, and a converge that finds another one built it first reports
``exists``: converge is safe to run on every deploy and from several processes
at once.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from migronaut_core.background.indexes.prune import PruneReport, prune
from migronaut_core.background.indexes.rules import (
    IndexKey,
    check_version_indexes,
    same_index_key,
    wanted_version_index,
)
from migronaut_core.definitions import CollectionDefinition
from migronaut_core.errors import ConfigInvalidError
from migronaut_core.json_shape import json_field, to_json_dict
from migronaut_core.required_indexes import RequiredIndex, missing_error

if TYPE_CHECKING:
    from migronaut_core.background.runtime import Runtime
    from migronaut_core.background.store import ConvergeLog
    from migronaut_core.changelog import Actor

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
    note: str | None = field(default=None, metadata=json_field(omit="none"))

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


@dataclass(frozen=True, slots=True)
class ConvergeReport:
    """Everything one converge did, collection by collection, then what prune did.

    ``created_count`` and ``dropped_count`` (the JSON's ``created`` and ``dropped``)
    are derived when the report is built.
    """

    collections: tuple[IndexReport, ...]
    #: How many indexes this converge created.
    created_count: int = field(
        init=False, repr=False, compare=False, metadata=json_field(name="created")
    )
    pruned: tuple[PruneReport, ...] = ()
    #: How many indexes this converge's prune dropped.
    dropped_count: int = field(
        init=False, repr=False, compare=False, metadata=json_field(name="dropped")
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "created_count", len(self.created))
        object.__setattr__(self, "dropped_count", len(self.dropped))

    @property
    def created(self) -> tuple[IndexReport, ...]:
        """The indexes this converge created."""
        return tuple(item for item in self.collections if item.action == "created")

    @property
    def dropped(self) -> tuple[PruneReport, ...]:
        """The indexes this converge's prune dropped."""
        return tuple(item for item in self.pruned if item.action == "dropped")

    def to_dict(self) -> dict[str, Any]:
        """Each collection's and each pruned index's report, with how many were created and
        dropped."""
        return to_json_dict(self)


@dataclass(frozen=True, slots=True)
class _Recording:
    """Where and as whom a converge records what it creates and drops."""

    log: ConvergeLog
    actor: Actor


def _converge_one(
    rt: Runtime, definition: CollectionDefinition, recording: _Recording | None
) -> IndexReport:
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
    if recording is None:  # dropped since it was checked: still never created here
        raise missing_error([RequiredIndex(definition.name, tuple(key))])
    name = "_".join(f"{field}_{kind}" for field, kind in key)  # the server's default name
    _create(rt, definition.name, key, name)
    # Converges racing here all create it; the log's claim says which one reports it.
    if not recording.log.record_creation(
        collection=definition.name, name=name, key=key, actor=recording.actor
    ):
        return IndexReport(definition.name, "exists", dict(key), name, sharding, note)
    log.info("converge: created the version index %s on %s", name, definition.name)
    return IndexReport(definition.name, "created", dict(key), name, sharding, note)


def _create(rt: Runtime, collection: str, key: IndexKey, name: str) -> None:
    """Create the index (a no-op when it exists, a wait when an identical build runs)."""
    rt.db.command({"createIndexes": collection, "indexes": [{"key": dict(key), "name": name}]})


def converge(
    rt: Runtime,
    definitions: Sequence[CollectionDefinition],
    converge_log: ConvergeLog,
    *,
    actor: Actor,
    create: bool = True,
    prune_undeclared: bool = False,
) -> ConvergeReport:
    """Create the version index of every declared collection that has versioning.

    Idempotent. Which index: :func:`wanted_version_index`. Each creation is
    recorded in ``converge_log`` with ``actor``.

    :param create: false (``ensure_indexes = false``): create nothing, only check
        that every one exists (each is then reported ``exists``).
    :param prune_undeclared: then drop the indexes converge created that no
        declared collection wants any more (see
        :mod:`~migronaut_core.background.indexes.prune`); new indexes exist before
        old ones go.
    :returns: one :class:`IndexReport` per definition, in order, and what prune did.
    :raises IndexMissingError: ``create`` is false and some are missing.
    :raises ConfigInvalidError: ``prune_undeclared`` without ``create`` (nothing
        is written).
    """
    if prune_undeclared and not create:
        raise ConfigInvalidError(
            "converge --prune drops indexes, which ensure_indexes = false leaves to an "
            "administrator: prune with ensure_indexes = true",
            {"key": "ensure_indexes"},
        )
    if not create:
        check_version_indexes(rt, definitions)
    recording = _Recording(converge_log, actor) if create else None
    reports = tuple(_converge_one(rt, definition, recording) for definition in definitions)
    if not prune_undeclared:
        return ConvergeReport(reports)
    wanted: dict[str, IndexKey] = {
        item.collection: list(item.index.items()) for item in reports if item.index is not None
    }
    return ConvergeReport(reports, prune(rt, wanted, converge_log, actor=actor))
