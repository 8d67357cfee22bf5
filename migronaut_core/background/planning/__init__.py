"""Planning: how a pass splits a collection into partitions, and how a lane reads one.

=====================  ==========================================================
:mod:`.shard`          the shard-aware partitioners and the ``config`` catalog
:mod:`.partition`      the ``Partitioner`` protocol, ``Plan`` and ``BatchQuery``,
                       counting and sampling, and the ``_id``-range partitioner
:mod:`.keyorder`       the server's sort order, for shard-key bounds (pure)
:mod:`.brackets`       ``_id`` ranges that never cross a BSON type bracket (pure)
:mod:`.apportion`      sharing a partition budget by weight, equal-weight cuts (pure)
:mod:`.filters`        ``$and`` of filter parts, and the NaN test for bounds (pure)
=====================  ==========================================================

Each module imports only modules below it in this table. Nothing here imports
the coordinator, the lanes or the engine.
"""
