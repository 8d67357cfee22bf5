"""The JSON shapes of the UI's API, as Pydantic models so the OpenAPI schema says what comes back.

Every model lists its fields explicitly: what the engine's views return beyond
them (scope bounds, cursors, failed ``_id``s, the spec's filter) is dropped on
the way out, because those are document values or may be. Only identifiers,
counts, statuses, times, and texts the engine already scrubbed leave the server.
The one exception is asked for by name: :class:`FailedDocumentPage` (``GET
…/failed``) lists the ``_id``s of the documents a migration could not rewrite,
with why (never their values), so they can be found and fixed.

The models of a status are read from the core's typed views by attribute
(``model_validate(view, from_attributes=True)``, see :mod:`.readings`): a field
named like the view's attribute takes it; times become ISO text (:data:`IsoTime`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, AliasPath, BaseModel, BeforeValidator, ConfigDict, Field

from migronaut_core import ControlAction, iso_time


def _iso(value: Any) -> Any:
    return iso_time(value) if isinstance(value, datetime) else value


def _text(value: Any) -> Any:
    return None if value is None else str(value)


def _str_only(value: Any) -> Any:
    return value if isinstance(value, str) else None


def _mapping_only(value: Any) -> Any:
    return value if isinstance(value, Mapping) else {}


def _zero_if_unset(value: Any) -> Any:
    return value or 0


#: A view's datetime as ISO text in UTC (text given as it is).
IsoTime = Annotated[str | None, BeforeValidator(_iso)]
#: A view's text, anything else given as its ``str`` (None kept).
Text = Annotated[str | None, BeforeValidator(_text)]
#: A stored value shown only when it is text (a scope's kind, bracket, group).
TextOnly = Annotated[str | None, BeforeValidator(_str_only)]

#: Where a partition's cursor is, without its value (an ``_id``, a shard key or a checkpoint).
CursorPosition = Literal["start", "moving", "end"]


class ErrorBody(BaseModel):
    """Every error answer: a stable code, a message for people, identifiers in ``context``."""

    code: str = Field(examples=["BACKGROUND_CONFLICT"])
    message: str
    context: dict[str, Any] = Field(default_factory=dict)


class Progress(BaseModel):
    """Work done in the current pass against its estimate.

    Documents against the plan's count; for a step migration whose steps report a
    ``total``, what its steps processed against that total (``source`` = ``step``).
    """

    estimate: int
    at_least: bool = Field(description="the estimate is a lower bound (the count was capped)")
    approximate: bool = Field(
        False, description="the estimate comes from a random sample (a large pass), not a count"
    )
    done: int = Field(description="migrated + skipped in this pass (step mode: processed)")
    percent: float | None = Field(description="None before the pass is planned")
    source: Literal["plan", "step"] = Field(
        "plan", description="plan: documents against the plan's count; step: the step's total"
    )


class ThroughputPoint(BaseModel):
    at: str = Field(description="ISO time of the later of two samples")
    docs_per_second: float


class Throughput(BaseModel):
    """Documents per second, sampled by this API process from successive reads of the store.

    The store keeps counters, not a time series: a rate is the change of ``done``
    between two reads of the same pass. Samples live in memory for
    ``window_seconds`` and start afresh when the API server restarts.
    """

    docs_per_second: float | None = Field(description="over the last minute of samples")
    average_docs_per_second: float | None = Field(description="since the migration started")
    window_seconds: int
    series: list[ThroughputPoint]


class WindowSchedule(BaseModel):
    """The maintenance windows a migration's lanes keep, and where the clock stands."""

    model_config = ConfigDict(from_attributes=True)

    source: str = Field(description="spec (the migration's own) or target (the config's)")
    open: bool = Field(description="lanes may work now")
    rate: str | None = Field(None, description="the open window's rate: full speed, 50%, …")
    opens_at: IsoTime = Field(None, description="closed: when the next window opens")
    closes_at: IsoTime = Field(None, description="open: when the open stretch ends")


class EtaRange(BaseModel):
    """A running pass's seconds left as a range (its rate so far, the windows to come)."""

    model_config = ConfigDict(from_attributes=True)

    low_seconds: float | None = Field(None, description="at the faster end of the rate's spread")
    seconds: float | None = Field(None, description="expected")
    high_seconds: float | None = Field(None, description="at the slower end")


class ValidatorState(BaseModel):
    """Where a finalizing migration's collection validator is (counts only, never ids)."""

    model_config = ConfigDict(from_attributes=True)

    phase: str = Field(description="recorded, warn (the soak) or error (enforced)")
    since: IsoTime = Field(None, description="when the current soak began")
    until: IsoTime = Field(None, description="the soak's earliest end by time")
    clean_passes: int = Field(0, description="clean checks in a row")
    old_shape: int = Field(0, description="old-shape documents the last check that found any saw")
    old_shape_seen: int = Field(0, description="old-shape documents seen over the soak")
    old_shape_at: IsoTime = None
    enforced_at: IsoTime = Field(None, description="when validationAction became error")


class CanaryState(BaseModel):
    """Where a migration's canary is: its phase, checks and approval (counts only, never
    ids or its filter)."""

    model_config = ConfigDict(from_attributes=True)

    phase: str = Field(description="migrating, soaking, awaiting_approval or promoted")
    subset: str = Field(description="fraction (of hashed _ids) or filter")
    approval: bool = Field(description="a passing canary waits for approve")
    fraction: float | None = None
    since: IsoTime = Field(None, description="when the current soak began")
    until: IsoTime = Field(None, description="the soak's earliest end by time")
    clean_passes: int = Field(0, description="clean checks in a row")
    counts: dict[str, int] | None = Field(
        None, description="the subset's documents by version at the last check: old, new"
    )
    drift: float | None = Field(None, description="the old-shape share of the subset then")
    sample: dict[str, int] | None = Field(
        None, description="the idempotence re-run: sampled, changed, raised"
    )
    checked_at: IsoTime = None
    failed: dict[str, Any] | None = Field(
        None, description="the check that paused it: check, reason (value-free), at"
    )
    approved: dict[str, Any] | None = Field(None, description="who approved it, why, when")
    rejected: dict[str, Any] | None = Field(None, description="who rejected it, why, when")


class MigrationSummary(BaseModel):
    """One background migration as the list shows it."""

    model_config = ConfigDict(populate_by_name=True, from_attributes=True)

    name: str
    target: str = Field("default", description="the target (database) it belongs to")
    dag_id: str
    status: str
    phase: str | None = None
    direction: str
    mode: str | None = Field(None, description="the spec's mode: declarative, step or update")
    runs_as: str | None = Field(
        None,
        description="how it rewrites: python (migrate/migrate_batch), step (step(ctx)) or "
        "update (a server-side update pipeline)",
    )
    collection: str | None = None
    description: str | None = None
    pass_number: int = Field(alias="pass", description="the pass being run (1 for the first)")
    generation: int
    progress: Progress
    processed: int = Field(
        validation_alias=AliasChoices("processed", AliasPath("progress", "done")),
        description="documents done so far in this pass (progress.done)",
    )
    eta_seconds: float | None
    eta_range: EtaRange | None = Field(
        None, description="while running: seconds left as a range, maintenance windows counted"
    )
    live_leases: int = Field(description="lanes holding a live lease now")
    max_parallel: int | None = None
    partition_counts: dict[str, int] = Field(description="partitions of this pass by status")
    failed_documents: int
    last_error: Text = None
    held: Text = Field(
        None,
        description="what holds the lanes, in words: 'waiting for window until …', or a "
        "MongoDB health signal past its hard limit",
    )
    window: WindowSchedule | None = Field(None, description="the maintenance windows, if any")
    validator: ValidatorState | None = Field(
        None, description="the finalize validator, when the spec declares one and it began"
    )
    canary: CanaryState | None = Field(None, description="the canary, when the spec has one")
    waits_for: list[str] = Field(description="required migrations not completed yet (blocked)")
    requires: list[str]
    throughput: Throughput
    created_at: IsoTime = None
    started_at: IsoTime = None
    completed_at: IsoTime = None
    updated_at: IsoTime = None
    last_progress_at: IsoTime = None


class MigrationList(BaseModel):
    migrations: list[MigrationSummary]
    total: int
    statuses: list[str] = Field(description="every status a migration can have (for filters)")
    target: str = Field("default", description="the target listed")
    targets: list[str] = Field(
        default_factory=list, description="every target of this Airflow (for a selector)"
    )


class LeaseHolder(BaseModel):
    """Who holds a partition; the lease's fencing token is never shown."""

    owner: str | None = None
    slot: int | None = None
    renewed_at: IsoTime = None


class ScopeSummary(BaseModel):
    """What kind of range a partition covers, without its bounds."""

    kind: TextOnly = None
    bracket: TextOnly = Field(None, description="the _id type bracket of an id range")
    group: TextOnly = Field(None, description="the shard of a shard-aware plan")


class LaneThrottle(BaseModel):
    batch_size: int | None = None
    pause_ms: int | None = None


class PartitionRow(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    index: int | None = None
    status: str | None = None
    scope: Annotated[ScopeSummary, BeforeValidator(_mapping_only)]
    cursor: CursorPosition
    scanned: int
    counters: dict[str, int]
    failed_documents: int
    slice_failures: Annotated[int, BeforeValidator(_zero_if_unset)]
    last_error: Text = None
    lease: LeaseHolder | None = None
    throttle: LaneThrottle | None = Field(
        None,
        validation_alias=AliasChoices("throttle", "pacing"),
        description="the adaptive state a lane stored",
    )
    updated_at: IsoTime = None


class HistoryEntry(BaseModel):
    """One control or engine move: what, from which status to which, who, why, when."""

    model_config = ConfigDict(populate_by_name=True)

    action: Text = None
    from_status: Text = Field(None, alias="from")
    to: Text = None
    by: Text = None
    reason: Text = None
    at: Text = None
    details: dict[str, bool | int | str] = Field(
        default_factory=dict,
        description="what an unlock, repin or failed-only retry did "
        "(lock, leases, replan, failed_only, failed)",
    )


class AdaptiveThrottle(BaseModel):
    min_batch_size: int | None = None
    max_batch_size: int | None = None
    increase: int | None = None
    decrease: float | None = None
    target_latency_ms: int | None = None
    max_pause_ms: int | None = None


class ThrottleState(BaseModel):
    """How the lanes are paced: the spec's settings and what adaptive lanes stored."""

    batch_size: int | None = None
    pause_ms: int = 0
    max_lag_ms: int | None = None
    adaptive: AdaptiveThrottle | None = None
    lanes: list[LaneThrottle] = Field(description="stored per partition by adaptive lanes")


class WatchLeader(BaseModel):
    host: str | None = None
    pid: int | None = None
    owner: str | None = None
    since: str | None = None


class WatchRow(BaseModel):
    """The change-stream drift watcher of the migration's collection (never its resume token)."""

    collection: str
    state: str
    edges: list[str]
    target: int | None = None
    leader: WatchLeader | None = None
    counters: dict[str, int]
    last_event_at: str | None = None
    last_error: str | None = None
    updated_at: str | None = None
    fresh: bool


class Drift(BaseModel):
    """Drift after completion: the collection's watcher rows and how often it was reopened."""

    watch: list[WatchRow]
    reopened: int = Field(description="reopen entries in the history (drift or a retry)")


class PlanSummary(BaseModel):
    partitioner: Text = None
    method: Text = None
    estimate: int | None = None
    at_least: bool = False
    approximate: bool = False
    degraded: bool = False
    sharding: Text = Field(None, description="off, untargeted, chunks or sampled")


class CoordinatorSeen(BaseModel):
    kind: Text = None
    ref: Text = None
    at: Text = None


class FailureReason(BaseModel):
    """Why a document failed, without the document or its ``_id``."""

    reason: str | None = None
    error: str | None = None


class FailedDocumentRow(BaseModel):
    """A document the migration could not rewrite: its ``_id`` and why, never its values."""

    id: Any = Field(
        description="its _id, JSON-safe (extended JSON text for a BSON type JSON lacks)"
    )
    reason: str | None = Field(description="the error's kind: transform, shape, write, update…")
    code: int | None = Field(description="the server's error code of a refused write")
    error: str | None = Field(
        description="the value-free text kept: an exception's type, a write error's summary "
        "(None: no longer kept)"
    )
    generation: int | None = Field(description="the pass's generation that recorded it")
    at: IsoTime = None
    retrying: bool = Field(description="a failed-only retry is working on it")


class FailedDocumentPage(BaseModel):
    """A page of a migration's failed documents, oldest first."""

    name: str
    status: str | None
    total: int = Field(description="every failed document")
    offset: int
    limit: int
    retrying: bool = Field(description="a failed-only retry is under way")
    documents: list[FailedDocumentRow]


class Permissions(BaseModel):
    can_control: bool = Field(description="edit access to the migration's DAG")
    can_trigger: bool = Field(description="may start runs of the migration's DAG")


class MigrationDetail(MigrationSummary):
    """One background migration with its partitions, history, throttle and drift."""

    totals: dict[str, int] = Field(description="counters of the passes already rolled up")
    plan: PlanSummary | None = None
    coordinator: CoordinatorSeen | None = None
    round: int | None = None
    partitions: list[PartitionRow] = Field(description="the partitions of this pass")
    history: list[HistoryEntry] = Field(description="oldest first")
    throttle: ThrottleState
    drift: Drift
    failure_reasons: list[FailureReason]
    permissions: Permissions


class ActionRequest(BaseModel):
    """Why; recorded in the migration's history with the signed-in user."""

    model_config = ConfigDict(extra="forbid")

    reason: str = Field(
        description="required; whitespace runs (line breaks too) become one space",
        examples=["checkout latency above SLO"],
    )
    repin: bool = Field(
        False, description="retry and retry_from_start only: pin the file on disk first"
    )
    failed_only: bool = Field(
        False, description="retry only: just the documents it could not rewrite"
    )


class DagRunStarted(BaseModel):
    dag_id: str
    run_id: str
    dag_paused: bool = Field(description="the DAG is paused in Airflow: the run waits for it")


class ActionResult(BaseModel):
    migration: str
    action: ControlAction
    applied: Literal["changed", "unchanged"]
    status: str
    requested_by: str
    replan: bool | None = None
    stopped: bool | None = None
    lock: bool | None = Field(None, description="unlock: the coordinator lock was held")
    leases: int | None = Field(None, description="unlock: leases dropped")
    checksum: str | None = Field(
        None, description="repin: the file checksum pinned (what the changelog records)"
    )
    failed: int | None = Field(None, description="failed-only retry: the documents it takes")
    dag_run: DagRunStarted | None = Field(
        None, description="resume, retry and repin start the migration's DAG when none is active"
    )
    dag_run_note: str | None = Field(None, description="why no DAG run was started")
