"""What status commands, the Airflow UI and the JSON API show of a background migration.

:func:`read_status` and :func:`read_statuses` build a :class:`BackgroundStatusView`
with reads only: they create no index, unblock nothing and write nothing, so a
viewer's page or a status command never changes the database. A view is frozen
and typed (times are datetimes); its ``to_dict()`` is the JSON-safe shape the
CLI's ``--json`` and the UI's JSON API print, with times as ISO text, derived
from its fields' metadata
(:mod:`migronaut_core.json_shape`). A ``*_view`` function returns a typed view,
a ``*_json`` one JSON.

Views never carry a lease's token, a resume token or a plan's token. Document
values appear only where the JSON always showed them (a partition's scope and
cursor, failed documents' ``_id``s in ``failed_document_samples``);
``document_errors`` carry none, for readers that must not show any.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, Literal, ParamSpec, TypeVar

import pendulum

from migronaut_core.background.eta import EtaRange, live_range
from migronaut_core.background.failed import count_failed
from migronaut_core.bson_values import json_safe
from migronaut_core.clock import utc_now
from migronaut_core.json_shape import json_field, to_json_dict
from migronaut_core.windows import Window, WindowError, parse_windows, window_state

if TYPE_CHECKING:
    from migronaut_core.background.store import BackgroundStore, PartitionDocument, StateDocument

#: Failed documents listed in a status view (the state keeps up to MAX_BAD_IDS).
VIEW_FAILED_DOCUMENTS = 20

Document = Mapping[str, Any]
#: What a progress counts: documents against the plan, or what a step migration reports.
ProgressSource = Literal["plan", "step"]
#: How a migration rewrites, as status and the UI name it: ``python`` (``migrate`` /
#: ``migrate_batch`` in the lanes; the spec's ``declarative`` mode), ``step``
#: (``step(ctx)`` with checkpoints), ``update`` (a server-side update pipeline).
RunsAs = Literal["python", "step", "update"]
_RUNS_AS: Final[Mapping[str, RunsAs]] = {
    "declarative": "python",
    "step": "step",
    "update": "update",
}


def _time(value: Any) -> datetime | None:
    return value if isinstance(value, datetime) else None


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


@dataclass(frozen=True, slots=True)
class ProgressView:
    """Work done in this pass against its estimate, with a percentage.

    ``source`` says what is counted: ``plan``, documents (migrated and skipped)
    against the plan's count; ``step``, what a step migration's steps report
    (``processed``, else ``migrated``) against the ``total`` its last step
    returned. ``at_least``: the estimate is a floor (a capped count);
    ``approximate``: it was estimated from a random sample (a large pass, see
    the id-range planner). ``percent`` is None before the pass is planned, and
    for a step migration until a step reports a ``total``.
    """

    estimate: int
    at_least: bool
    approximate: bool
    done: int
    percent: float | None
    source: ProgressSource = "plan"

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


@dataclass(frozen=True, slots=True)
class LeaseView:
    """Who holds a partition (never the lease's token)."""

    owner: str | None
    slot: int | None
    renewed_at: datetime | None

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


@dataclass(frozen=True, slots=True)
class LanePacing:
    """What an adaptive lane stored on its partition: its batch size and pause now."""

    batch_size: int | None
    pause_ms: int | None


@dataclass(frozen=True, slots=True)
class PacingView:
    """How the spec paces the lanes: fixed batch size, pause and lag bound, or adaptive."""

    batch_size: int | None
    pause_ms: int
    max_lag_ms: int | None
    adaptive: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class HoldView:
    """Why the lanes hold, by ``reason``: ``health``, ``window`` or ``brake``.

    ``health``: a MongoDB health signal (``signal``, ``level``) past its hard
    limit, its ``reading`` and the ``limit``. ``window``: no maintenance window
    is open; ``until``: when the next one opens. ``brake``: the target's brake
    (``signal`` ``brake``; its reason and until are the brake's). ``since``:
    when this hold began; ``at``: when a lane last confirmed it (about every
    10 s while lanes look). Server figures and times only, never a document's.
    """

    signal: str | None
    level: str | None
    reading: float | bool | None
    limit: float | bool | None
    since: datetime | None
    at: datetime | None
    reason: str = "health"
    until: datetime | None = field(default=None, metadata=json_field(omit="none"))

    @property
    def text(self) -> str:
        """The hold in a few words, as the CLI and the UI show it."""
        if self.reason == "window":
            until = "the next window" if self.until is None else _shown_time(self.until)
            return f"waiting for window until {until}"
        if self.reason == "brake":
            return "held: the target's brake is on"
        return f"held: {self.signal} {self.reading} (hard limit {self.limit})"

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape, with :attr:`text`."""
        return {**to_json_dict(self), "text": self.text}


@dataclass(frozen=True, slots=True)
class WindowView:
    """The maintenance windows a migration's lanes keep, and where the clock stands.

    ``source``: ``spec`` (the migration's own ``windows``) or ``target`` (the
    config's ``background_windows``). ``open``: lanes may work now, at
    ``rate`` (``full speed``, ``50%``, ``2000 docs/s``) until ``closes_at``
    (None: not within the coming week); closed: the next window ``opens_at``.
    Times are UTC, judged on the reader's clock when the view was read. A
    later ETA can count the closed stretches from these.
    """

    source: str
    open: bool
    rate: str | None
    opens_at: datetime | None
    closes_at: datetime | None
    windows: tuple[Mapping[str, Any], ...]

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


def _shown_time(value: datetime) -> str:
    """A time as people read it in a status: UTC, to the minute."""
    return pendulum.instance(value).in_timezone("UTC").format("YYYY-MM-DD HH:mm [UTC]")


@dataclass(frozen=True, slots=True)
class DocumentError:
    """Why a document failed, without the document or its ``_id``."""

    reason: str | None
    error: str | None


@dataclass(frozen=True, slots=True)
class PartitionView:
    """One partition: scope, cursor, counters, and who holds it."""

    id: str
    generation: int | None
    index: int | None
    status: str | None
    scope: Any
    group: Any
    cursor: Any
    counters: Mapping[str, int]
    failed_documents: int
    slice_failures: int
    last_error: str | None
    lease: LeaseView | None
    updated_at: datetime | None
    pacing: LanePacing | None = field(metadata=json_field(omit="always"))
    document_errors: tuple[DocumentError, ...] = field(metadata=json_field(omit="always"))

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape: no pacing or document errors (see the status view for those)."""
        return to_json_dict(self)


@dataclass(frozen=True, slots=True)
class ValidatorView:
    """Where a migration's finalize validator is (``background.validator``).

    ``phase``: ``recorded`` (the previous validation saved), ``warn`` (the soak:
    old-shape writes are accepted with a warning) or ``error`` (enforced).
    ``since``: when the current soak began; ``until``: its earliest end by time;
    ``clean_passes``: clean checks in a row; ``old_shape``: the old-shape documents
    the last check that found any counted (at least; counts only, never ids),
    ``old_shape_seen``: their sum over the soak, ``old_shape_at``: when.
    """

    phase: str
    since: datetime | None = field(default=None, metadata=json_field(omit="none"))
    until: datetime | None = field(default=None, metadata=json_field(omit="none"))
    clean_passes: int = 0
    old_shape: int = 0
    old_shape_seen: int = 0
    old_shape_at: datetime | None = field(default=None, metadata=json_field(omit="none"))
    enforced_at: datetime | None = field(default=None, metadata=json_field(omit="none"))

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


@dataclass(frozen=True, slots=True)
class CanaryView:
    """Where a migration's canary is (``background.canary``).

    ``phase``: ``migrating`` (its subset's pass), ``soaking`` (its checks run),
    ``awaiting_approval`` or ``promoted``; ``subset``: ``fraction`` (with ``fraction``)
    or ``filter`` (its query is not shown); ``approval``: whether a passing canary
    waits for ``approve``. ``counts`` (``old``, ``new``: the subset's documents by
    version at the last check, each at most a million) and ``drift`` (the old-shape
    share then); ``sample``: what the idempotence check's re-run of the transform found
    (``sampled``, ``changed``, ``raised``); ``failed``: the check that paused it
    (``check``, its value-free ``reason``, ``at``); ``approved`` / ``rejected``: who,
    why, when.
    """

    phase: str
    subset: str
    approval: bool
    fraction: float | None = field(default=None, metadata=json_field(omit="none"))
    since: datetime | None = field(default=None, metadata=json_field(omit="none"))
    until: datetime | None = field(default=None, metadata=json_field(omit="none"))
    clean_passes: int = 0
    counts: Mapping[str, int] | None = field(default=None, metadata=json_field(omit="none"))
    drift: float | None = field(default=None, metadata=json_field(omit="none"))
    sample: Mapping[str, int] | None = field(default=None, metadata=json_field(omit="none"))
    checked_at: datetime | None = field(default=None, metadata=json_field(omit="none"))
    failed: Mapping[str, Any] | None = field(default=None, metadata=json_field(omit="none"))
    approved: Mapping[str, Any] | None = field(default=None, metadata=json_field(omit="none"))
    rejected: Mapping[str, Any] | None = field(default=None, metadata=json_field(omit="none"))

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


@dataclass(frozen=True, slots=True)
class BackgroundStatusView:
    """The status of one background migration, read without writing anything.

    ``failed_documents`` counts every failed document, each once: those recorded on the
    state (rolled up from finished passes), those a failed-only retry is retrying, and
    ``pass_failed_documents``, those of the current pass still on its partitions (0 once
    it is rolled up); every reader shows this one total, the one
    :func:`~migronaut_core.background.failed.read_failed` pages through.
    ``average_docs_per_second``: this pass's documents over the time since
    ``pass_started_at`` (to its completion), the rate ``eta_seconds`` is told by.
    ``mode`` is the spec's mode as registered (``declarative``, ``step`` or ``update``);
    ``runs_as`` names it as readers see it (:data:`RunsAs`; None only for a state
    without a mode). ``pass_started_at``: when this pass's first plan was committed (a
    replan keeps it); ``started_at`` for a state planned before it was recorded.
    ``document_errors`` lists why, oldest first, in the same order. ``plan`` is the
    current plan without its token (empty before the first plan). ``held_by``: while it
    runs, what holds its lanes (a MongoDB health signal past its hard limit, or no
    maintenance window open; left out of the JSON when nothing does). ``validator``:
    the finalize validator's phase and soak (:class:`ValidatorView`; left out when the
    spec has none or it has not begun). ``canary``: its canary's phase, checks and
    approval (:class:`CanaryView`; left out when the spec has none). ``window``: the
    maintenance windows its lanes keep and when the next opens or closes (left out
    when none apply, and once the migration completed, failed or was cancelled).
    ``eta_range``: while it runs, the seconds left as a range
    (:func:`~migronaut_core.background.eta.live_range`: this pass's rate over the
    time a window was open, the rest worked in the windows to come, ± the
    measured spread; left out when untold). ``eta_seconds`` stays the plain
    figure (the rest at the average rate since the pass began, windows not
    counted).
    ``undo``: ``journal`` when this registration is an undo from the journal
    (``direction`` is then ``revert``; the documents it left because they changed
    since are its failed documents, reason ``changed``); left out otherwise.
    """

    name: str
    status: str | None
    phase: str | None
    direction: str
    mode: str | None
    runs_as: RunsAs | None
    collection: str | None
    description: str | None
    pass_number: int = field(metadata=json_field(name="pass"))
    generation: int
    progress: ProgressView
    eta_seconds: float | None
    average_docs_per_second: float | None = field(metadata=json_field(omit="always"))
    totals: Mapping[str, int]
    partition_counts: Mapping[str, int] = field(metadata=json_field(name="partitions"))
    live_leases: int
    failed_documents: int
    failed_document_samples: tuple[Mapping[str, Any], ...]
    last_error: str | None
    waits_for: tuple[str, ...]
    requires: tuple[str, ...]
    coordinator: Any
    round: int | None
    plan: Mapping[str, Any]
    sharding: Mapping[str, Any] | None
    created_at: datetime | None
    started_at: datetime | None
    pass_started_at: datetime | None
    completed_at: datetime | None
    failed_at: datetime | None
    updated_at: datetime | None
    last_progress_at: datetime | None
    max_parallel: int | None = field(metadata=json_field(omit="always"))
    pacing: PacingView = field(metadata=json_field(omit="always"))
    partitions: tuple[PartitionView, ...] = field(metadata=json_field(omit="always"))
    pass_failed_documents: int = field(metadata=json_field(omit="always"))
    document_errors: tuple[DocumentError, ...] = field(metadata=json_field(omit="always"))
    held_by: HoldView | None = field(default=None, metadata=json_field(omit="none"))
    validator: ValidatorView | None = field(default=None, metadata=json_field(omit="none"))
    canary: CanaryView | None = field(default=None, metadata=json_field(omit="none"))
    undo: str | None = field(default=None, metadata=json_field(omit="none"))
    window: WindowView | None = field(default=None, metadata=json_field(omit="none"))
    eta_range: EtaRange | None = field(default=None, metadata=json_field(omit="none"))

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of the CLI's ``--json`` and the UI's JSON API."""
        return to_json_dict(self)


# -- reading ---------------------------------------------------------------------------


def read_status(
    store: BackgroundStore,
    name: str,
    *,
    windows: Sequence[Window] = (),
    now: datetime | None = None,
) -> BackgroundStatusView | None:
    """One migration's view; None when it is not registered. Reads only.

    :param windows: the target's maintenance windows, for a spec without its own;
        :param now: the moment they are judged at (default: now).
    """
    state = store.states.get(name, projection={"history": 0})
    return None if state is None else status_view(store, state, windows=windows, now=now)


def read_statuses(
    store: BackgroundStore,
    *,
    names: Collection[str] | None = None,
    statuses: Collection[str] | None = None,
    windows: Sequence[Window] = (),
    now: datetime | None = None,
) -> list[BackgroundStatusView]:
    """The views of every registered migration (or of ``names``, in ``statuses``), oldest
    first. Reads only."""
    query: dict[str, Any] = {}
    if names is not None:
        query["_id"] = {"$in": sorted(names)}
    if statuses:
        query["status"] = {"$in": sorted(statuses)}
    return [status_view(store, state, windows=windows) for state in store.states.list_states(query)]


def registered_names(store: BackgroundStore) -> list[str]:
    """Every registered background migration, oldest first. Reads only."""
    return [state["_id"] for state in store.states.list_states()]


def status_json(
    store: BackgroundStore,
    state: StateDocument,
    *,
    windows: Sequence[Window] = (),
    now: datetime | None = None,
) -> dict[str, Any]:
    """The JSON status of one background migration (see :class:`BackgroundStatusView`)."""
    return status_view(store, state, windows=windows, now=now).to_dict()


def status_view(
    store: BackgroundStore,
    state: StateDocument,
    *,
    windows: Sequence[Window] = (),
    now: datetime | None = None,
) -> BackgroundStatusView:
    """The view of a state document, with its current partitions and live leases.

    :param windows: the target's maintenance windows, shown for a spec without
        its own; :param now: the moment they are judged at (default: now).
    """
    name = state["_id"]
    generation = state.get("generation", 0)
    partitions = store.partitions.list_partitions(name, generation=generation)
    shown = progress(state, partitions)
    spec = state.get("spec") or {}
    errors = list(state.get("doc_errors") or [])
    unrolled = _unrolled(state)
    pass_failed = sum(len(p.get("bad_ids") or []) for p in partitions) if unrolled else 0
    rate = average_rate(state, shown.done)
    mode = state.get("mode") or spec.get("mode")
    moment = now or utc_now()
    windows_kept = _windows_kept(spec, windows)
    return BackgroundStatusView(
        name=name,
        status=state.get("status"),
        phase=state.get("phase"),
        direction=state.get("direction", "forward"),
        mode=mode,
        runs_as=runs_as(mode),
        collection=spec.get("collection"),
        description=state.get("description"),
        pass_number=state.get("pass", 0),
        generation=generation,
        progress=shown,
        eta_seconds=eta_seconds(state, shown.done, shown.estimate, rate),
        average_docs_per_second=None if rate is None else round(rate, 1),
        totals=dict(state.get("totals") or {}),
        partition_counts=_by_status(partitions),
        live_leases=store.leases.live_leases(name),
        failed_documents=count_failed(state, partitions),
        failed_document_samples=tuple(
            json_safe({key: entry.get(key) for key in ("id", "reason", "error")})
            for entry in errors[-VIEW_FAILED_DOCUMENTS:]
        ),
        last_error=state.get("last_error"),
        waits_for=tuple(state.get("waits_for") or []),
        requires=tuple(state.get("requires") or []),
        coordinator=json_safe(state.get("coordinator")),
        round=state.get("round"),
        plan=json_safe(_shown_plan(state)),
        sharding=sharding_json(state),
        created_at=_time(state.get("created_at")),
        started_at=_time(state.get("started_at")),
        pass_started_at=pass_started_at(state),
        completed_at=_time(state.get("completed_at")),
        failed_at=_time(state.get("failed_at")),
        updated_at=_time(state.get("updated_at")),
        last_progress_at=_time(state.get("last_progress_at")),
        max_parallel=spec.get("max_parallel"),
        pacing=_pacing(spec),
        partitions=tuple(partition_of(partition) for partition in partitions),
        pass_failed_documents=pass_failed,
        document_errors=_document_errors(
            [*errors, *(e for p in partitions for e in p.get("doc_errors") or [])]
            if unrolled
            else errors
        ),
        held_by=_hold(state),
        validator=_validator(state),
        canary=_canary(state, spec),
        undo=state.get("undo"),
        window=(
            None
            if state.get("status") in _FINISHED or not windows_kept
            else _window(windows_kept, spec.get("windows") is None, moment)
        ),
        eta_range=_eta_range(state, shown, windows_kept or (), moment),
    )


def _eta_range(
    state: StateDocument, shown: ProgressView, windows: Sequence[Window], now: datetime
) -> EtaRange | None:
    """The live ETA range of a running pass counted against its plan; None otherwise."""
    started = pass_started_at(state)
    if state.get("status") != "running" or started is None or shown.source != "plan":
        return None
    return live_range(shown.estimate - shown.done, shown.done, started, now, windows)


def _hold(state: StateDocument) -> HoldView | None:
    """What holds the lanes while the migration runs (a finished one holds nothing)."""
    hold = state.get("hold")
    if state.get("status") != "running" or not isinstance(hold, Mapping):
        return None
    reason = str(hold.get("reason", "health"))
    return HoldView(
        signal=_text(hold.get("signal")),
        level=_text(hold.get("level")),
        reading=hold.get("reading"),
        limit=hold.get("limit"),
        since=_time(hold.get("since")),
        at=_time(hold.get("at")),
        reason=reason,
        until=_time(hold.get("until")),
    )


#: Statuses whose lanes are done for good: no window schedule to show.
_FINISHED: Final = frozenset({"completed", "failed", "cancelled"})


def _windows_kept(spec: Document, default: Sequence[Window]) -> tuple[Window, ...] | None:
    """The windows the lanes keep (the spec's own, else the target's); None when none do."""
    own = spec.get("windows")
    try:
        windows = tuple(default) if own is None else parse_windows(own)
    except WindowError:
        return None
    return windows or None


def _window(windows: Sequence[Window], from_target: bool, now: datetime) -> WindowView:
    """Where ``now`` stands against the windows the lanes keep."""
    where = window_state(windows, now)
    return WindowView(
        source="target" if from_target else "spec",
        open=where.open,
        rate=None if where.window is None else where.window.rate_text(),
        opens_at=where.opens_at,
        closes_at=where.closes_at,
        windows=tuple(window.to_document() for window in windows),
    )


def _validator(state: StateDocument) -> ValidatorView | None:
    """The finalize validator's view (never its recorded previous validation)."""
    validator = state.get("validator")
    if validator is None:
        return None
    return ValidatorView(
        phase=validator["phase"],
        since=_time(validator.get("since")),
        until=_time(validator.get("until")),
        clean_passes=int(validator.get("clean_passes", 0)),
        old_shape=int(validator.get("old_shape", 0)),
        old_shape_seen=int(validator.get("old_shape_seen", 0)),
        old_shape_at=_time(validator.get("old_shape_at")),
        enforced_at=_time(validator.get("enforced_at")),
    )


def _shown_plan(state: StateDocument) -> dict[str, Any]:
    """The state's plan as a view shows it: without its token."""
    plan = state.get("plan")
    return {key: value for key, value in plan.items() if key != "token"} if plan else {}


def runs_as(mode: Any) -> RunsAs | None:
    """How a migration of the spec's ``mode`` rewrites (see :data:`RunsAs`); None if unknown."""
    return _RUNS_AS.get(mode) if isinstance(mode, str) else None


def partition_of(partition: PartitionDocument) -> PartitionView:
    """One partition's view (never the lease token)."""
    lease = partition.get("lease")
    stored = partition.get("throttle")
    return PartitionView(
        id=str(partition["_id"]),
        generation=partition.get("generation"),
        index=partition.get("index"),
        status=partition.get("status"),
        scope=json_safe(partition.get("scope")),
        group=partition.get("group"),
        cursor=json_safe(partition.get("cursor")),
        counters=dict(partition.get("counters") or {}),
        failed_documents=len(partition.get("bad_ids") or []),
        slice_failures=partition.get("slice_failures", 0),
        last_error=partition.get("last_error"),
        lease=(
            LeaseView(
                owner=lease.get("owner"),
                slot=lease.get("slot"),
                renewed_at=_time(lease.get("renewed_at")),
            )
            if lease
            else None
        ),
        updated_at=_time(partition.get("updated_at")),
        pacing=(
            LanePacing(batch_size=stored.get("batch_size"), pause_ms=stored.get("pause_ms"))
            if isinstance(stored, Mapping)
            else None
        ),
        document_errors=_document_errors(partition.get("doc_errors") or []),
    )


def partition_json(partition: PartitionDocument) -> dict[str, Any]:
    """The JSON of one partition (see :class:`PartitionView`)."""
    return partition_of(partition).to_dict()


def history_json(state: StateDocument) -> list[dict[str, Any]]:
    """The control history, oldest first: action, from, to, who, why, when."""
    return [json_safe(entry) for entry in state.get("history") or []]


def progress(state: StateDocument, partitions: Sequence[PartitionDocument]) -> ProgressView:
    """Work done in this pass against its estimate (see :class:`ProgressView`)."""
    plan = state.get("plan")
    current = [p for p in partitions if p.get("generation") == state.get("generation")]
    step_total = _step_total(current)
    source: ProgressSource = "plan" if step_total is None else "step"
    if step_total is not None:
        estimate, done_now = step_total, _step_done(current)
    else:
        estimate = int(plan.get("estimate") or 0) if plan else 0
        done_now = _documents(current)
    if state.get("status") == "completed":
        percent: float | None = 100.0
    elif estimate > 0:
        percent = round(min(100.0, 100.0 * done_now / estimate), 1)
    else:
        percent = None
    return ProgressView(
        estimate=estimate,
        at_least=bool(plan and plan.get("at_least")) and source == "plan",
        approximate=bool(plan and plan.get("approximate")) and source == "plan",
        done=done_now,
        percent=percent,
        source=source,
    )


def _counter(partition: PartitionDocument, key: str) -> int:
    return int((partition.get("counters") or {}).get(key, 0))


def _documents(partitions: Sequence[PartitionDocument]) -> int:
    return sum(_counter(p, "migrated") + _counter(p, "skipped") for p in partitions)


def _step_total(partitions: Sequence[PartitionDocument]) -> int | None:
    """The ``total`` the last step of this pass reported (a step migration's one partition)."""
    totals = [p["step_total"] for p in partitions if isinstance(p.get("step_total"), int)]
    return max(totals) if totals else None


def _step_done(partitions: Sequence[PartitionDocument]) -> int:
    """What the steps of this pass did: their ``processed``, else their ``migrated``."""
    processed = sum(_counter(p, "processed") for p in partitions)
    return processed or sum(_counter(p, "migrated") for p in partitions)


def pass_started_at(state: StateDocument) -> datetime | None:
    """When this pass was planned; ``started_at`` for states planned before it was recorded."""
    return _time(state.get("pass_started_at")) or _time(state.get("started_at"))


def average_rate(state: StateDocument, done_now: int) -> float | None:
    """This pass's documents per second since it was planned, to its completion (else now);
    None when untold."""
    started = pass_started_at(state)
    completed = _time(state.get("completed_at"))
    finished = state.get("status") == "completed"
    if started is None or done_now <= 0 or (finished and completed is None):
        return None
    end = pendulum.instance(completed) if finished and completed else utc_now()
    elapsed = (end - pendulum.instance(started)).total_seconds()
    return done_now / elapsed if elapsed > 0 else None


def eta_seconds(
    state: StateDocument, done_now: int, estimate: int, rate: float | None
) -> float | None:
    """Seconds left at ``rate`` (:func:`average_rate`) while running; None when untold."""
    if state.get("status") != "running" or estimate <= done_now or not rate:
        return None
    return round((estimate - done_now) / rate, 1)


def sharding_json(state: StateDocument) -> dict[str, Any] | None:
    """How the current plan split the collection: ``{mode, key, groups}``.

    ``mode`` is ``off`` (by ``_id``, not sharded or shard-awareness off),
    ``untargeted`` (sharded, split by ``_id``), ``chunks`` or ``sampled`` (along
    the shard key); ``None`` before the first plan.
    """
    plan = state.get("plan")
    if not plan:
        return None
    recorded = plan.get("sharding")
    if not recorded:
        return {"mode": "off"}
    return dict(json_safe(recorded))


def _by_status(partitions: Sequence[PartitionDocument]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for partition in partitions:
        counts[partition["status"]] = counts.get(partition["status"], 0) + 1
    return counts


def _unrolled(state: StateDocument) -> bool:
    """The current pass's counters are still on its partitions, not in the totals."""
    return int(state.get("rolled_generation", 0)) < int(state.get("generation", 0))


def _pacing(spec: Document) -> PacingView:
    fixed = spec.get("throttle") or {}
    adaptive = spec.get("adaptive")
    return PacingView(
        batch_size=spec.get("batch_size"),
        pause_ms=int(fixed.get("pause_ms") or 0),
        max_lag_ms=fixed.get("max_lag_ms"),
        adaptive=dict(adaptive) if isinstance(adaptive, Mapping) else None,
    )


def _document_errors(entries: Sequence[Any]) -> tuple[DocumentError, ...]:
    return tuple(
        DocumentError(reason=_text(entry.get("reason")), error=_text(entry.get("error")))
        for entry in entries
        if isinstance(entry, Mapping)
    )


# -- old names ---------------------------------------------------------------------------

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _renamed(function: Callable[_P, _R], old: str) -> Callable[_P, _R]:
    """``function`` under its old name, warning (``DeprecationWarning``) on each call."""

    @functools.wraps(function)
    def alias(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        warnings.warn(
            f"{old} is deprecated: it returns JSON, not a view; use {function.__name__}",
            DeprecationWarning,
            stacklevel=2,
        )
        return function(*args, **kwargs)

    return alias


#: Deprecated names of :func:`status_json`, :func:`partition_json`, :func:`history_json`
#: and :func:`sharding_json` (a ``*_view`` is a typed view; these return JSON).
state_view = _renamed(status_json, "state_view")
partition_view = _renamed(partition_json, "partition_view")
history_view = _renamed(history_json, "history_view")
sharding_view = _renamed(sharding_json, "sharding_view")


def _canary(state: StateDocument, spec: Document) -> CanaryView | None:
    """The canary's view: its phase (``migrating`` before it soaks), checks and approval."""
    settings = spec.get("canary")
    if not isinstance(settings, Mapping):
        return None
    canary: Mapping[str, Any] = state.get("canary") or {}
    fraction = settings.get("fraction")
    return CanaryView(
        phase=str(canary.get("phase", "migrating")),
        subset="fraction" if fraction is not None else "filter",
        approval=bool(settings.get("approval", False)),
        fraction=fraction,
        since=_time(canary.get("since")),
        until=_time(canary.get("until")),
        clean_passes=int(canary.get("clean_passes", 0)),
        counts=canary.get("counts"),
        drift=canary.get("drift"),
        sample=canary.get("sample"),
        checked_at=_time(canary.get("checked_at")),
        failed=_stamped(canary.get("failed")),
        approved=_stamped(canary.get("approved")),
        rejected=_stamped(canary.get("rejected")),
    )


def _stamped(mark: Any) -> dict[str, Any] | None:
    """A recorded check failure, approval or rejection, its time made aware."""
    if not isinstance(mark, Mapping):
        return None
    return {key: _time(value) if key == "at" else value for key, value in mark.items()}
