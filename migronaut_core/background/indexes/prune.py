"""Prune: drop the version indexes converge created that nothing declares any more.

A candidate is an index the converge log records converge creating (same
collection, name and key, not dropped since): never one a user made, whatever
its key. A candidate that the declared collections still want is not touched;
one that is no longer declared is dropped, unless

- the shard key may need it (:func:`~migronaut_core.background.indexes.rules.drop_refusal`:
  its key starts with the shard key, or the collection is sharded and its key
  cannot be read), or
- a background migration that is not completed reads through it (its version
  field leads the key),

in which case it is kept, with the reason. Every drop is recorded in the log.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pymongo.errors import OperationFailure, PyMongoError

from migronaut_core.background.indexes.rules import IndexKey, drop_refusal, same_index_key
from migronaut_core.background.planning.shard import UNKNOWN
from migronaut_core.errors import MigronautError
from migronaut_core.json_shape import json_field, to_json_dict

if TYPE_CHECKING:
    from migronaut_core.background.runtime import Runtime
    from migronaut_core.background.store import ConvergeLog
    from migronaut_core.changelog import Actor

__all__ = ["PruneReport", "prune"]

log = logging.getLogger(__name__)

#: The server's code for dropping an index that is not there (another prune was first).
_INDEX_NOT_FOUND = 27


@dataclass(frozen=True, slots=True)
class PruneReport:
    """What prune did with one index converge had created and nothing declares now.

    :param action: ``dropped``, or ``kept`` (``note`` says why).
    """

    collection: str
    name: str
    index: dict[str, Any]
    action: Literal["dropped", "kept"]
    note: str | None = field(default=None, metadata=json_field(omit="none"))

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


def prune(
    rt: Runtime, wanted: Mapping[str, IndexKey], converge_log: ConvergeLog, *, actor: Actor
) -> tuple[PruneReport, ...]:
    """Drop what converge created that ``wanted`` (collection → version index key) lacks.

    Safe to run from several processes at once: an index another one dropped
    first is passed over.
    """
    reports = []
    for entry in converge_log.created():
        collection, name = str(entry["collection"]), str(entry["index"])
        live = _live_key(rt, collection, name)
        if live is None or not same_index_key(live, list((entry.get("key") or {}).items())):
            continue  # gone, or no longer the index converge made
        declared = wanted.get(collection)
        if declared is not None and same_index_key(live, declared):
            continue
        note = drop_refusal(live, _sharding(rt, collection)) or _in_use(rt, collection, live)
        if note is not None:
            reports.append(PruneReport(collection, name, live, "kept", note))
            continue
        if not _drop(rt, collection, name):
            continue
        converge_log.record(
            collection=collection, action="dropped", name=name, key=list(live.items()), actor=actor
        )
        log.info("converge: dropped the undeclared version index %s on %s", name, collection)
        reports.append(PruneReport(collection, name, live, "dropped"))
    return tuple(reports)


def _live_key(rt: Runtime, collection: str, name: str) -> dict[str, Any] | None:
    for index in rt.db[collection].list_indexes():
        if index["name"] == name:
            return dict(index["key"])
    return None


def _sharding(rt: Runtime, collection: str) -> object:
    """The collection's shard facts; :data:`UNKNOWN` when they cannot be read."""
    try:
        if not rt.shards.is_sharded():
            return None
        return rt.shards.sharding_of(f"{rt.db.name}.{collection}")
    except (PyMongoError, MigronautError):
        return UNKNOWN


def _in_use(rt: Runtime, collection: str, key: Mapping[str, Any]) -> str | None:
    """Why a background migration still needs this index, or None."""
    leading = next(iter(key), None)
    for state in rt.store.states.list_states({"status": {"$ne": "completed"}}):
        spec = state.get("spec") or {}
        if spec.get("collection") == collection and spec.get("field") == leading:
            return f"{state['_id']} ({state.get('status')}) reads through it"
    return None


def _drop(rt: Runtime, collection: str, name: str) -> bool:
    try:
        rt.db[collection].drop_index(name)
    except OperationFailure as error:
        if error.code == _INDEX_NOT_FOUND:
            return False
        raise
    return True
