"""The estimate's entry point: count, sample, and tell the duration under windows and budget."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final

from migronaut_core.background.dry_run.options import MAX_DOCUMENTS
from migronaut_core.background.dry_run.preview import dry_run_job, spec_of
from migronaut_core.background.dry_run.preview import estimate as count_matching
from migronaut_core.background.estimate.measure import measure, server_cores
from migronaut_core.background.estimate.report import BudgetView, MigrationEstimate, SampledCosts
from migronaut_core.background.eta import (
    RATE_SPREAD,
    WRITE_FACTOR,
    EtaRange,
    budget_share,
    duration_range,
    lane_speedup,
)
from migronaut_core.background.runtime import Runtime
from migronaut_core.background.spec import BackgroundSpec, read_stored
from migronaut_core.checks import check_int
from migronaut_core.errors import ConfigInvalidError, TransactionsUnsupportedError
from migronaut_core.windows import Window

__all__ = ["DEFAULT_ESTIMATE_SAMPLE", "MIN_ESTIMATE_SAMPLE", "estimate_migration"]

#: Documents an estimate samples unless told otherwise.
DEFAULT_ESTIMATE_SAMPLE: Final = 1_000
#: The fewest it samples (fewer cannot tell a spread).
MIN_ESTIMATE_SAMPLE: Final = 10


def estimate_migration(
    rt: Runtime,
    name: str,
    *,
    sample: int | None = None,
    lanes: int | None = None,
    now: datetime | None = None,
) -> MigrationEstimate:
    """Estimate a background migration's pass from now, registered or only a file; write nothing.

    :param sample: documents to sample (default :data:`DEFAULT_ESTIMATE_SAMPLE`,
        :data:`MIN_ESTIMATE_SAMPLE` to 10,000).
    :param lanes: lanes to count (default: the spec's ``max_parallel``).
    :param now: the moment windows are judged from (default: the runtime's wall clock).
    :raises ConfigInvalidError: a bad option, or a step migration (its steps report
        their own total; nothing here can sample them).
    :raises TransactionsUnsupportedError: a standalone server (the write is timed in
        a transaction that is aborted).
    """
    size = check_int(
        "sample",
        DEFAULT_ESTIMATE_SAMPLE if sample is None else sample,
        MIN_ESTIMATE_SAMPLE,
        MAX_DOCUMENTS,
        label="estimate: sample",
    )
    loaded = rt.load(name)
    state = rt.store.states.get(name, projection={"history": 0, "doc_errors": 0})
    spec = spec_of(name, loaded, state)
    counted_lanes = check_int(
        "lanes", spec.max_parallel if lanes is None else lanes, 1, label="estimate: lanes"
    )
    _check_estimable(rt, name, spec)
    job = dry_run_job(rt, name, loaded, state, steps=None, from_start=False)
    documents, at_least = count_matching(rt, job)
    costs = measure(rt, job, size)
    moment = now or rt.wall_clock()
    cores = server_cores(rt)
    rate = _rate(costs, counted_lanes, cores)
    budget = _budget(rt, name, spec)
    windows = rt.windows_of(spec)
    alone = rate * counted_lanes / lane_speedup(counted_lanes, cores)
    eta = _eta(documents, rate, alone, costs, windows=windows, budget=budget, now=moment)
    return MigrationEstimate(
        migration=name,
        collection=job.collection,
        mode=spec.mode,
        documents=documents,
        at_least=at_least,
        lanes=counted_lanes,
        docs_per_s=round(rate, 1),
        oplog_bytes=None if documents is None else round(documents * costs.oplog_bytes),
        eta=eta,
        finishes_at=None if eta.seconds is None else moment + timedelta(seconds=eta.seconds),
        windows=None if not windows else ("target" if spec.windows is None else "spec"),
        budget=budget,
        costs=costs,
    )


def _check_estimable(rt: Runtime, name: str, spec: BackgroundSpec) -> None:
    """Refuse a step migration and a standalone server, before anything is read."""
    if spec.mode == "step":
        raise ConfigInvalidError(
            f"estimate of {name}: a step migration reports its own total as it runs; "
            "only declarative and update migrations are estimated",
            {"migration": name, "key": "mode"},
        )
    if not rt.supports_transactions():
        raise TransactionsUnsupportedError(
            f"estimate of {name}: the write is timed in a transaction, which needs a replica "
            "set or a sharded cluster; this server is standalone",
            {"migration": name},
        )


def _rate(costs: SampledCosts, lanes: int, cores: int | None) -> float:
    """Docs/s at full speed with ``lanes`` lanes (0 when nothing could be timed)."""
    per_doc_ms = costs.transform_ms + WRITE_FACTOR * costs.write_ms
    if costs.documents == 0 or per_doc_ms <= 0:
        return 0.0
    return 1000.0 / per_doc_ms * lane_speedup(lanes, cores)


def _budget(rt: Runtime, name: str, spec: BackgroundSpec) -> BudgetView | None:
    """The migration's share of the budget, assuming the running migrations share it."""
    if rt.budget_rate is None:
        return None
    running = rt.store.states.list_states({"status": "running", "_id": {"$ne": name}})
    others = tuple(read_stored(state["spec"], name=state["_id"]).priority for state in running)
    share = budget_share(rt.budget_rate, spec.priority, others)
    assert share is not None  # a budget is set
    return BudgetView(rt.budget_rate, spec.priority, others, round(share, 1))


def _eta(
    documents: int | None,
    rate: float,
    alone: float,
    costs: SampledCosts,
    *,
    windows: tuple[Window, ...],
    budget: BudgetView | None,
    now: datetime,
) -> EtaRange:
    if documents == 0:
        return EtaRange(0.0, 0.0, 0.0)
    if documents is None or rate <= 0:
        return EtaRange(None, None, None)
    return duration_range(
        documents,
        rate,
        RATE_SPREAD + 2 * costs.relative_error,
        windows=windows,
        share=None if budget is None else budget.share,
        lanes_alone=alone,
        now=now,
    )
