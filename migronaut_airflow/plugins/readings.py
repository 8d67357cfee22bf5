"""What the UI shows of background migrations: the core's status views, in the API's models.

The views come from ``kit.background.statuses`` and friends
(:class:`~migronaut_core.Background`), which only read: nothing is created or
moved here — no index, no unblocking — so a viewer's page never writes to MongoDB. The models of
:mod:`.models` are read from the views by attribute (``from_attributes``), and
keep only what may leave the server: scope bounds, cursors, checkpoints, failed
``_id``s and the spec's filter stay behind. What the UI adds to a view (the
target, the sampled throughput) or derives from it (the DAG id, a cursor's
position) are attributes and properties of a reading wrapped around the view.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from migronaut_airflow.plugins.models import (
    AdaptiveThrottle,
    CursorPosition,
    Drift,
    FailedDocumentPage,
    HistoryEntry,
    LaneThrottle,
    MigrationDetail,
    MigrationSummary,
    Permissions,
    PlanSummary,
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
from migronaut_core import (
    BackgroundStatusView,
    DocumentError,
    LanePacing,
    Migronaut,
    PartitionView,
)
from migronaut_core.errors import NotAppliedError

#: Failure reasons a detail lists (newest).
FAILURE_REASONS_SHOWN = 20
#: Keys of an operator's note in the history that the timeline shows besides who and why.
_HISTORY_DETAILS = ("lock", "leases", "replan", "failed_only", "failed")


def migration_names(kit: Migronaut) -> list[str]:
    """Every registered background migration, oldest first."""
    return kit.background.names()


def failed_documents(kit: Migronaut, name: str, *, limit: int, offset: int) -> FailedDocumentPage:
    """A page of the documents ``name`` could not rewrite: ``_id`` and why, never values.

    :raises NotAppliedError: it is not registered.
    :raises ConfigInvalidError: ``limit`` or ``offset`` out of range.
    """
    view = kit.background.failed(name, limit=limit, offset=offset)
    return FailedDocumentPage.model_validate(view, from_attributes=True)


def summaries(
    kit: Migronaut,
    names: Collection[str],
    statuses: Collection[str] | None,
    sampler: ThroughputSampler,
    target: str = DEFAULT_TARGET,
) -> list[MigrationSummary]:
    """The summaries of ``names`` (optionally only those in ``statuses``), oldest first."""
    views = kit.background.statuses(names=names, statuses=statuses)
    return [
        MigrationSummary.model_validate(_reading(view, sampler, target), from_attributes=True)
        for view in views
    ]


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
    view = kit.background.status(name)
    if view is None:
        raise NotAppliedError(f"background migration {name} is not registered", {"migration": name})
    history = [history_entry(entry.to_dict()) for entry in kit.background.history(name)]
    watch = kit.drift.watch_status(view.collection) if view.collection else None
    reading = _DetailReading(
        view=view,
        target=target,
        throughput=_reading(view, sampler, target).throughput,
        history=history,
        drift=Drift(
            watch=[WatchRow(**watch.to_dict())] if watch else [],
            reopened=sum(1 for entry in history if entry.action == "reopen"),
        ),
        permissions=permissions,
    )
    return MigrationDetail.model_validate(reading, from_attributes=True)


@dataclass(frozen=True, slots=True)
class _Reading:
    """A status view as the models read it (``from_attributes``): the view's attributes, what
    the UI adds (the target, the sampled throughput) and what it derives (properties)."""

    view: BackgroundStatusView
    target: str
    throughput: Throughput

    def __getattr__(self, name: str) -> Any:
        return getattr(self.view, name)

    @property
    def dag_id(self) -> str:
        return dag_id_for(self.view.name, self.target)

    @property
    def held(self) -> str | None:
        """What holds the lanes, as the status's hold says it in words."""
        return None if self.view.held_by is None else self.view.held_by.text


@dataclass(frozen=True, slots=True)
class _DetailReading(_Reading):
    """A status view as the detail reads it, with its history, drift and permissions."""

    history: list[HistoryEntry]
    drift: Drift
    permissions: Permissions

    @property
    def plan(self) -> PlanSummary | None:
        return plan_summary(self.view)

    @property
    def coordinator(self) -> Mapping[str, Any] | None:
        """Which driver stepped the migration last (a process, an Airflow run), and when."""
        seen = self.view.coordinator
        return seen if isinstance(seen, Mapping) else None

    @property
    def partitions(self) -> list[_PartitionReading]:
        return [_PartitionReading(partition) for partition in self.view.partitions]

    @property
    def throttle(self) -> ThrottleState:
        return throttle_state(self.view)

    @property
    def failure_reasons(self) -> tuple[DocumentError, ...]:
        """Why documents failed (newest last), without their ``_id``s."""
        return self.view.document_errors[-FAILURE_REASONS_SHOWN:]


@dataclass(frozen=True, slots=True)
class _PartitionReading:
    """A partition's view as its row reads it (never its bounds nor its cursor's value)."""

    view: PartitionView

    def __getattr__(self, name: str) -> Any:
        return getattr(self.view, name)

    @property
    def cursor(self) -> CursorPosition:
        return cursor_position(self.view)

    @property
    def scanned(self) -> int:
        return int(self.view.counters.get("scanned", 0))


def _reading(view: BackgroundStatusView, sampler: ThroughputSampler, target: str) -> _Reading:
    samples = sampler.observe(f"{target}/{view.name}", view.generation, view.progress.done)
    return _Reading(view=view, target=target, throughput=throughput(view, samples, sampler.now()))


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


def cursor_position(partition: PartitionView) -> CursorPosition:
    """``start`` before the first batch, ``end`` once done, ``moving`` in between."""
    if partition.status == "done":
        return "end"
    return "moving" if partition.cursor else "start"


def _lane_throttle(pacing: LanePacing) -> LaneThrottle:
    return LaneThrottle.model_validate(pacing, from_attributes=True)


def history_entry(entry: Mapping[str, Any]) -> HistoryEntry:
    """A history entry (JSON-safe already): a control records ``by``, an operator's note
    ``requested_by``; both are the user."""
    return HistoryEntry.model_validate(
        {
            "action": entry.get("action"),
            "from": entry.get("from"),
            "to": entry.get("to"),
            "by": entry.get("by") or entry.get("requested_by"),
            "reason": entry.get("reason"),
            "at": entry.get("at"),
            "details": {
                key: entry[key]
                for key in _HISTORY_DETAILS
                if isinstance(entry.get(key), bool | int | str)
            },
        }
    )


def plan_summary(view: BackgroundStatusView) -> PlanSummary | None:
    """The current plan without its token or match hash."""
    plan = view.plan
    if not plan:
        return None
    sharding = view.sharding or {}
    return PlanSummary(
        partitioner=plan.get("partitioner"),
        method=plan.get("method"),
        estimate=plan.get("estimate"),
        at_least=bool(plan.get("at_least")),
        approximate=bool(plan.get("approximate")),
        degraded=bool(plan.get("degraded")),
        sharding=sharding.get("mode"),
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
