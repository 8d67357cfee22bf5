"""Split a background migration's collection into partitions and read it batch by batch.

Import from here; the modules are the map:

===================  ==============================================================
:mod:`.protocol`     the :class:`Partitioner` protocol and what it hands over:
                     :class:`Plan`, :class:`BatchQuery`, :class:`Refusal`;
                     :func:`find` runs a batch query
:mod:`.counting`     sizing a plan: :func:`count_matching` (a :class:`Count`),
                     :func:`partition_budget`, the sample pipelines
:mod:`.id_scopes`    the ``all``/``id-range``/``rest`` scopes, their filters and
                     :func:`scopes_from_sample` (pure; the coverage guarantee)
:mod:`.id_range`     :class:`IdRangePartitioner`, which plans and reads by ``_id``
===================  ==============================================================

Dependencies point down the table's order. The shard-aware partitioners
(:mod:`~migronaut_core.background.planning.shard`) build on the protocol and
the counting, and read ``_id`` ranges through :class:`IdRangePartitioner`.
"""

from migronaut_core.background.planning.partition.counting import (
    MIN_PARTITION_DOCS,
    Count,
    count_matching,
    partition_budget,
    random_sample_pipeline,
    sample_pipeline,
)
from migronaut_core.background.planning.partition.id_range import IdRangePartitioner
from migronaut_core.background.planning.partition.id_scopes import (
    ALL_KIND,
    RANGE_KIND,
    REST_KIND,
    scopes_from_sample,
)
from migronaut_core.background.planning.partition.protocol import (
    BatchQuery,
    Partitioner,
    Plan,
    Refusal,
    find,
)
from migronaut_core.background.spec import PartitionSettings

__all__ = [
    "ALL_KIND",
    "MIN_PARTITION_DOCS",
    "RANGE_KIND",
    "REST_KIND",
    "BatchQuery",
    "Count",
    "IdRangePartitioner",
    "PartitionSettings",
    "Partitioner",
    "Plan",
    "Refusal",
    "count_matching",
    "find",
    "partition_budget",
    "random_sample_pipeline",
    "sample_pipeline",
    "scopes_from_sample",
]
