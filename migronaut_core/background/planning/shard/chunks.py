"""What ``config`` says about a sharded collection: its :class:`Sharding` and its chunks.

Pure: these functions read recorded documents (tested on the shapes MongoDB
6.0, 7.0 and 8.0 return); :class:`~.catalog.ShardCatalog` fetches them.

- ``config.collections`` holds one document per sharded collection: its ``key``,
  ``uuid``, ``lastmodEpoch`` and (5.0+) ``timestamp``. A reshard or a refined
  shard key gives the collection a new epoch and timestamp — the
  :class:`Sharding`'s ``epoch`` — and a plan made before it is *stale*. An 8.0
  ``unsplittable`` collection (tracked, never split) is not sharded.
- ``config.chunks`` holds the chunks, keyed by the collection's ``uuid`` since
  5.0 (by namespace, ``ns``, before); each is a half-open range
  ``[min, max)`` of shard-key values owned by one ``shard``, ``jumbo`` when the
  balancer could not split it. Consecutive chunks on one shard form a *run*
  (:func:`runs_of`).

Chunk bounds are document values: a :class:`Chunk`'s ``repr`` hides them.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from bson.max_key import MaxKey
from bson.min_key import MinKey

from migronaut_core.background.planning.keyorder import compare_keys, key_sort
from migronaut_core.background.planning.shard.keys import KeyValues, ShardKey
from migronaut_core.errors import ShardMetadataError

__all__ = [
    "JUMBO_WEIGHT",
    "Chunk",
    "Sharding",
    "chunk_filter",
    "chunks_from",
    "runs_of",
    "sharding_from",
]

#: How many ordinary chunks a jumbo chunk weighs when chunks are shared out.
JUMBO_WEIGHT: Final = 2.0


@dataclass(frozen=True, slots=True)
class Sharding:
    """What ``config.collections`` says about one sharded collection.

    :param namespace: ``<database>.<collection>``.
    :param key: its shard key.
    :param uuid: the collection's UUID (chunks are keyed by it on 5.0+).
    :param epoch: ``{"epoch", "timestamp"}`` as recorded; a reshard or a refined
        key changes it.
    :param chunks_by_uuid: whether ``config.chunks`` names the collection by
        ``uuid`` (5.0+) rather than by ``ns``.
    """

    namespace: str
    key: ShardKey
    uuid: Any = None
    epoch: dict[str, Any] = field(default_factory=dict)
    chunks_by_uuid: bool = True


def sharding_from(doc: Mapping[str, Any] | None) -> Sharding | None:
    """Read a ``config.collections`` document; ``None`` when the collection is not sharded.

    Not sharded: no document, one marked ``dropped`` (before 5.0), one marked
    ``unsplittable`` (8.0 tracks unsharded collections too), or one without a key.

    :raises ConfigInvalidError: a key the partitioner cannot read.
    """
    if doc is None or doc.get("dropped") is True or doc.get("unsplittable") is True:
        return None
    if not doc.get("key"):
        return None
    epoch: dict[str, Any] = {}
    if doc.get("lastmodEpoch") is not None:
        epoch["epoch"] = doc["lastmodEpoch"]
    if doc.get("timestamp") is not None:
        epoch["timestamp"] = doc["timestamp"]
    return Sharding(
        namespace=str(doc["_id"]),
        key=ShardKey.from_document(doc["key"]),
        uuid=doc.get("uuid"),
        epoch=epoch,
        chunks_by_uuid=doc.get("timestamp") is not None and doc.get("uuid") is not None,
    )


def chunk_filter(sharding: Sharding) -> dict[str, Any]:
    """Return the ``config.chunks`` query for a collection's chunks (by uuid on 5.0+, else ns)."""
    if sharding.chunks_by_uuid:
        return {"uuid": sharding.uuid}
    return {"ns": sharding.namespace}


@dataclass(frozen=True, slots=True, repr=False)
class Chunk:
    """One chunk: the shard-key values ``min <= key < max`` (in key order) on ``shard``."""

    min: KeyValues
    max: KeyValues
    shard: str
    jumbo: bool = False

    def __repr__(self) -> str:
        # Bounds are document values: never in logs.
        return f"Chunk(shard={self.shard!r}, jumbo={self.jumbo})"

    @property
    def weight(self) -> float:
        return JUMBO_WEIGHT if self.jumbo else 1.0


def _bound(value: Any, key: ShardKey) -> KeyValues:
    if not isinstance(value, Mapping) or list(value) != list(key.names):
        raise ShardMetadataError(
            "a chunk's bounds do not match the collection's shard key (refined meanwhile?)",
            {"key": "chunks"},
        )
    return tuple(value[name] for name in key.names)


def _is_min(values: KeyValues) -> bool:
    return all(isinstance(value, MinKey) for value in values)


def _is_max(values: KeyValues) -> bool:
    return all(isinstance(value, MaxKey) for value in values)


def chunks_from(docs: Iterable[Mapping[str, Any]], key: ShardKey) -> list[Chunk]:
    """Read ``config.chunks`` documents into chunks in key order, checked to tile the key space.

    :raises ShardMetadataError: no chunks, bounds of another key, or chunks that
        leave a gap or overlap (read while a split, merge or reshard went on).
    """
    chunks = [
        Chunk(
            _bound(doc.get("min"), key),
            _bound(doc.get("max"), key),
            str(doc.get("shard")),
            doc.get("jumbo") is True,
        )
        for doc in docs
    ]
    chunks.sort(key=lambda chunk: key_sort(chunk.min))
    problem = None
    if not chunks:
        problem = "no chunks"
    elif not _is_min(chunks[0].min) or not _is_max(chunks[-1].max):
        problem = "chunks that do not span the whole key space"
    elif any(compare_keys(a.max, b.min) != 0 for a, b in itertools.pairwise(chunks)):
        problem = "chunks with a gap or an overlap"
    if problem is not None:
        raise ShardMetadataError(
            f"the chunk metadata read has {problem}; it changed while it was read — try again",
            {"key": "chunks", "chunks": len(chunks)},
        )
    return chunks


def runs_of(chunks: Sequence[Chunk]) -> list[list[Chunk]]:
    """Group consecutive chunks (in key order) that live on the same shard."""
    return [list(run) for _, run in itertools.groupby(chunks, key=lambda chunk: chunk.shard)]
