"""The version index: its one rule, and converge, which creates it.

:mod:`~migronaut_core.background.indexes.rules` decides which index a
background migration, a drift probe and the audit read through or look for
(one key equality, one hint rule), and which index may never be dropped;
:mod:`~migronaut_core.background.indexes.converge` creates the index a declared
collection needs, recorded in the converge log;
:mod:`~migronaut_core.background.indexes.prune` drops the ones it created that
nothing declares any more. Import the names below from this package.
"""

from __future__ import annotations

from migronaut_core.background.indexes.converge import ConvergeReport, IndexReport, converge
from migronaut_core.background.indexes.prune import PruneReport
from migronaut_core.background.indexes.rules import (
    IndexKey,
    WantedIndex,
    backs_shard_key,
    check_version_indexes,
    drop_refusal,
    has_index,
    has_probe_index,
    probe_hint,
    probe_index,
    probe_query,
    same_index_key,
    version_hint,
    version_index_key,
    wanted_version_index,
)

__all__ = [
    "ConvergeReport",
    "IndexKey",
    "IndexReport",
    "PruneReport",
    "WantedIndex",
    "backs_shard_key",
    "check_version_indexes",
    "converge",
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
