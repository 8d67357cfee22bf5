"""What the UI reads of background migrations: summaries and details, from the engine's views.

Only reads: the state and partition documents, through the helpers of
:mod:`migronaut_core.background.views` (progress, ETA, partition, history,
sharding). Nothing is created or moved here — no index, no unblocking — so a
viewer's page never writes to MongoDB. The models of :mod:`.models` then keep
only what may leave the server: scope bounds, cursors, checkpoints, failed
``_id``s and the spec's filter stay behind.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

import pendulum

from migronaut_airflow.operators.background import dag_id_for
from migronaut_airflow.plugins.models import (
    AdaptiveThrottle,
    CoordinatorSeen,
    CursorPosition,
    Drift,
    FailureReason,
    HistoryEntry,
    LaneThrottle,
    LeaseHolder,
    MigrationDetail,
    MigrationSummary,
    PartitionRow,
    Permissions,
    PlanSummary,
    Progress,
    ScopeSummary,
    ThrottleState,
    Throughput,
    ThroughputPoint,
    WatchRow,
)
from migronaut_airflow.plugins.throughput import (
    WINDOW_SECONDS,
    Sample,
    ThroughputSampler,
    rates,
    recent_rate,
)
from migronaut_core import Migronaut
from migronaut_core.background.store import BackgroundStore
from migronaut_core.background.views import (
    eta_seconds,
    history_view,
    partition_view,
    progress,
    sharding_view,
)
from migronaut_core.errors import NotAppliedError

Document = dict[str, Any]

#: Failure reasons a detail lists (newest).
FAILURE_REASONS_SHOWN = 20
#: Keys of an operator's note in the history that the timeline shows besides who and why.
_HISTORY_DETAILS = ("lock", "leases", "replan")


def migration_names(kit: Migronaut) -> list[str]:
    """Every registered background migration, oldest first."""
    states = kit.background.store.states
    return [doc["_id"] for doc in states.find({}, {"_id": 1}).sort("created_at", 1)]


def summaries(
    kit: Migronaut,
    names: Collection[str],
    statuses: Collection[str] | None,
    sampler: ThroughputSampler,
) -> list[MigrationSummary]:
    """The summaries of ``names`` (optionally only those in ``statuses``), oldest first."""
    store = kit.background.store
    query: Document = {"_id": {"$in": sorted(names)}}
    if statuses:
        query["status"] = {"$in": sorted(statuses)}
    return [
        MigrationSummary(**_summary_fields(store, state, _partitions(store, state), sampler))
        for state in store.list_states(query)
    ]


def detail(
    kit: Migronaut, name: str, sampler: ThroughputSampler, permissions: Permissions
) -> MigrationDetail:
    """Everything the detail page shows of one migration.

    :raises NotAppliedError: no such migration is registered.
    """
    store = kit.background.store
    state = store.get(name)
    if state is None:
        raise NotAppliedError(f"background migration {name} is not registered", {"migration": name})
    partitions = _partitions(store, state)
    history = [history_entry(entry) for entry in history_view(state)]
    collection = (state.get("spec") or {}).get("collection")
    watch = kit.background_watch_status(collection) if collection else None
    return MigrationDetail(
        **_summary_fields(store, state, partitions, sampler),
        totals={key: int(value) for key, value in (state.get("totals") or {}).items()},
        plan=plan_summary(state),
        coordinator=coordinator_seen(state),
        round=state.get("round"),
        partitions=[partition_row(partition) for partition in partitions],
        history=history,
        throttle=throttle_state(state, partitions),
        drift=Drift(
            watch=[WatchRow(**watch)] if watch else [],
            reopened=sum(1 for entry in history if entry.action == "reopen"),
        ),
        failure_reasons=failure_reasons(state, partitions),
        permissions=permissions,
    )


def _partitions(store: BackgroundStore, state: Mapping[str, Any]) -> list[Document]:
    return store.list_partitions(state["_id"], generation=state.get("generation", 0))


def _unrolled(state: Mapping[str, Any]) -> bool:
    """The current pass's counters are still on its partitions, not in the totals."""
    return int(state.get("rolled_generation", 0)) < int(state.get("generation", 0))


def _summary_fields(
    store: BackgroundStore,
    state: Mapping[str, Any],
    partitions: Sequence[Mapping[str, Any]],
    sampler: ThroughputSampler,
) -> dict[str, Any]:
    name = state["_id"]
    generation = int(state.get("generation", 0))
    shown = progress(state, partitions)
    samples = sampler.observe(name, generation, shown["done"])
    flow = throughput(state, samples, shown["done"], sampler.now())
    spec = state.get("spec") or {}
    return {
        "name": name,
        "dag_id": dag_id_for(name),
        "status": state.get("status"),
        "phase": state.get("phase"),
        "direction": state.get("direction", "forward"),
        "mode": state.get("mode"),
        "collection": spec.get("collection"),
        "description": state.get("description"),
        "pass": state.get("pass", 0),
        "generation": generation,
        "progress": Progress(**shown),
        "processed": shown["done"],
        "eta_seconds": _eta(state, shown, flow.docs_per_second),
        "live_leases": store.live_leases(name),
        "max_parallel": spec.get("max_parallel"),
        "partition_counts": _by_status(partitions),
        "failed_documents": failed_documents(state, partitions),
        "last_error": _text(state.get("last_error")),
        "waits_for": [str(item) for item in state.get("waits_for") or []],
        "requires": [str(item) for item in state.get("requires") or []],
        "throughput": flow,
        **{key: _iso(state.get(key)) for key in _TIMES},
    }


_TIMES = ("created_at", "started_at", "completed_at", "updated_at", "last_progress_at")


def _iso(value: Any) -> str | None:
    return (
        pendulum.instance(value).in_timezone("UTC").isoformat()
        if isinstance(value, datetime)
        else None
    )


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _by_status(partitions: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for partition in partitions:
        status = str(partition.get("status"))
        counts[status] = counts.get(status, 0) + 1
    return counts


def _eta(state: Mapping[str, Any], shown: Mapping[str, Any], recent: float | None) -> float | None:
    """The engine's ETA (the pass's average rate); else the recent rate's, while running."""
    engine = eta_seconds(state, shown["done"], shown["estimate"])
    if engine is not None or state.get("status") != "running" or not recent:
        return engine
    left = shown["estimate"] - shown["done"]
    return round(left / recent, 1) if left > 0 else None


def failed_documents(state: Mapping[str, Any], partitions: Sequence[Mapping[str, Any]]) -> int:
    """Failed documents: those rolled into the state plus the current pass's not yet rolled."""
    rolled = len(state.get("bad_ids") or [])
    if not _unrolled(state):
        return rolled
    return rolled + sum(len(partition.get("bad_ids") or []) for partition in partitions)


def throughput(
    state: Mapping[str, Any], samples: Sequence[Sample], done: int, now: float
) -> Throughput:
    """The sampled series, the last minute's rate, and the average since the start."""
    return Throughput(
        docs_per_second=recent_rate(samples, now),
        average_docs_per_second=_average_rate(state, done, now),
        window_seconds=WINDOW_SECONDS,
        series=[
            ThroughputPoint(at=rate.iso_at(), docs_per_second=rate.docs_per_second)
            for rate in rates(samples)
        ],
    )


def _average_rate(state: Mapping[str, Any], done: int, now: float) -> float | None:
    started = state.get("started_at")
    if not isinstance(started, datetime) or done <= 0:
        return None
    ended = state.get("completed_at")
    end = ended.timestamp() if isinstance(ended, datetime) else now
    elapsed = end - started.timestamp()
    return round(done / elapsed, 1) if elapsed > 0 else None


def partition_row(partition: Mapping[str, Any]) -> PartitionRow:
    """A partition without its bounds or cursor value: where its cursor is, counters, holder."""
    view = partition_view(partition)
    scope = partition.get("scope") or {}
    counters = {key: int(value) for key, value in view["counters"].items()}
    stored = partition.get("throttle")
    return PartitionRow(
        id=view["id"],
        index=view["index"],
        status=view["status"],
        scope=ScopeSummary(
            kind=_str_or_none(scope.get("kind")),
            bracket=_str_or_none(scope.get("bracket")),
            group=_str_or_none(scope.get("group")),
        ),
        cursor=cursor_position(partition),
        scanned=counters.get("scanned", 0),
        counters=counters,
        failed_documents=view["failed_documents"],
        slice_failures=int(view["slice_failures"] or 0),
        last_error=_text(view["last_error"]),
        lease=LeaseHolder(**view["lease"]) if view["lease"] else None,
        throttle=_lane_throttle(stored) if isinstance(stored, Mapping) else None,
        updated_at=view["updated_at"],
    )


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def cursor_position(partition: Mapping[str, Any]) -> CursorPosition:
    """``start`` before the first batch, ``end`` once done, ``moving`` in between."""
    if partition.get("status") == "done":
        return "end"
    return "moving" if partition.get("cursor") else "start"


def _lane_throttle(stored: Mapping[str, Any]) -> LaneThrottle:
    return LaneThrottle(batch_size=stored.get("batch_size"), pause_ms=stored.get("pause_ms"))


def history_entry(entry: Mapping[str, Any]) -> HistoryEntry:
    """A history entry (JSON-safe already): a control records ``by``, an operator's note
    ``requested_by``; both are the user."""
    return HistoryEntry.model_validate(
        {
            "action": _text(entry.get("action")),
            "from": _text(entry.get("from")),
            "to": _text(entry.get("to")),
            "by": _text(entry.get("by") or entry.get("requested_by")),
            "reason": _text(entry.get("reason")),
            "at": _text(entry.get("at")),
            "details": {
                key: entry[key]
                for key in _HISTORY_DETAILS
                if isinstance(entry.get(key), bool | int | str)
            },
        }
    )


def coordinator_seen(state: Mapping[str, Any]) -> CoordinatorSeen | None:
    """Which driver stepped the migration last (a process, an Airflow run), and when."""
    seen = state.get("coordinator")
    if not isinstance(seen, Mapping):
        return None
    return CoordinatorSeen(
        kind=_text(seen.get("kind")), ref=_text(seen.get("ref")), at=_iso(seen.get("at"))
    )


def plan_summary(state: Mapping[str, Any]) -> PlanSummary | None:
    """The current plan without its token or match hash."""
    plan = state.get("plan")
    if not plan:
        return None
    sharding = sharding_view(state) or {}
    return PlanSummary(
        partitioner=_text(plan.get("partitioner")),
        method=_text(plan.get("method")),
        estimate=plan.get("estimate"),
        at_least=bool(plan.get("at_least")),
        approximate=bool(plan.get("approximate")),
        degraded=bool(plan.get("degraded")),
        sharding=_text(sharding.get("mode")),
    )


def throttle_state(
    state: Mapping[str, Any], partitions: Sequence[Mapping[str, Any]]
) -> ThrottleState:
    """The spec's pacing and, for adaptive lanes, what each partition stored."""
    spec = state.get("spec") or {}
    fixed = spec.get("throttle") or {}
    adaptive = spec.get("adaptive")
    held = [p for p in partitions if isinstance(p.get("throttle"), Mapping)]
    leased = [p for p in held if p.get("lease")] or held
    return ThrottleState(
        batch_size=spec.get("batch_size"),
        pause_ms=int(fixed.get("pause_ms") or 0),
        max_lag_ms=fixed.get("max_lag_ms"),
        adaptive=AdaptiveThrottle(**adaptive) if isinstance(adaptive, Mapping) else None,
        lanes=[_lane_throttle(p["throttle"]) for p in leased],
    )


def failure_reasons(
    state: Mapping[str, Any], partitions: Sequence[Mapping[str, Any]]
) -> list[FailureReason]:
    """Why documents failed (newest last), without their ``_id``s."""
    entries = list(state.get("doc_errors") or [])
    if _unrolled(state):
        for partition in partitions:
            entries.extend(partition.get("doc_errors") or [])
    return [
        FailureReason(reason=_text(entry.get("reason")), error=_text(entry.get("error")))
        for entry in entries[-FAILURE_REASONS_SHOWN:]
        if isinstance(entry, Mapping)
    ]
