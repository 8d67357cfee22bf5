"""The version index: its one rule, and converge, which creates it.

:mod:`~migronaut_core.background.indexes.rules` decides which index a
background migration, a drift probe and the audit read through or look for
(one key equality, one hint rule); :mod:`~migronaut_core.background.indexes.converge`
creates the index a declared collection needs. Import the names below from
this package.
"""

from __future__ import annotations

from migronaut_core.background.indexes.converge import ConvergeReport, IndexReport, converge
from migronaut_core.background.indexes.rules import (
    IndexKey,
    WantedIndex,
    check_version_indexes,
    has_index,
    has_probe_index,
    probe_hint,
    probe_index,
    same_index_key,
    version_hint,
    version_index_key,
    wanted_version_index,
)

__all__ = [
    "ConvergeReport",
    "IndexKey",
    "IndexReport",
    "WantedIndex",
    "check_version_indexes",
    "converge",
    "has_index",
    "has_probe_index",
    "probe_hint",
    "probe_index",
    "same_index_key",
    "version_hint",
    "version_index_key",
    "wanted_version_index",
]
