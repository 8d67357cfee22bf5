"""Recorded ``config.collections`` / ``config.chunks`` documents, in the shapes servers return.

Copied field for field from what ``mongos`` 6.0, 7.0 and 8.0 (and 4.4, the last
release that keyed chunks by namespace) store for a few typical collections,
with fresh ids. The builders at the bottom make longer chunk lists of the same
shape (many tiny chunks, scattered ownership).
"""

from __future__ import annotations

import datetime
import itertools
import uuid
from typing import Any

from bson import Int64, MaxKey, MinKey, ObjectId, Timestamp
from bson.binary import Binary, UuidRepresentation

Doc = dict[str, Any]

_T0 = datetime.datetime(2024, 3, 1, 12, 0, tzinfo=datetime.UTC)


def _uuid(n: int) -> Binary:
    """A collection UUID as a client without a uuid representation decodes it."""
    return Binary.from_uuid(uuid.UUID(int=n), UuidRepresentation.STANDARD)


USERS_UUID = _uuid(0x6D1)
ORDERS_UUID = _uuid(0x7D2)
EVENTS_UUID = _uuid(0x8D3)
LOGS_UUID = _uuid(0x8D4)
RESHARDED_UUID = _uuid(0x7D9)

# ─── MongoDB 6.0: a hashed key, sharded with two initial chunks per shard ────

USERS_60: Doc = {
    "_id": "app.users",
    "lastmodEpoch": ObjectId("65e1c3a0a1b2c3d4e5f60001"),
    "lastmod": _T0,
    "timestamp": Timestamp(1709294400, 12),
    "uuid": USERS_UUID,
    "key": {"userId": "hashed"},
    "unique": False,
    "noBalance": False,
}

_QUARTER = 2**62


def _hashed_chunk(low: Any, high: Any, shard: str, n: int) -> Doc:
    return {
        "_id": ObjectId(f"65e1c3a0a1b2c3d4e5f7{n:04x}"),
        "uuid": USERS_UUID,
        "min": {"userId": low},
        "max": {"userId": high},
        "shard": shard,
        "lastmod": Timestamp(1, n),
        "history": [{"validAfter": Timestamp(1709294400, 12), "shard": shard}],
    }


_HASH_BOUNDS = [
    MinKey(),
    Int64(-3 * _QUARTER // 2),
    Int64(-_QUARTER),
    Int64(-_QUARTER // 2),
    Int64(0),
    Int64(_QUARTER),
    MaxKey(),
]
_HASH_SHARDS = ["shard0", "shard0", "shard1", "shard1", "shard2", "shard2"]
USERS_60_CHUNKS: list[Doc] = [
    _hashed_chunk(low, high, shard, n)
    for n, (low, high, shard) in enumerate(
        zip(_HASH_BOUNDS[:-1], _HASH_BOUNDS[1:], _HASH_SHARDS, strict=True)
    )
]

# ─── MongoDB 7.0: a compound ranged key, a jumbo chunk, onCurrentShardSince ───

ORDERS_70: Doc = {
    "_id": "app.orders",
    "lastmodEpoch": ObjectId("65e1c3a0a1b2c3d4e5f60002"),
    "lastmod": _T0,
    "timestamp": Timestamp(1709294500, 3),
    "uuid": ORDERS_UUID,
    "key": {"region": 1, "customerId": 1},
    "unique": False,
    "noBalance": False,
    "maxChunkSizeBytes": Int64(128 * 1024 * 1024),
    "noAutoSplit": True,
}


def _orders_chunk(low: Doc, high: Doc, shard: str, n: int, *, jumbo: bool = False) -> Doc:
    chunk: Doc = {
        "_id": ObjectId(f"65e1c3a0a1b2c3d4e5f8{n:04x}"),
        "uuid": ORDERS_UUID,
        "min": low,
        "max": high,
        "shard": shard,
        "lastmod": Timestamp(4, n),
        "onCurrentShardSince": Timestamp(1709294500, 3),
        "history": [{"validAfter": Timestamp(1709294500, 3), "shard": shard}],
    }
    if jumbo:
        chunk["jumbo"] = True
    return chunk


_ORDER_BOUNDS: list[Doc] = [
    {"region": MinKey(), "customerId": MinKey()},
    {"region": "ap", "customerId": MinKey()},
    {"region": "eu", "customerId": 1000},
    {"region": "eu", "customerId": 5000},
    {"region": "us", "customerId": MinKey()},
    {"region": "us", "customerId": 7000},
    {"region": MaxKey(), "customerId": MaxKey()},
]
#: eu/1000-5000 is jumbo: one customer too large for the balancer to split.
ORDERS_70_CHUNKS: list[Doc] = [
    _orders_chunk(low, high, shard, n, jumbo=n == 2)
    for n, (low, high, shard) in enumerate(
        zip(
            _ORDER_BOUNDS[:-1],
            _ORDER_BOUNDS[1:],
            ["shA", "shA", "shA", "shA", "shB", "shB"],
            strict=True,
        )
    )
]

# ─── MongoDB 7.0: one ranged chunk (a young collection) ──────────────────────

EVENTS_70: Doc = {
    "_id": "app.events",
    "lastmodEpoch": ObjectId("65e1c3a0a1b2c3d4e5f60003"),
    "lastmod": _T0,
    "timestamp": Timestamp(1709294600, 1),
    "uuid": EVENTS_UUID,
    "key": {"tenant": 1},
    "unique": False,
}
EVENTS_70_CHUNKS: list[Doc] = [
    {
        "_id": ObjectId("65e1c3a0a1b2c3d4e5f90001"),
        "uuid": EVENTS_UUID,
        "min": {"tenant": MinKey()},
        "max": {"tenant": MaxKey()},
        "shard": "shard0",
        "lastmod": Timestamp(1, 0),
        "onCurrentShardSince": Timestamp(1709294600, 1),
        "history": [{"validAfter": Timestamp(1709294600, 1), "shard": "shard0"}],
    }
]

# ─── MongoDB 8.0: an unsplittable (tracked, unsharded) collection ────────────

LOGS_80: Doc = {
    "_id": "app.logs",
    "lastmodEpoch": ObjectId("65e1c3a0a1b2c3d4e5f60004"),
    "lastmod": _T0,
    "timestamp": Timestamp(1709294700, 5),
    "uuid": LOGS_UUID,
    "key": {"_id": 1},
    "unique": False,
    "unsplittable": True,
}

#: 8.0, a sharded collection keyed by a hashed _id.
EVENTS_80: Doc = {
    "_id": "app.events",
    "lastmodEpoch": ObjectId("65e1c3a0a1b2c3d4e5f60005"),
    "lastmod": _T0,
    "timestamp": Timestamp(1709294800, 2),
    "uuid": EVENTS_UUID,
    "key": {"_id": "hashed"},
    "unique": False,
    "noBalance": False,
}

# ─── A reshard of app.orders (7.0): new uuid, epoch, timestamp and key ───────

ORDERS_70_RESHARDED: Doc = {
    **ORDERS_70,
    "lastmodEpoch": ObjectId("65e1c3a0a1b2c3d4e5f600ff"),
    "timestamp": Timestamp(1709298000, 7),
    "uuid": RESHARDED_UUID,
    "key": {"customerId": "hashed"},
}

# ─── MongoDB 4.4: chunks keyed by namespace, no timestamp ────────────────────

USERS_44: Doc = {
    "_id": "app.users",
    "lastmodEpoch": ObjectId("65e1c3a0a1b2c3d4e5f60006"),
    "lastmod": _T0,
    "dropped": False,
    "key": {"userId": 1},
    "unique": False,
    "uuid": USERS_UUID,
}
USERS_44_CHUNKS: list[Doc] = [
    {
        "_id": "app.users-userId_MinKey",
        "ns": "app.users",
        "min": {"userId": MinKey()},
        "max": {"userId": 500},
        "shard": "rs0",
        "lastmod": Timestamp(2, 0),
        "lastmodEpoch": ObjectId("65e1c3a0a1b2c3d4e5f60006"),
        "history": [{"validAfter": Timestamp(1709294400, 1), "shard": "rs0"}],
    },
    {
        "_id": "app.users-userId_500",
        "ns": "app.users",
        "min": {"userId": 500},
        "max": {"userId": MaxKey()},
        "shard": "rs1",
        "lastmod": Timestamp(2, 1),
        "lastmodEpoch": ObjectId("65e1c3a0a1b2c3d4e5f60006"),
        "history": [{"validAfter": Timestamp(1709294400, 1), "shard": "rs1"}],
    },
]


# ─── builders ─────────────────────────────────────────────────────────────────


def ranged_chunks(
    collection_uuid: Binary,
    field: str,
    points: list[Any],
    shards: list[str],
    *,
    jumbo: frozenset[int] = frozenset(),
) -> list[Doc]:
    """Chunks cut at ``points`` (ascending), the i-th on ``shards[i]``, in 7.0's shape."""
    bounds = [MinKey(), *points, MaxKey()]
    docs = []
    for n, (low, high) in enumerate(itertools.pairwise(bounds)):
        doc: Doc = {
            "_id": ObjectId(),
            "uuid": collection_uuid,
            "min": {field: low},
            "max": {field: high},
            "shard": shards[n],
            "lastmod": Timestamp(9, n),
            "onCurrentShardSince": Timestamp(1709294600, 1),
            "history": [{"validAfter": Timestamp(1709294600, 1), "shard": shards[n]}],
        }
        if n in jumbo:
            doc["jumbo"] = True
        docs.append(doc)
    return docs


def collection_doc(
    namespace: str, collection_uuid: Binary, key: Doc, *, epoch: int = 1, version: str = "7.0"
) -> Doc:
    """A ``config.collections`` document of ``namespace`` in the shape of ``version``."""
    doc: Doc = {
        "_id": namespace,
        "lastmodEpoch": ObjectId(f"65e1c3a0a1b2c3d4e5f6{epoch:04x}"),
        "lastmod": _T0,
        "timestamp": Timestamp(1709294400 + epoch, 1),
        "uuid": collection_uuid,
        "key": key,
        "unique": False,
        "noBalance": False,
    }
    if version == "8.0":
        doc["noAutoSplit"] = True
    return doc


def new_uuid() -> Binary:
    return Binary.from_uuid(uuid.uuid4(), UuidRepresentation.STANDARD)
