"""The shapes of the documents the store keeps: what it writes is the contract.

Each :class:`~typing.TypedDict` lists every key the store (or a caller through
it: a registration's fields, a status move's, a checkpoint's) writes on that
document, so every read of one is checked by ``mypy --strict``. Keys a document
does not always carry are not required; a read with ``[]`` of one is a claim
that the caller knows it is there (a partition of a committed plan has a
``plan``), a read with ``.get`` is not.

- :class:`StateDocument`: one per background migration (``states.py``), with
  its :class:`PlanDocument`, :class:`CoordinatorMark`, :class:`ControlMark` and
  :data:`HistoryDocument` list and its :class:`ValidatorDocument`;
- :class:`PartitionDocument`: one scope of a plan (``partitions.py``), with the
  :class:`LeaseDocument` a lane holds on it (``leases.py``) and its
  :class:`InflightDocument`;
- :class:`ConvergeLogDocument`: one index converge created or dropped
  (``converge_log.py``);
- :class:`WatchDocument`: a drift watcher's row (``watch.py``), with its
  :class:`WatchLeaderDocument`;
- :class:`JournalDocument`: one document's before-image in the undo journal
  (``journal.py``).

No document is checked when it is read: these are types only (a cast at the
store's read boundary), at no cost at run time.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Required, TypedDict

#: An entry of a state's ``history``: a status move (``from`` → ``to``) or an
#: operator's act that moves none (``repin``, ``unlock``). ``from`` is a keyword,
#: hence the functional form.
HistoryDocument = TypedDict(
    "HistoryDocument",
    {
        "action": Required[str],
        "at": Required[datetime],
        "from": str,
        "to": "str | None",
        "by": "str | None",
        "reason": str,
        "requested_by": str,
        "replan": bool,
        "lock": bool,
        "leases": int,
        "failed_only": bool,
        "failed": int,
    },
    total=False,
)


class PlanDocument(TypedDict, total=False):
    """A state's committed plan (``plan``): its token and how it was made."""

    token: Required[str]
    partitioner: str
    method: str
    estimate: int
    #: The hash of what the pass matches (a plan of another match is replanned).
    match: str
    at_least: bool
    approximate: bool
    degraded: str
    epoch: Any
    sharding: dict[str, Any]


class CoordinatorMark(TypedDict, total=False):
    """The last coordinator step on a state (``coordinator``)."""

    kind: Required[str]
    at: Required[datetime]
    ref: str


class ControlMark(TypedDict, total=False):
    """The last control applied to a state (``control``)."""

    action: Required[str]
    at: Required[datetime]
    requested_by: str
    reason: str


class HoldDocument(TypedDict, total=False):
    """Why the lanes hold (``hold``), for one ``reason``.

    ``health``: a server health signal (``signal``) past its hard limit
    (``level``, ``reading``, ``limit``). ``window``: no maintenance window is
    open; ``until``: when the next one opens. ``brake``: the target's brake
    (``signal`` ``brake``, no ``until``). ``since``: when this hold began;
    ``at``: when a lane last confirmed it (refreshed about every 10 s while
    lanes look). Removed by the first lane that finds nothing holding it.
    """

    reason: Required[str]
    since: Required[datetime]
    at: Required[datetime]
    signal: str
    level: str
    reading: float | bool
    limit: float | bool
    until: datetime


class ValidatorDocument(TypedDict, total=False):
    """A finalizing migration's collection validator (``validator``).

    ``phase``: a :data:`~migronaut_core.background.states.ValidatorPhase`;
    ``previous``: the collection's validation options before finalize, BSON-encoded
    (restored exactly by ``down``); ``since``: when the current soak began (the warn,
    or the last healed old-shape documents); ``until``: the soak's earliest end by
    time; ``clean_passes``: clean checks in a row; ``old_shape``: old-shape documents
    the last check that found any counted (at least), ``old_shape_seen``: their sum
    over the soak's checks, ``old_shape_at``: when; ``enforced_at``: set to ``error``.
    """

    phase: Required[str]
    previous: Required[bytes]
    since: datetime
    until: datetime
    clean_passes: int
    old_shape: int
    old_shape_seen: int
    old_shape_at: datetime
    enforced_at: datetime


class CanaryDocument(TypedDict, total=False):
    """A canary's progress (``canary``), absent while its first pass migrates the subset.

    ``phase``: a :data:`~migronaut_core.background.states.CanaryPhase`; ``since``: when
    the current soak began; ``until``: its earliest end by time; ``clean_passes``: clean
    checks in a row; ``counts``: the subset's documents by version at the last check
    (``old``, ``new``: each at most the count limit); ``drift``: the old-shape share of
    the subset then; ``sample``: what the idempotence check's re-run found (``sampled``,
    ``changed``, ``raised``); ``checked_at``: when; ``failed``: the check that paused it
    (``check``, ``reason``: value-free, ``at``); ``approved``/``rejected``: who, why, when.
    """

    phase: Required[str]
    since: datetime
    until: datetime
    clean_passes: int
    counts: dict[str, int]
    drift: float
    sample: dict[str, int]
    checked_at: datetime
    failed: dict[str, Any] | None
    approved: dict[str, Any]
    rejected: dict[str, Any] | None


class ReplayDocument(TypedDict, total=False):
    """A failed-only retry (``replay``): asked for by a control, started by a coordinator.

    ``token`` names the request. A coordinator step starts it: it moves the
    failed ids from ``bad_ids`` to ``ids`` and plans one pass over exactly those
    (its ``generation``); rolling that generation up ends it (the field is
    removed, the ids that failed again are back in ``bad_ids``).
    """

    token: Required[str]
    requested_at: Required[datetime]
    ids: list[Any]
    generation: int


#: One background migration's state. ``pass`` is a keyword, hence the functional form.
StateDocument = TypedDict(
    "StateDocument",
    {
        "_id": Required[str],
        # -- written by every registration (``StateDocuments.register``) --
        "schema": int,
        "registration": str,
        "status": str,
        "mode": str,
        "direction": str,
        "spec": "dict[str, Any]",
        "checksum": str,
        "requires": "list[str]",
        "waits_for": "list[str]",
        "collection": "str | None",
        "description": "str | None",
        "phase": str,
        "generation": int,
        "pass": int,
        "rolled_generation": int,
        "totals": "dict[str, int]",
        "bad_ids": "list[Any]",
        "doc_errors": "list[dict[str, Any]]",
        "failed_partitions": int,
        "last_error": "str | None",
        "updated_at": datetime,
        "registered_at": datetime,
        "created_at": datetime,
        "history": "list[HistoryDocument]",
        # -- written as it runs --
        "plan": PlanDocument,
        "started_at": datetime,
        "pass_started_at": datetime,
        "last_progress_at": datetime,
        "completed_at": datetime,
        "failed_at": datetime,
        "coordinator": CoordinatorMark,
        "round": int,
        "control": ControlMark,
        "reopened": int,
        "hold": HoldDocument,
        "validator": ValidatorDocument,
        "canary": CanaryDocument,
        # -- an undo's registration (``background undo``): ``"journal"`` --
        "undo": str,
        "replay": "ReplayDocument | None",
    },
    total=False,
)


class LeaseDocument(TypedDict, total=False):
    """A lane's lease on a partition (``lease``); its expiry is judged on the server's clock
    (``renewed_at`` + ``ttl_ms`` against ``$$NOW``)."""

    token: Required[str]
    owner: Required[str]
    slot: Required[int]
    ttl_ms: Required[int]
    renewed_at: datetime
    claimed_at: datetime
    group: str
    group_slot: int


class InflightDocument(TypedDict):
    """The ids a lane's batch is about to write (``inflight``)."""

    ids: list[Any]


class PartitionDocument(TypedDict, total=False):
    """One scope of a plan: its cursor, counters, failures and lease."""

    _id: Required[Any]
    migration: Required[str]
    generation: Required[int]
    #: The token of the plan it belongs to.
    plan: Required[str]
    index: Required[int]
    scope: Required[dict[str, Any]]
    group: str
    status: Required[str]
    cursor: Required[dict[str, Any]]
    counters: Required[dict[str, int]]
    bad_ids: Required[list[Any]]
    doc_errors: Required[list[dict[str, Any]]]
    slice_failures: Required[int]
    created_at: Required[datetime]
    updated_at: Required[datetime]
    lease: LeaseDocument
    inflight: InflightDocument
    throttle: dict[str, Any]
    last_error: str
    #: A step migration's total (``fields`` of its checkpoint).
    step_total: int


class ConvergeLogDocument(TypedDict):
    """One entry of the converge log: an index converge ``created`` or ``dropped``."""

    #: An ``ObjectId``, or for a creation the claim that names the index's entry before
    #: it (``{created: <collection>, index, after}``).
    _id: Any
    collection: str
    action: str
    #: The index's name.
    index: str
    key: dict[str, Any]
    #: The actor's ``requested_by`` and ``reason``, and the ``host`` and ``pid``.
    by: dict[str, Any]
    #: The server's clock when it was recorded.
    at: datetime


class WatchLeaderDocument(TypedDict, total=False):
    """The process leading a drift watcher (``leader``)."""

    owner: Required[str]
    host: str
    pid: int
    since: datetime


class WatchDocument(TypedDict, total=False):
    """A drift watcher's row, one per watched collection; written only by its leader."""

    #: The watched collection.
    _id: Required[str]
    leader: WatchLeaderDocument
    #: The fencing token of the leader's lock.
    fence: int
    state: str
    edges: list[str]
    target: int
    counters: dict[str, int]
    last_event_at: datetime
    last_error: str
    updated_at: datetime
    resume_token: dict[str, Any]


class JournalKey(TypedDict):
    """A journal entry's ``_id``: the migration's name and the document's ``_id``."""

    m: str
    d: Any


class JournalDocument(TypedDict, total=False):
    """One document's before-image, kept for ``background undo`` (``journal.py``).

    ``written`` is the revision the migration's guarded write gave the document
    (``revision + 1``): the document is still the migration's write exactly
    while it is at the target version with that revision. A later rewrite of
    the same document by the migration (a conflict re-read, a drift healed)
    replaces the entry. ``expires_at`` is the TTL index's date.
    """

    _id: Required[JournalKey]
    migration: Required[str]
    generation: int
    before: dict[str, Any]
    revision: int
    written: int
    at: datetime
    expires_at: datetime


__all__ = [
    "ControlMark",
    "ConvergeLogDocument",
    "CoordinatorMark",
    "HistoryDocument",
    "HoldDocument",
    "InflightDocument",
    "JournalDocument",
    "LeaseDocument",
    "PartitionDocument",
    "PlanDocument",
    "ReplayDocument",
    "StateDocument",
    "WatchDocument",
    "WatchLeaderDocument",
]


class BudgetMemberDocument(TypedDict):
    """One migration's sub-bucket in the target's write budget (``budget.py``).

    ``tokens`` may be negative: a lane takes its whole batch at once and waits
    off the debt before writing.
    """

    m: str
    w: int
    tokens: float
    seen: datetime


class BrakeDocument(TypedDict, total=False):
    """The target-wide brake: every lane holds while it is set (``budget.py``)."""

    reason: Required[str]
    at: Required[datetime]
    until: datetime | None
    requested_by: str


class BrakeLogDocument(TypedDict, total=False):
    """One entry of the brake's audit log: who set or released it, when and why."""

    action: Required[str]
    at: Required[datetime]
    reason: str
    until: datetime | None
    requested_by: str


class TargetDocument(TypedDict, total=False):
    """The one budget document of a target (``_id`` ``"target"``): bucket and brake."""

    _id: Required[str]
    rate: int
    at: datetime
    members: list[BudgetMemberDocument]
    brake: BrakeDocument | None
    brake_log: list[BrakeLogDocument]
