"""Shard-range scopes: how a plan cuts the chunks into partitions, and how one is read.

A scope is ``{"kind": "shard-range", "min": [...], "max": [...], "group":
<shard>}``: a contiguous range of shard-key values (bounds are value lists in
key order, ``MinKey``/``MaxKey`` at the ends). Every run of same-shard chunks
gets at least one partition, its ``group`` (the store caps the live leases
per group at ``shard_concurrency``), and runs with many chunks are cut at
chunk boundaries into as many partitions as the pass is worth
(:func:`chunk_scopes`, plan method ``chunks``; jumbo chunks weigh
:data:`~.chunks.JUMBO_WEIGHT` chunks). More runs than ``max_partitions``
(chunks scattered over the shards) are merged into ``max_partitions`` blocks
that span shards and carry no group (``degraded: ungrouped``). Fewer chunks
than the pass is worth (a young collection, one huge chunk) are cut inside at
shard-key values sampled from the documents (:func:`sampled_scopes`, method
``sampled``; a hashed field is sampled by its hash). Budgets are shared and
runs cut by :mod:`~migronaut_core.background.planning.apportion`.

A ranged leading field also gets a filter on its bounds
(:func:`targeting_filter`), so ``mongos`` sends the read to the shard that owns
the range.

Pure. Scope bounds are document values: never in messages or logs.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from bson.min_key import MinKey

from migronaut_core.background.planning.apportion import allocate, equal_weight_spans
from migronaut_core.background.planning.brackets import BRACKETS, bracket_of
from migronaut_core.background.planning.filters import is_nan
from migronaut_core.background.planning.keyorder import compare_keys, key_sort
from migronaut_core.background.planning.partition.protocol import Scope
from migronaut_core.background.planning.shard.chunks import Chunk, runs_of
from migronaut_core.background.planning.shard.keys import HASHED, KeyValues, ShardKey
from migronaut_core.errors import ConfigInvalidError

__all__ = [
    "SHARD_SCOPE_KIND",
    "chunk_scopes",
    "sampled_scopes",
    "scope_bounds",
    "targeting_filter",
]

#: The ``kind`` of a shard-range partition scope.
SHARD_SCOPE_KIND: Final = "shard-range"
_SPLITTABLE: Final = frozenset(bracket.name for bracket in BRACKETS if bracket.splittable)


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


def scope_bounds(scope: Mapping[str, Any], key: ShardKey) -> tuple[KeyValues, KeyValues]:
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
