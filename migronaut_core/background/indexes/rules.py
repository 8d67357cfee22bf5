"""The version-index rule: which index a migration reads through, and whether it is there.

Every decision "is this the version index" is made here, with one equality
(:func:`~migronaut_core.required_indexes.same_index_key`: same fields, same
order, same directions, ``1`` and ``1.0`` alike):

- the *version index* is ``{field: 1, _id: 1}`` (:func:`version_index_key`); an
  unsharded collection needs exactly it (and so does one where
  ``background_shard_aware = "off"``, whose ``_id``-range reads need it);
- a sharded collection wants the variant that carries the shard key,
  ``{field: 1, <shard key fields>, _id: 1}`` (a hashed field stays hashed;
  :func:`~migronaut_core.background.planning.shard.sharded_version_index_key`
  gives its shape): the version field leads, so one version is one tight index
  range and drift probes stay a single seek; the shard-key fields follow, so
  each chunk range of that version is contiguous and the shard-aware
  partitioner can bound its reads with ``min``/``max``;
- the plain variant when the shard key cannot be read (no privilege on
  ``config``) or holds the version or revision field itself
  (:func:`wanted_version_index`);
- a drift probe (one equality on the version field) reads through the version
  index, else any index led by the version field ascending
  (:func:`probe_index`); the audit asks the same question
  (:func:`has_probe_index`);
- with ``ensure_indexes = false`` nothing creates it: :func:`check_version_indexes`
  names every declared collection that lacks the index it needs;
- an index whose key starts with the collection's shard key may back that key,
  so it is never dropped (:func:`backs_shard_key`); nor is any index of a
  sharded collection whose key cannot be read (:func:`drop_refusal`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pymongo.errors import PyMongoError

from migronaut_core.background.planning.shard import (
    UNKNOWN,
    Sharding,
    ShardKey,
    sharded_version_index_key,
)
from migronaut_core.background.spec import exclude_bad_ids, match_of
from migronaut_core.required_indexes import (
    RequiredIndex,
    key_direction,
    missing_error,
    same_index_key,
)

if TYPE_CHECKING:
    from migronaut_core.background.runtime import Runtime
    from migronaut_core.background.spec import BackgroundSpec
    from migronaut_core.definitions import CollectionDefinition

__all__ = [
    "IndexKey",
    "WantedIndex",
    "backs_shard_key",
    "check_version_indexes",
    "drop_refusal",
    "has_index",
    "has_probe_index",
    "probe_hint",
    "probe_index",
    "probe_query",
    "same_index_key",
    "version_hint",
    "version_index_key",
    "wanted_version_index",
]

IndexKey = list[tuple[str, Any]]
ShardingMode = Literal["off", "shard", "unknown"]


def version_index_key(spec: BackgroundSpec) -> list[tuple[str, int]]:
    """The plain version index of a spec's collection: ``{field: 1, _id: 1}``."""
    return _plain_key(spec.field)


def _plain_key(field: str) -> list[tuple[str, int]]:
    return [(field, 1), ("_id", 1)]


def has_index(rt: Runtime, collection: str, wanted: Sequence[tuple[str, Any]]) -> bool:
    """Whether ``collection`` has an index keyed exactly ``wanted`` (the runtime's cached keys)."""
    return any(same_index_key(key, wanted) for key in rt.index_keys(collection))


# -- which index a collection needs -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class WantedIndex:
    """The version index a collection needs.

    :param key: its key pattern.
    :param sharding: ``off`` (not sharded, or shard-awareness off), ``shard``
        (sharded, key read) or ``unknown`` (sharded, key unreadable).
    :param note: why the plain variant was chosen on a sharded collection.
    :param facts: the collection's shard facts, when it is sharded and they were read.
    :param shard_keyed: whether ``key`` is the sharded variant, so reads may follow
        the shard key (sharded, key read, key holding neither stamp field).
    """

    key: IndexKey
    sharding: ShardingMode
    note: str | None = None
    facts: Sharding | None = None
    shard_keyed: bool = False


def wanted_version_index(
    rt: Runtime, collection: str, field: str, revision_field: str | None
) -> WantedIndex:
    """The version index ``collection`` needs: the shard-key variant, or the plain one."""
    plain: IndexKey = list(_plain_key(field))
    if rt.shard_aware == "off" or not rt.shards.is_sharded():
        return WantedIndex(plain, "off")
    facts = rt.shards.sharding_of(f"{rt.db.name}.{collection}")
    if facts is None:
        return WantedIndex(plain, "off")
    if facts is UNKNOWN:
        return WantedIndex(
            plain,
            "unknown",
            "the shard key cannot be read (config needs clusterMonitor): the plain version "
            "index was chosen",
        )
    if field in facts.key.names or (
        revision_field is not None and revision_field in facts.key.names
    ):
        return WantedIndex(
            plain,
            "shard",
            "the shard key holds the version or revision field: background migrations over "
            "it split by _id",
            facts,
        )
    return WantedIndex(
        sharded_version_index_key(field, facts.key), "shard", facts=facts, shard_keyed=True
    )


def check_version_indexes(rt: Runtime, definitions: Sequence[CollectionDefinition]) -> None:
    """Check, creating nothing, that every declared collection has its version index.

    For ``ensure_indexes = false``: the index :func:`wanted_version_index` says,
    read afresh; any index with that key will do.

    :raises IndexMissingError: naming each collection that lacks it, and the key.
    """
    missing = []
    for definition in definitions:
        versioning = definition.versioning
        if versioning is None:
            continue
        wanted = wanted_version_index(
            rt, definition.name, versioning.field, versioning.revision_field
        ).key
        live = rt.db[definition.name].list_indexes()
        if not any(same_index_key(index["key"], wanted) for index in live):
            missing.append(RequiredIndex(definition.name, tuple(wanted)))
    if missing:
        raise missing_error(missing)


# -- hints -------------------------------------------------------------------------------


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


def probe_index(keys: Sequence[Mapping[str, Any]], field: str) -> IndexKey | None:
    """Among index key patterns, the one a drift probe on ``field`` reads through.

    The version index; else any index led by ``field`` ascending — on a sharded
    collection, the version index that carries the shard key; else ``None``.
    """
    plain: IndexKey = list(_plain_key(field))
    if any(same_index_key(key, plain) for key in keys):
        return plain
    for key in keys:
        first = next(iter(key.items()), None)
        if first is not None and first[0] == field and key_direction(first[1]) == 1.0:
            return list(key.items())
    return None


def probe_hint(rt: Runtime, spec: BackgroundSpec) -> IndexKey | None:
    """The index a drift probe (one equality on the version field) reads through.

    :func:`probe_index` over the collection's indexes; else none (warned once,
    as :func:`version_hint` does).
    """
    assert spec.collection is not None
    found = probe_index(rt.index_keys(spec.collection), spec.field)
    return found if found is not None else version_hint(rt, spec)


def probe_query(
    rt: Runtime, spec: BackgroundSpec, bad_ids: Sequence[Any] = ()
) -> tuple[dict[str, Any], IndexKey | None]:
    """The filter and index hint of a migration's drift probe.

    Old-shape documents (the source version) minus the known failed ones,
    through the version index (or an index led by the version field): what drift
    verification reads and a finalize soak counts.
    """
    assert spec.collection is not None
    return exclude_bad_ids(match_of(spec, "forward"), list(bad_ids)), probe_hint(rt, spec)


def has_probe_index(rt: Runtime, collection: str, field: str) -> bool:
    """Whether ``collection`` has an index a drift probe on ``field`` reads through.

    Read afresh, not from the runtime's cache (which may predate a dropped
    index); a collection whose indexes cannot be listed has none.
    """
    try:
        keys = [dict(index["key"]) for index in rt.db[collection].list_indexes()]
    except PyMongoError:
        return False
    return probe_index(keys, field) is not None


# -- what may never be dropped -----------------------------------------------------------


def backs_shard_key(key: Mapping[str, Any], shard_key: ShardKey) -> bool:
    """Whether an index's key starts with the shard key (same fields, order and kinds).

    Such an index can be the one the shard key needs (a sharded collection keeps
    at least one); which of several does is the cluster's business, so every one
    counts.
    """
    wanted = shard_key.fields
    have = list(key.items())[: len(wanted)]
    return len(have) == len(wanted) and same_index_key(dict(have), wanted)


def drop_refusal(key: Mapping[str, Any], sharding: Sharding | object | None) -> str | None:
    """Why an index of a collection with these shard facts must not be dropped, or None.

    :param sharding: the collection's :class:`Sharding`, ``None`` when it is not
        sharded, or :data:`UNKNOWN` when the shard key cannot be read (then no
        index is dropped: any could be the one the key needs).
    """
    if sharding is None:
        return None
    if sharding is UNKNOWN or not isinstance(sharding, Sharding):
        return "the shard key cannot be read (config needs clusterMonitor): it may need this index"
    if backs_shard_key(key, sharding.key):
        return "the shard key needs it (its key starts with the shard key)"
    return None
