"""Where background migrations keep their state, and the only code that touches it.

- :mod:`.states`: one state document per migration (status moves, history,
  compare-and-set, the caps on what a state keeps);
- :mod:`.partitions`: the partitions of its plans and the leases lanes hold
  on them (claims, checkpoints, release, reap, the roll-up sums);
- :mod:`.watch`: the drift watcher's rows, one per watched collection;
- :mod:`.converge_log`: every index converge created or dropped;
- :mod:`.drift_events`: where the event-driven drift triggers resume their streams.

:class:`BackgroundStore` is the one handle callers use for the first two;
every name a caller may import is re-exported here.
"""

from __future__ import annotations

from migronaut_core.background.store.converge_log import (
    ConvergeAction,
    ConvergeLog,
    converge_entry_view,
)
from migronaut_core.background.store.drift_events import (
    DriftPosition,
    clear_drift_position_async,
    collection_states_async,
    read_drift_position,
    read_drift_position_async,
    save_drift_position_async,
)
from migronaut_core.background.store.partitions import (
    OPEN_STATUSES,
    Claim,
    GenerationTotals,
    Lease,
    PartitionCounts,
    PartitionDocuments,
    live_leases_filter,
    open_partitions_filter,
)
from migronaut_core.background.store.states import (
    LANES_STATE_PROJECTION,
    MAX_BAD_IDS,
    MAX_DOC_ERRORS,
    MAX_HISTORY,
    STATE_SCHEMA,
    Document,
    newer_schema,
)
from migronaut_core.background.store.watch import (
    STREAMING_FRESH_SECONDS,
    WATCH_COUNTERS,
    Fence,
    WatchStore,
    aware,
    watch_view,
)


class BackgroundStore(PartitionDocuments):
    """State and partitions of background migrations in one database."""


__all__ = [
    "LANES_STATE_PROJECTION",
    "MAX_BAD_IDS",
    "MAX_DOC_ERRORS",
    "MAX_HISTORY",
    "OPEN_STATUSES",
    "STATE_SCHEMA",
    "STREAMING_FRESH_SECONDS",
    "WATCH_COUNTERS",
    "BackgroundStore",
    "Claim",
    "ConvergeAction",
    "ConvergeLog",
    "Document",
    "DriftPosition",
    "Fence",
    "GenerationTotals",
    "Lease",
    "PartitionCounts",
    "WatchStore",
    "aware",
    "clear_drift_position_async",
    "collection_states_async",
    "converge_entry_view",
    "live_leases_filter",
    "newer_schema",
    "open_partitions_filter",
    "read_drift_position",
    "read_drift_position_async",
    "save_drift_position_async",
    "watch_view",
]
