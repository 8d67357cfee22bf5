"""The partitioners of a sharded collection: along its chunks, or by ``_id`` when it cannot be.

:class:`ShardPartitioner` plans along the chunks (:mod:`.scopes`) and reads a
partition through the *sharded version index*
``{<field>: 1, <shard key fields>, _id: 1}``, whose ``min``/``max`` index
bounds select exactly one version and one range of shard-key values — hashed
fields included, which no query filter can bound. A ranged leading field also
gets a filter on its bounds (:func:`~.scopes.targeting_filter`), so ``mongos``
sends the read to the shard that owns the range; chunks at either end of the
key space, and hashed keys, are read from every shard (their bounds cannot be
written as a filter without type bracketing losing documents). A partition
*drains*: each batch reads the first matching documents of the range,
rewritten documents leave the match, and the ones that stay (conflicts left to
the next pass, failed documents) are stepped over by ``_id`` (the cursor keeps
at most :data:`MAX_LEFT` of them; past that the partition ends and the next
pass takes the rest).

:class:`KeyedIdRangePartitioner` plans and reads ``_id`` ranges. Both write
with the shard key (:class:`~.keys.ShardKeyWrites`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from bson.min_key import MinKey
from pymongo.errors import OperationFailure

from migronaut_core.background.planning.filters import conjunction
from migronaut_core.background.planning.partition.counting import (
    Count,
    count_matching,
    hint_option,
)
from migronaut_core.background.planning.partition.id_range import IdRangePartitioner
from migronaut_core.background.planning.partition.protocol import BatchQuery, Plan, Scope
from migronaut_core.background.planning.shard.chunks import Chunk, Sharding, runs_of
from migronaut_core.background.planning.shard.keys import (
    KeyValues,
    ShardKey,
    ShardKeyWrites,
    key_expressions,
)
from migronaut_core.background.planning.shard.scopes import (
    chunk_scopes,
    sampled_scopes,
    scope_bounds,
    targeting_filter,
)
from migronaut_core.background.spec import PartitionSettings
from migronaut_core.checks import check_int
from migronaut_core.errors import ConfigInvalidError
from migronaut_core.server_errors import timed_out
from migronaut_core.versioning import version_filter

if TYPE_CHECKING:
    from pymongo.collection import Collection

__all__ = ["MAX_LEFT", "KeyedIdRangePartitioner", "ShardPartitioner"]

logger = logging.getLogger(__name__)

#: Ids a draining partition steps over, kept in its cursor at most.
MAX_LEFT: Final = 1_000


class ShardPartitioner(ShardKeyWrites):
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
    ) -> Plan:
        """Split what ``match`` selects along the chunks (see the module docstring).

        Counts the documents (at most ``count_cap``) to size the plan; samples
        shard-key values only when there are fewer chunks than the pass is
        worth. A sample that runs out of ``settings.sample_timeout_ms`` (or that
        the server cannot run) leaves the plan on chunk boundaries and says so
        in ``degraded``. The plan records the epoch it was made at. The store, not
        the plan, caps the live leases per shard group (``shard_concurrency``).
        """
        counted = count_matching(collection, match, hint, count_cap, settings.sample_timeout_ms)
        if counted.estimate == 0 and counted.degraded is None:
            return Plan("empty", 0, at_least=False, partitions=[], degraded=None, epoch=self.epoch)
        chunks = self._chunks()
        parts = counted.budget(settings) if max_parallel > 1 else 1
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
            {"$project": {"_id": 0, "k": key_expressions(self.key)}},
        ]
        options: dict[str, Any] = {
            "maxTimeMS": settings.sample_timeout_ms,
            "batchSize": settings.sample_size,
            **hint_option(hint),
        }
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
        low, high = scope_bounds(scope, self.key)
        values = key_expressions(self.key)
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
        check_int("limit", limit, 1)
        low, high = scope_bounds(scope, self.key)
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

    def stale(self, epoch: Any) -> bool:
        """Whether a plan made at ``epoch`` predates a reshard (or was made by another
        partitioner, without one)."""
        return not isinstance(epoch, Mapping) or dict(epoch) != self.epoch


class KeyedIdRangePartitioner(ShardKeyWrites, IdRangePartitioner):
    """``_id`` ranges on a sharded collection that cannot be split shard-aware.

    Plans and reads like :class:`IdRangePartitioner` (its plans stay valid),
    but writes carry the shard key and a transform may not change it.
    """

    def __init__(self, key: ShardKey) -> None:
        self.key = key
