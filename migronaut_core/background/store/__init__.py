"""Where background migrations keep their state, and the only code that touches it.

- :mod:`.states`: one state document per migration (status moves, history,
  compare-and-set, the caps on what a state keeps);
- :mod:`.partitions`: the partitions of its plans (commit, supersede, the
  roll-up sums);
- :mod:`.leases`: the leases lanes hold on partitions (claims, renewals,
  checkpoints and every other write fenced by a lease, release, reap);
- :mod:`.watch`: the drift watcher's rows, one per watched collection;
- :mod:`.converge_log`: every index converge created or dropped;
- :mod:`.drift_events`: where the event-driven drift triggers resume their streams;
- :mod:`.lanes`: the reads Airflow's lanes sensor and its trigger wait on (sync and async);
- :mod:`.stalls`: the stall watch's reads of running migrations and what it signalled;
- :mod:`.budget`: the target's write budget (one bucket on the server's clock)
  and its brake;
- :mod:`.journal`: the undo journal, before-images of documents a migration with
  ``undo = "journal"`` rewrote (a TTL index expires them);
- :mod:`.documents`: the shapes of the documents it keeps (``StateDocument``,
  ``HistoryDocument``, ``PartitionDocument``, ``LeaseDocument``,
  ``ConvergeLogDocument``, ``WatchDocument``…).

:class:`BackgroundStore` is the one handle callers use for the first three,
composed of them: ``store.states``, ``store.partitions``, ``store.leases``, and
``store.journal``.
Every name a caller may import is re-exported here.
"""

from __future__ import annotations

from pymongo.database import Database

from migronaut_core.background.store.budget import BudgetStore, Grant
from migronaut_core.background.store.converge_log import ConvergeAction, ConvergeLog
from migronaut_core.background.store.documents import (
    BrakeDocument,
    BrakeLogDocument,
    CanaryDocument,
    ControlMark,
    ConvergeLogDocument,
    CoordinatorMark,
    HistoryDocument,
    HoldDocument,
    InflightDocument,
    JournalDocument,
    LeaseDocument,
    PartitionDocument,
    PlanDocument,
    ReplayDocument,
    StateDocument,
    ValidatorDocument,
    WatchDocument,
    WatchLeaderDocument,
)
from migronaut_core.background.store.drift_events import (
    DriftPosition,
    clear_drift_position_async,
    collection_states_async,
    read_drift_position,
    read_drift_position_async,
    save_drift_position_async,
)
from migronaut_core.background.store.journal import JOURNAL_WRITE_CONCERN, BeforeImage, UndoJournal
from migronaut_core.background.store.leases import Claim, Lease, Leases, live_leases_filter
from migronaut_core.background.store.partitions import (
    OPEN_STATUSES,
    GenerationTotals,
    PartitionCounts,
    PartitionDocuments,
    open_partitions_filter,
)
from migronaut_core.background.store.states import (
    LANES_STATE_PROJECTION,
    MAX_BAD_IDS,
    MAX_DOC_ERRORS,
    MAX_HISTORY,
    STATE_SCHEMA,
    Document,
    StateDocuments,
    newer_schema,
)
from migronaut_core.background.store.watch import (
    STREAMING_FRESH_SECONDS,
    WATCH_COUNTERS,
    Fence,
    WatchStatusRow,
    WatchStore,
    resume_position,
)
from migronaut_core.config import BackgroundCollections
from migronaut_core.required_indexes import RequiredIndex, ensure_indexes


class BackgroundStore:
    """The state, partitions and leases of background migrations in one database.

    :param db: the database migronaut's collections live in.
    :param names: their names (the state and partitions collections).
    """

    def __init__(self, db: Database[Document], names: BackgroundCollections) -> None:
        self.db = db
        #: One state document per migration.
        self.states = StateDocuments(db, names)
        #: The partitions of its plans (a plan commits against its state).
        self.partitions = PartitionDocuments(db, names, self.states)
        #: The leases lanes hold on partitions, and every write fenced by one.
        self.leases = Leases(db, names)
        #: The target's write budget and brake (one document for every migration).
        self.budget = BudgetStore(db, names)
        #: The before-images of journaling migrations, for ``background undo``.
        self.journal = UndoJournal(db, names.undo)

    @property
    def namespace(self) -> str:
        """The state collection's full name: what tells apart deployments in one process."""
        return self.states.namespace

    def required_indexes(self) -> list[RequiredIndex]:
        """The indexes the store's queries and the lease caps need."""
        return [
            *self.partitions.required_indexes(),
            *self.leases.required_indexes(),
            *self.states.required_indexes(),
            *self.journal.required_indexes(),
        ]

    def ensure_indexes(self, *, create: bool = True) -> None:
        """Create :meth:`required_indexes` (idempotent), or only check that they exist.

        :raises IndexMissingError: ``create`` is false and some are missing;
            nothing was written.
        """
        ensure_indexes(self.db, self.required_indexes(), create=create)


__all__ = [
    "JOURNAL_WRITE_CONCERN",
    "LANES_STATE_PROJECTION",
    "MAX_BAD_IDS",
    "MAX_DOC_ERRORS",
    "MAX_HISTORY",
    "OPEN_STATUSES",
    "STATE_SCHEMA",
    "STREAMING_FRESH_SECONDS",
    "WATCH_COUNTERS",
    "BackgroundStore",
    "BeforeImage",
    "BrakeDocument",
    "BrakeLogDocument",
    "BudgetStore",
    "CanaryDocument",
    "Claim",
    "ControlMark",
    "ConvergeAction",
    "ConvergeLog",
    "ConvergeLogDocument",
    "CoordinatorMark",
    "Document",
    "DriftPosition",
    "Fence",
    "GenerationTotals",
    "Grant",
    "HistoryDocument",
    "HoldDocument",
    "InflightDocument",
    "JournalDocument",
    "Lease",
    "LeaseDocument",
    "Leases",
    "PartitionCounts",
    "PartitionDocument",
    "PartitionDocuments",
    "PlanDocument",
    "ReplayDocument",
    "StateDocument",
    "StateDocuments",
    "UndoJournal",
    "ValidatorDocument",
    "WatchDocument",
    "WatchLeaderDocument",
    "WatchStatusRow",
    "WatchStore",
    "clear_drift_position_async",
    "collection_states_async",
    "live_leases_filter",
    "newer_schema",
    "open_partitions_filter",
    "read_drift_position",
    "read_drift_position_async",
    "resume_position",
    "save_drift_position_async",
]
