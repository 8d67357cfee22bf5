"""Shard-aware partitioning: split a sharded collection along its chunks, shard by shard.

Behind a ``mongos``, a collection's shard key and chunks live in the cluster's
``config`` database. This module reads them (:class:`ShardCatalog`), turns the
recorded documents into facts (:func:`sharding_from`, :func:`chunks_from` —
pure, and tested on the shapes MongoDB 6.0, 7.0 and 8.0 return), and plans
partitions along them (:class:`ShardPartitioner`).

Facts:

- ``config.collections`` holds one document per sharded collection: its ``key``,
  ``uuid``, ``lastmodEpoch`` and (5.0+) ``timestamp``. A reshard or a refined
  shard key gives the collection a new epoch and timestamp — the
  :class:`Sharding`'s ``epoch`` — and a plan made before it is *stale*. An 8.0
  ``unsplittable`` collection (tracked, never split) is not sharded. A user
  without the privilege to read it (``clusterMonitor``) gets :data:`UNKNOWN`.
- ``config.chunks`` holds the chunks, keyed by the collection's ``uuid`` since
  5.0 (by namespace, ``ns``, before); each is a half-open range
  ``[min, max)`` of shard-key values owned by one ``shard``, ``jumbo`` when the
  balancer could not split it.

Partitions. Each partition is a contiguous range of shard-key values
(``{"kind": "shard-range", "min": [...], "max": [...], "group": <shard>}``;
bounds are value lists in key order, ``MinKey``/``MaxKey`` at the ends).
Consecutive chunks on one shard form a *run*; every run gets at least one
partition, its ``group`` (the store caps the live leases per group at
``shard_concurrency``), and runs with many chunks are cut at chunk boundaries
into as many partitions as the pass is worth (plan method ``chunks``; jumbo
chunks weigh :data:`JUMBO_WEIGHT` chunks). More runs than ``max_partitions``
(chunks scattered over the shards) are merged into ``max_partitions`` blocks
that span shards and carry no group (``degraded: ungrouped``). Fewer chunks
than the pass is worth (a young collection, one huge chunk) are cut inside at
shard-key values sampled from the documents (method ``sampled``; a hashed
field is sampled by its hash with ``$toHashedIndexKey``).

Reading. A partition is read through the *sharded version index*
``{<field>: 1, <shard key fields>, _id: 1}`` (:func:`sharded_version_index_key`),
whose ``min``/``max`` index bounds select exactly one version and one range of
shard-key values — hashed fields included, which no query filter can bound. A
ranged leading field also gets a filter on its bounds, so ``mongos`` sends the
read to the shard that owns the range (chunks at either end of the key space,
and hashed keys, are read from every shard: their bounds cannot be written as a
filter without type bracketing losing documents). A partition *drains*: each
batch reads the first matching documents of the range, rewritten documents
leave the match, and the ones that stay (conflicts left to the next pass,
failed documents) are stepped over by ``_id`` (the cursor keeps at most
:data:`MAX_LEFT` of them; past that the partition ends and the next pass takes
the rest).

Writing. Every guarded write carries the document's shard-key values, so
``mongos`` targets one shard; a transform that changes a shard-key field is a
document error (``shard-key``), never a write.

Shard-key values are document values: they stay in scopes, cursors and filters,
never in messages or logs.
"""

from __future__ import annotations

import bisect
import enum
import itertools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

from bson.max_key import MaxKey
from bson.min_key import MinKey
from pymongo.errors import OperationFailure

from migronaut_core.background.planning.apportion import allocate, equal_weight_spans
from migronaut_core.background.planning.brackets import BRACKETS, bracket_of
from migronaut_core.background.planning.filters import conjunction, is_nan
from migronaut_core.background.planning.keyorder import compare_keys, key_sort
from migronaut_core.background.planning.partition import (
    BatchQuery,
    Count,
    IdRangePartitioner,
    Plan,
    Refusal,
    count_matching,
)
from migronaut_core.background.spec import PartitionSettings
from migronaut_core.errors import ConfigInvalidError, ShardMetadataError
from migronaut_core.server_errors import is_unauthorized, timed_out
from migronaut_core.versioning import bson_equal, version_filter

if TYPE_CHECKING:
    from pymongo import MongoClient
    from pymongo.collection import Collection
    from pymongo.database import Database

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

logger = logging.getLogger(__name__)

HASHED: Final = "hashed"
#: The ``kind`` of a shard-range partition scope.
SHARD_SCOPE_KIND: Final = "shard-range"
#: Ids a draining partition steps over, kept in its cursor at most.
MAX_LEFT: Final = 1_000
#: How many ordinary chunks a jumbo chunk weighs when chunks are shared out.
JUMBO_WEIGHT: Final = 2.0
#: Server codes of a read refused for lack of privileges (Unauthorized, Atlas).
#: Reads of ``config.chunks`` before inconsistent metadata is an error.
_CHUNK_READS: Final = 3
_SPLITTABLE: Final = frozenset(bracket.name for bracket in BRACKETS if bracket.splittable)

Scope = dict[str, Any]
KeyValues = tuple[Any, ...]


class _Unknown(enum.Enum):
    UNKNOWN = "unknown"


#: What :meth:`ShardCatalog.sharding_of` answers when it may not read ``config``.
UNKNOWN: Final = _Unknown.UNKNOWN

_MISSING: Final = object()


# ─── facts ────────────────────────────────────────────────────────────────────


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


# ─── plans (pure) ─────────────────────────────────────────────────────────────


def runs_of(chunks: Sequence[Chunk]) -> list[list[Chunk]]:
    """Group consecutive chunks (in key order) that live on the same shard."""
    return [list(run) for _, run in itertools.groupby(chunks, key=lambda chunk: chunk.shard)]


def _scope(low: KeyValues, high: KeyValues, group: str | None, chunks: int | None) -> Scope:
    """A stored scope; ``chunks``: how many whole chunks it spans (``None``: part of one)."""
    scope: Scope = {"kind": SHARD_SCOPE_KIND, "min": list(low), "max": list(high)}
    if group is not None:
        scope["group"] = group
    if chunks is not None:
        scope["chunks"] = chunks
    return scope


def _block_scope(block: Sequence[Chunk]) -> Scope:
    shards = {chunk.shard for chunk in block}
    group = block[0].shard if len(shards) == 1 else None
    return _scope(block[0].min, block[-1].max, group, len(block))


def chunk_scopes(
    chunks: Sequence[Chunk], *, parts: int, max_partitions: int
) -> tuple[list[Scope], str | None]:
    """Plan partitions along chunk boundaries; return the scopes and why they are degraded.

    Every run of same-shard chunks gets at least one partition (its group);
    runs are cut at chunk boundaries until there are ``parts`` partitions (as
    far as their chunks allow). With more runs than ``max_partitions`` the
    chunks are merged into ``max_partitions`` blocks by weight instead; blocks
    that span shards carry no group (``"ungrouped"``).
    """
    runs = runs_of(chunks)
    if len(runs) > max_partitions:
        weights = [chunk.weight for chunk in chunks]
        blocks = [chunks[a:b] for a, b in equal_weight_spans(weights, max_partitions)]
        return [_block_scope(block) for block in blocks], "ungrouped"
    wanted = min(max(parts, len(runs)), max_partitions)
    shares = allocate(
        [sum(chunk.weight for chunk in run) for run in runs],
        wanted,
        capacities=[len(run) for run in runs],
    )
    scopes: list[Scope] = []
    for run, share in zip(runs, shares, strict=True):
        weights = [chunk.weight for chunk in run]
        scopes.extend(_block_scope(run[a:b]) for a, b in equal_weight_spans(weights, share))
    return scopes, None


def _distinct_sorted(values: Sequence[KeyValues]) -> list[KeyValues]:
    kept: list[KeyValues] = []
    for value in values:
        if not kept or compare_keys(kept[-1], value) != 0:
            kept.append(value)
    return kept


def _usable(values: KeyValues) -> bool:
    """Whether a sampled key may be a cut point: NaN is never a bound."""
    return not any(is_nan(value) for value in values)


def sampled_scopes(
    chunks: Sequence[Chunk], samples: Iterable[KeyValues], *, parts: int
) -> list[Scope]:
    """Cut chunks at sampled shard-key values into about ``parts`` partitions.

    Every chunk is at least one partition (its shard is its group); the rest
    are shared out by how many samples fell in each chunk and cut at evenly
    spaced samples strictly inside it. ``samples`` are value tuples in key
    order (hashed fields as their hash), in any order.
    """
    ordered = sorted((tuple(s) for s in samples if _usable(tuple(s))), key=key_sort)
    lows = [key_sort(chunk.min) for chunk in chunks]
    inside: list[list[KeyValues]] = [[] for _ in chunks]
    for sample in ordered:
        index = bisect.bisect_right(lows, key_sort(sample)) - 1
        chunk = chunks[index]
        if compare_keys(sample, chunk.min) > 0 and compare_keys(sample, chunk.max) < 0:
            inside[index].append(sample)
    capacities = [len(_distinct_sorted(points)) + 1 for points in inside]
    shares = allocate([float(len(points)) for points in inside], parts, capacities=capacities)
    scopes: list[Scope] = []
    for chunk, points, share in zip(chunks, inside, shares, strict=True):
        cuts = _distinct_sorted([points[len(points) * j // share] for j in range(1, share)])
        bounds = [chunk.min, *cuts, chunk.max]
        whole = 1 if len(bounds) == 2 else None
        scopes.extend(
            _scope(low, high, chunk.shard, whole) for low, high in itertools.pairwise(bounds)
        )
    return scopes


def _scope_bounds(scope: Mapping[str, Any], key: ShardKey) -> tuple[KeyValues, KeyValues]:
    low, high = scope.get("min"), scope.get("max")
    width = len(key.fields)
    if (
        scope.get("kind") != SHARD_SCOPE_KIND
        or not isinstance(low, list | tuple)
        or not isinstance(high, list | tuple)
        or len(low) != width
        or len(high) != width
    ):
        raise ConfigInvalidError(
            "not a shard-range scope of this shard key", {"key": "scope", "kind": scope.get("kind")}
        )
    return tuple(low), tuple(high)


def targeting_filter(key: ShardKey, low: KeyValues, high: KeyValues) -> dict[str, Any]:
    """Return a filter on the leading shard-key field that ``mongos`` can target by.

    A superset of the range's documents, so it only narrows which shards are
    asked: empty unless the leading field is ranged and both bounds of it lie
    in one splittable type bracket (elsewhere a ``$gte``/``$lt`` would drop the
    documents of other types, which the range holds).
    """
    name, kind = key.fields[0]
    first_low, first_high = low[0], high[0]
    if (
        kind == HASHED
        or is_nan(first_low)
        or is_nan(first_high)
        or bracket_of(first_low) != bracket_of(first_high)
        or bracket_of(first_low) not in _SPLITTABLE
    ):
        return {}
    # Past the first field the upper bound is MinKey everywhere: the prefix alone
    # decides, and the upper bound is exclusive on it.
    exclusive = all(isinstance(value, MinKey) for value in high[1:])
    upper = "$lt" if exclusive else "$lte"
    return {name: {"$gte": first_low, upper: first_high}}


def _key_expressions(key: ShardKey) -> list[Any]:
    """The aggregation expressions of a document's shard-key values, as the index keys them."""
    return [
        {"$toHashedIndexKey": {"$ifNull": [f"${name}", None]}}
        if kind == HASHED
        else {"$ifNull": [f"${name}", None]}
        for name, kind in key.fields
    ]


# ─── partitioners ─────────────────────────────────────────────────────────────


class ShardPartitioner:
    """Partition a sharded collection along its chunks; read each range through the
    sharded version index and target writes by shard key.

    One instance belongs to one job (one collection, one direction, one epoch).

    :param sharding: the collection's shard facts, as the plan will record them.
    :param field: the version field.
    :param source: the version a pass reads (``from`` forward, ``to`` in revert).
    :param chunks: reads the collection's chunks (called once per plan).
    """

    id: Final = "shard"
    reads_ahead: Final = False

    def __init__(
        self,
        sharding: Sharding,
        *,
        field: str,
        source: int,
        chunks: Callable[[], list[Chunk]],
    ) -> None:
        self.key = sharding.key
        self.epoch = dict(sharding.epoch)
        self._field = field
        self._version = version_filter(field, source)[field]
        self._chunks = chunks

    # ── planning ──

    def plan(
        self,
        collection: Collection[Any],
        *,
        match: dict[str, Any],
        hint: Any | None,
        max_parallel: int,
        settings: PartitionSettings,
        count_cap: int = 1_000_000,
        shard_concurrency: int | None = None,
    ) -> Plan:
        """Split what ``match`` selects along the chunks (see the module docstring).

        Counts the documents (at most ``count_cap``) to size the plan; samples
        shard-key values only when there are fewer chunks than the pass is
        worth. A sample that runs out of ``settings.sample_timeout_ms`` (or that
        the server cannot run) leaves the plan on chunk boundaries and says so
        in ``degraded``. The plan records the epoch it was made at.

        :param shard_concurrency: not needed to plan (the store enforces it).
        """
        counted = count_matching(collection, match, hint, count_cap, settings.sample_timeout_ms)
        if counted.estimate == 0 and counted.degraded is None:
            return Plan("empty", 0, at_least=False, partitions=[], degraded=None, epoch=self.epoch)
        chunks = self._chunks()
        parts = counted.budget(settings.max_partitions) if max_parallel > 1 else 1
        degraded = counted.degraded
        if parts > len(chunks):
            samples, sample_degraded = self._sample(collection, match, hint, settings)
            degraded = sample_degraded or degraded
            if samples:
                scopes = sampled_scopes(chunks, samples, parts=parts)
                if len(scopes) > len(chunks):
                    return self._planned("sampled", collection, counted, scopes, degraded)
        scopes, ungrouped = chunk_scopes(
            chunks, parts=parts, max_partitions=settings.max_partitions
        )
        if ungrouped is not None:  # the coordinator warns about the degraded plan
            logger.debug(
                "%s: %d runs of chunks over %d partitions at most; merged blocks span shards",
                collection.full_name,
                len(runs_of(chunks)),
                settings.max_partitions,
            )
        return self._planned("chunks", collection, counted, scopes, ungrouped or degraded)

    def _sample(
        self,
        collection: Collection[Any],
        match: dict[str, Any],
        hint: Any | None,
        settings: PartitionSettings,
    ) -> tuple[list[KeyValues], str | None]:
        pipeline = [
            {"$match": match},
            {"$sample": {"size": settings.sample_size}},
            {"$project": {"_id": 0, "k": _key_expressions(self.key)}},
        ]
        options: dict[str, Any] = {
            "maxTimeMS": settings.sample_timeout_ms,
            "batchSize": settings.sample_size,
        }
        if hint is not None:
            options["hint"] = dict(hint) if not isinstance(hint, str) else hint
        try:
            with collection.aggregate(pipeline, **options) as cursor:
                return [tuple(row["k"]) for row in cursor], None
        except OperationFailure as exc:
            if timed_out(exc):
                logger.warning(
                    "sampling shard keys of %s ran out of its %d ms budget: chunk boundaries only",
                    collection.full_name,
                    settings.sample_timeout_ms,
                )
                return [], "sample-timeout"
            logger.warning(
                "sampling shard keys of %s failed (code %s): chunk boundaries only",
                collection.full_name,
                exc.code,
            )
            return [], "sample-failed"

    def _planned(
        self,
        method: str,
        collection: Collection[Any],
        counted: Count,
        scopes: list[Scope],
        degraded: str | None,
    ) -> Plan:
        groups = len({scope["group"] for scope in scopes if "group" in scope})
        logger.debug(
            "planned %s: %d partition(s) over %d shard group(s) by %s",
            collection.full_name,
            len(scopes),
            groups,
            method,
        )
        return Plan(
            method, counted.estimate, counted.at_least, scopes, degraded, epoch=dict(self.epoch)
        )

    # ── reading ──

    def scope_filter(self, scope: Mapping[str, Any]) -> dict[str, Any]:
        """Return an exact query for the documents of ``scope`` (an ``$expr``, not indexed).

        For checks and diagnostics; lanes read with :meth:`batch_query`.
        """
        low, high = _scope_bounds(scope, self.key)
        values = _key_expressions(self.key)
        return {
            "$expr": {
                "$and": [
                    {"$gte": [values, {"$literal": list(low)}]},
                    {"$lt": [values, {"$literal": list(high)}]},
                ]
            }
        }

    def _index_bounds(
        self, hint: Any, low: KeyValues, high: KeyValues
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The ``min``/``max`` of the hinted sharded version index for this version and range."""
        pattern = list(hint.items()) if isinstance(hint, Mapping) else list(hint or [])
        names = [name for name, _ in pattern]
        if (
            not names
            or names[0] != self._field
            or names[1 : 1 + len(self.key.fields)] != list(self.key.names)
        ):
            raise ConfigInvalidError(
                "a shard-range partition is read through the sharded version index",
                {"key": "hint"},
            )
        lower: dict[str, Any] = {self._field: self._version}
        upper: dict[str, Any] = {self._field: self._version}
        for name, low_value, high_value in zip(self.key.names, low, high, strict=True):
            lower[name] = low_value
            upper[name] = high_value
        for name in names[1 + len(self.key.fields) :]:
            lower[name] = MinKey()
            upper[name] = MinKey()
        return lower, upper

    def batch_query(
        self,
        scope: Mapping[str, Any],
        cursor: Mapping[str, Any],
        *,
        limit: int,
        match: dict[str, Any],
        hint: Any | None,
    ) -> BatchQuery:
        """Return the read of the next ``limit`` matching documents of ``scope``.

        ``match``, the targeting filter and the ``_id``s the cursor steps over,
        bounded by ``min``/``max`` on the hinted sharded version index, in its order.

        :raises ConfigInvalidError: a bad scope, a ``limit`` below 1, or no
            sharded version index to read through.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigInvalidError("limit must be an integer >= 1", {"key": "limit"})
        low, high = _scope_bounds(scope, self.key)
        lower, upper = self._index_bounds(hint, low, high)
        left = list(cursor.get("left") or [])
        query = conjunction(
            [
                match,
                targeting_filter(self.key, low, high),
                {"_id": {"$nin": left}} if left else {},
            ]
        )
        return BatchQuery(query, [], limit, hint, min=lower, max=upper)

    def advance(
        self,
        cursor: Mapping[str, Any],
        docs: Sequence[Mapping[str, Any]],
        *,
        limit: int,
        left: Sequence[Any] = (),
    ) -> dict[str, Any] | None:
        """Return the cursor after a batch: drained when it was short, else stepping over ``left``.

        ``left`` are the batch's documents that still match (conflicts, failed
        documents). Past :data:`MAX_LEFT` of them the partition ends here; what
        it leaves matches still, and the next pass reads it.
        """
        if len(docs) < limit:
            return None
        kept = [*(cursor.get("left") or []), *left]
        if len(kept) > MAX_LEFT:
            logger.info(
                "a partition stepped over %d documents; the next pass takes it on", MAX_LEFT
            )
            return None
        return {"left": kept}

    def past(
        self,
        cursor: Mapping[str, Any],
        docs: Sequence[Mapping[str, Any]],
        *,
        left: Sequence[Any] = (),
    ) -> dict[str, Any]:
        """Return the cursor after a processed prefix of a batch (stepping over its ``left``)."""
        kept = [*(cursor.get("left") or []), *left]
        return {"left": kept} if kept else {}

    def write_filter(self, doc: Mapping[str, Any]) -> dict[str, Any]:
        """Return the document's shard-key values, so ``mongos`` targets its shard."""
        return shard_key_write_filter(self.key, doc)

    def check_transform(
        self, before: Mapping[str, Any], after: Mapping[str, Any]
    ) -> Refusal | None:
        """Refuse a transform that changes a shard-key field (a ``shard-key`` document error)."""
        return shard_key_refusal(self.key, before, after)

    def stale(self, epoch: Any) -> bool:
        """Whether a plan made at ``epoch`` predates a reshard (or was made by another
        partitioner, without one)."""
        return not isinstance(epoch, Mapping) or dict(epoch) != self.epoch


class KeyedIdRangePartitioner(IdRangePartitioner):
    """``_id`` ranges on a sharded collection that cannot be split shard-aware.

    Plans and reads like :class:`IdRangePartitioner` (its plans stay valid),
    but writes carry the shard key and a transform may not change it.
    """

    def __init__(self, key: ShardKey) -> None:
        self.key = key

    def write_filter(self, doc: Mapping[str, Any]) -> dict[str, Any]:
        """Return the document's shard-key values, so ``mongos`` targets its shard."""
        return shard_key_write_filter(self.key, doc)

    def check_transform(
        self, before: Mapping[str, Any], after: Mapping[str, Any]
    ) -> Refusal | None:
        """Refuse a transform that changes a shard-key field."""
        return shard_key_refusal(self.key, before, after)


# ─── the catalog ──────────────────────────────────────────────────────────────


class ShardCatalog:
    """Reads what a cluster's ``config`` database says about sharded collections.

    :param client: the kit's client.
    :param config_db: where ``collections`` and ``chunks`` are read (default:
        the ``config`` database). Tests point it at recorded documents.
    :param sharded: whether the deployment is a sharded cluster (default: asked
        of the topology once it is known).
    """

    def __init__(
        self,
        client: MongoClient[dict[str, Any]],
        *,
        config_db: Database[dict[str, Any]] | None = None,
        sharded: bool | None = None,
    ) -> None:
        self._client = client
        self._config = config_db
        self._sharded = sharded

    @property
    def config(self) -> Database[dict[str, Any]]:
        return self._config if self._config is not None else self._client["config"]

    def is_sharded(self) -> bool:
        """Whether this client talks to a ``mongos`` (asked once the topology is known)."""
        if self._sharded is None:
            self._client.admin.command("ping")
            kind = self._client.topology_description.topology_type_name
            if kind == "Unknown":
                return False
            self._sharded = kind == "Sharded"
        return self._sharded

    def sharding_of(self, namespace: str) -> Sharding | Literal[_Unknown.UNKNOWN] | None:
        """The shard facts of ``namespace``; ``None`` when not sharded; :data:`UNKNOWN`
        when ``config`` may not be read."""
        try:
            doc = self.config["collections"].find_one({"_id": namespace})
        except OperationFailure as exc:
            if is_unauthorized(exc):
                return UNKNOWN
            raise
        return sharding_from(doc)

    def chunks_of(self, sharding: Sharding) -> list[Chunk]:
        """Read a collection's chunks, again if they changed while read.

        :raises ShardMetadataError: they never held together (retryable).
        """
        for attempt in range(_CHUNK_READS):
            docs = list(
                self.config["chunks"].find(
                    chunk_filter(sharding),
                    {"min": 1, "max": 1, "shard": 1, "jumbo": 1},
                    sort=[("min", 1)],
                )
            )
            try:
                return chunks_from(docs, sharding.key)
            except ShardMetadataError:
                if attempt + 1 == _CHUNK_READS:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover
