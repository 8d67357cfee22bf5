"""Shard-aware partitioning: split a sharded collection along its chunks, shard by shard.

Behind a ``mongos``, a collection's shard key and chunks live in the cluster's
``config`` database. The catalog reads them, pure functions turn the recorded
documents into facts, and the partitioner plans along those facts, reads each
partition through the sharded version index and targets every write by shard
key. Import from here; the modules are the map:

=====================  ============================================================
:mod:`.keys`           :class:`ShardKey`, the write rules (:func:`shard_key_write_filter`,
                       :func:`shard_key_refusal`, :class:`ShardKeyWrites`) and the
                       sharded version index (:func:`sharded_version_index_key`)
:mod:`.chunks`         the facts: :class:`Sharding` (:func:`sharding_from`),
                       :class:`Chunk` (:func:`chunks_from`, :func:`chunk_filter`,
                       :func:`runs_of`)
:mod:`.scopes`         plans, pure: :func:`chunk_scopes`, :func:`sampled_scopes`, and
                       the :func:`targeting_filter` of a scope
:mod:`.partitioners`   :class:`ShardPartitioner` (along the chunks) and
                       :class:`KeyedIdRangePartitioner` (``_id`` ranges, shard-key writes)
:mod:`.catalog`        :class:`ShardCatalog`, the one reader of ``config``
                       (:data:`UNKNOWN` when it may not read it)
=====================  ============================================================

Dependencies point down the table's order (keys, chunks, scopes, partitioners);
the catalog needs the chunks only. Shard-key values are document values: they
stay in scopes, cursors and filters, never in messages or logs.
"""

from migronaut_core.background.planning.shard.catalog import UNKNOWN, ShardCatalog
from migronaut_core.background.planning.shard.chunks import (
    JUMBO_WEIGHT,
    Chunk,
    Sharding,
    chunk_filter,
    chunks_from,
    runs_of,
    sharding_from,
)
from migronaut_core.background.planning.shard.keys import (
    HASHED,
    ShardKey,
    ShardKeyWrites,
    shard_key_refusal,
    shard_key_write_filter,
    sharded_version_index_key,
)
from migronaut_core.background.planning.shard.partitioners import (
    MAX_LEFT,
    KeyedIdRangePartitioner,
    ShardPartitioner,
)
from migronaut_core.background.planning.shard.scopes import (
    SHARD_SCOPE_KIND,
    chunk_scopes,
    sampled_scopes,
    targeting_filter,
)

__all__ = [
    "HASHED",
    "JUMBO_WEIGHT",
    "MAX_LEFT",
    "SHARD_SCOPE_KIND",
    "UNKNOWN",
    "Chunk",
    "KeyedIdRangePartitioner",
    "ShardCatalog",
    "ShardKey",
    "ShardKeyWrites",
    "ShardPartitioner",
    "Sharding",
    "chunk_filter",
    "chunk_scopes",
    "chunks_from",
    "runs_of",
    "sampled_scopes",
    "shard_key_refusal",
    "shard_key_write_filter",
    "sharded_version_index_key",
    "sharding_from",
    "targeting_filter",
]
