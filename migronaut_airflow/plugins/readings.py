"""What the UI shows of background migrations: the core's status views, in the API's models.

The views come from :meth:`~migronaut_core.kit.Migronaut.background_status_views`
and friends, which only read: nothing is created or moved here — no index, no
unblocking — so a viewer's page never writes to MongoDB. The models of
:mod:`.models` then keep only what may leave the server: scope bounds, cursors,
checkpoints, failed ``_id``s and the spec's filter stay behind.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

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
from migronaut_airflow.targets import DEFAULT_TARGET, dag_id_for
from migronaut_core import BackgroundStatusView, LanePacing, Migronaut, PartitionView, iso_time
from migronaut_core.errors import NotAppliedError

#: Failure reasons a detail lists (newest).
FAILURE_REASONS_SHOWN = 20
#: Keys of an operator's note in the history that the timeline shows besides who and why.
_HISTORY_DETAILS = ("lock", "leases", "replan")


def migration_names(kit: Migronaut) -> list[str]:
    """Every registered background migration, oldest first."""
    return kit.background_names()


def summaries(
    kit: Migronaut,
    names: Collection[str],
    statuses: Collection[str] | None,
    sampler: ThroughputSampler,
    target: str = DEFAULT_TARGET,
) -> list[MigrationSummary]:
    """The summaries of ``names`` (optionally only those in ``statuses``), oldest first."""
    views = kit.background_status_views(names=names, statuses=statuses)
    return [MigrationSummary(**_summary_fields(view, sampler, target)) for view in views]


def detail(
    kit: Migronaut,
    name: str,
    sampler: ThroughputSampler,
    permissions: Permissions,
    target: str = DEFAULT_TARGET,
) -> MigrationDetail:
    """Everything the detail page shows of one migration.

    :raises NotAppliedError: no such migration is registered.
    """
    view = kit.background_status_view(name)
    if view is None:
        raise NotAppliedError(f"background migration {name} is not registered", {"migration": name})
    history = [history_entry(entry) for entry in kit.background_history(name)]
    watch = kit.background_watch_status(view.collection) if view.collection else None
    return MigrationDetail(
        **_summary_fields(view, sampler, target),
        totals={key: int(value) for key, value in view.totals.items()},
        plan=plan_summary(view),
        coordinator=coordinator_seen(view),
        round=view.round,
        partitions=[partition_row(partition) for partition in view.partitions],
        history=history,
        throttle=throttle_state(view),
        drift=Drift(
            watch=[WatchRow(**watch)] if watch else [],
            reopened=sum(1 for entry in history if entry.action == "reopen"),
        ),
        failure_reasons=failure_reasons(view),
        permissions=permissions,
    )


def _summary_fields(
    view: BackgroundStatusView, sampler: ThroughputSampler, target: str
) -> dict[str, Any]:
    shown = view.progress
    samples = sampler.observe(f"{target}/{view.name}", view.generation, shown.done)
    flow = throughput(view, samples, sampler.now())
    return {
        "name": view.name,
        "target": target,
        "dag_id": dag_id_for(view.name, target),
        "status": view.status,
        "phase": view.phase,
        "direction": view.direction,
        "mode": view.mode,
        "runs_as": view.runs_as,
        "collection": view.collection,
        "description": view.description,
        "pass": view.pass_number,
        "generation": view.generation,
        "progress": Progress(**shown.to_dict()),
        "processed": shown.done,
        "eta_seconds": view.eta_seconds,
        "live_leases": view.live_leases,
        "max_parallel": view.max_parallel,
        "partition_counts": dict(view.partition_counts),
        "failed_documents": view.failed_documents,
        "last_error": _text(view.last_error),
        "waits_for": [str(item) for item in view.waits_for],
        "requires": [str(item) for item in view.requires],
        "throughput": flow,
        **{key: iso_time(getattr(view, key)) for key in _TIMES},
    }


_TIMES = ("created_at", "started_at", "completed_at", "updated_at", "last_progress_at")


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def throughput(view: BackgroundStatusView, samples: Sequence[Sample], now: float) -> Throughput:
    """The sampled series, the last minute's rate, and the core's average since the start."""
    return Throughput(
        docs_per_second=recent_rate(samples, now),
        average_docs_per_second=view.average_docs_per_second,
        window_seconds=WINDOW_SECONDS,
        series=[
            ThroughputPoint(at=rate.iso_at(), docs_per_second=rate.docs_per_second)
            for rate in rates(samples)
        ],
    )


def partition_row(partition: PartitionView) -> PartitionRow:
    """A partition without its bounds or cursor value: where its cursor is, counters, holder."""
    scope = partition.scope if isinstance(partition.scope, Mapping) else {}
    counters = {key: int(value) for key, value in partition.counters.items()}
    lease = partition.lease
    return PartitionRow(
        id=partition.id,
        index=partition.index,
        status=partition.status,
        scope=ScopeSummary(
            kind=_str_or_none(scope.get("kind")),
            bracket=_str_or_none(scope.get("bracket")),
            group=_str_or_none(scope.get("group")),
        ),
        cursor=cursor_position(partition),
        scanned=counters.get("scanned", 0),
        counters=counters,
        failed_documents=partition.failed_documents,
        slice_failures=int(partition.slice_failures or 0),
        last_error=_text(partition.last_error),
        lease=LeaseHolder(**lease.to_dict()) if lease else None,
        throttle=_lane_throttle(partition.pacing) if partition.pacing else None,
        updated_at=iso_time(partition.updated_at),
    )


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def cursor_position(partition: PartitionView) -> CursorPosition:
    """``start`` before the first batch, ``end`` once done, ``moving`` in between."""
    if partition.status == "done":
        return "end"
    return "moving" if partition.cursor else "start"


def _lane_throttle(pacing: LanePacing) -> LaneThrottle:
    return LaneThrottle(batch_size=pacing.batch_size, pause_ms=pacing.pause_ms)


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


def coordinator_seen(view: BackgroundStatusView) -> CoordinatorSeen | None:
    """Which driver stepped the migration last (a process, an Airflow run), and when."""
    seen = view.coordinator
    if not isinstance(seen, Mapping):
        return None
    return CoordinatorSeen(
        kind=_text(seen.get("kind")), ref=_text(seen.get("ref")), at=_text(seen.get("at"))
    )


def plan_summary(view: BackgroundStatusView) -> PlanSummary | None:
    """The current plan without its token or match hash."""
    plan = view.plan
    if not plan:
        return None
    sharding = view.sharding or {}
    return PlanSummary(
        partitioner=_text(plan.get("partitioner")),
        method=_text(plan.get("method")),
        estimate=plan.get("estimate"),
        at_least=bool(plan.get("at_least")),
        approximate=bool(plan.get("approximate")),
        degraded=bool(plan.get("degraded")),
        sharding=_text(sharding.get("mode")),
    )


def throttle_state(view: BackgroundStatusView) -> ThrottleState:
    """The spec's pacing and, for adaptive lanes, what each partition stored."""
    pacing = view.pacing
    held = [p for p in view.partitions if p.pacing is not None]
    leased = [p for p in held if p.lease] or held
    return ThrottleState(
        batch_size=pacing.batch_size,
        pause_ms=pacing.pause_ms,
        max_lag_ms=pacing.max_lag_ms,
        adaptive=AdaptiveThrottle(**pacing.adaptive) if pacing.adaptive is not None else None,
        lanes=[_lane_throttle(p.pacing) for p in leased if p.pacing is not None],
    )


def failure_reasons(view: BackgroundStatusView) -> list[FailureReason]:
    """Why documents failed (newest last), without their ``_id``s."""
    return [
        FailureReason(reason=error.reason, error=error.error)
        for error in view.document_errors[-FAILURE_REASONS_SHOWN:]
    ]
