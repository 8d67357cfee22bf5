"""The dry run's entry point: pick, preview (or validate) and report, writing nothing.

:func:`dry_run` checks its options before anything is read, hands a step
migration to :func:`~migronaut_core.background.dry_run.steps.dry_run_steps`,
and otherwise previews a sample of a declarative migration's documents.
"""

from __future__ import annotations

import logging

from migronaut_core.background.dry_run.options import check_options
from migronaut_core.background.dry_run.preview import (
    dry_run_job,
    estimate,
    pick,
    spec_of,
    transformed,
)
from migronaut_core.background.dry_run.report import DryRunReport, StepDryRunReport
from migronaut_core.background.dry_run.sandbox import validated
from migronaut_core.background.dry_run.steps import dry_run_steps
from migronaut_core.background.runtime import Runtime
from migronaut_core.errors import TransactionsUnsupportedError

__all__ = ["dry_run"]

log = logging.getLogger("migronaut_core.background")


def dry_run(
    rt: Runtime,
    name: str,
    *,
    sample: int | None = None,
    first: int | None = None,
    validate: bool = False,
    steps: int | None = None,
    from_start: bool = False,
) -> DryRunReport | StepDryRunReport:
    """Preview a background migration on a few of its documents, writing nothing.

    A step migration is previewed by steps instead (:func:`dry_run_steps`).

    :param sample: look at this many random matching documents (default
        :data:`~migronaut_core.background.dry_run.options.DEFAULT_SAMPLE` when
        ``first`` is not given either).
    :param first: look at the first this many matching documents by ``_id``.
    :param validate: run the real write path in a transaction that is always
        aborted, so duplicate keys and validator failures show as ``write`` errors.
    :param steps: (step migrations) how many steps to run (default 1).
    :param from_start: (step migrations) start from no checkpoint.
    :raises ConfigInvalidError: bad options (before anything is read), step
        options for a declarative migration, or a step migration.
    :raises TransactionsUnsupportedError: ``validate`` on a standalone server.
    :raises MigrationFileNotFoundError: no such migration file.
    """
    method, size = check_options(sample=sample, first=first)
    loaded = rt.load(name)
    state = rt.store.states.get(name, projection={"history": 0, "doc_errors": 0})
    if spec_of(name, loaded, state).mode == "step":
        return dry_run_steps(rt, name, steps=steps, from_start=from_start)
    job = dry_run_job(rt, name, loaded, state, steps=steps, from_start=from_start)
    if validate and not rt.supports_transactions():
        raise TransactionsUnsupportedError(
            f"dry run of {name}: validate runs the write path in a transaction, which needs a "
            "replica set or a sharded cluster; this server is standalone",
            {"migration": name},
        )
    counted, at_least = estimate(rt, job)
    picked = pick(rt, job, method, size)
    previews = validated(rt, job, picked) if validate else transformed(rt, job, picked)
    report = DryRunReport(
        migration=name,
        collection=job.collection,
        direction=job.direction,
        status=None if state is None else str(state.get("status")),
        file_changed=state is not None and state.get("checksum") not in (None, loaded.checksum),
        method=method,
        size=size,
        validate=validate,
        estimate=counted,
        at_least=at_least,
        documents=tuple(previews),
    )
    _log_totals(report)
    return report


def _log_totals(report: DryRunReport) -> None:
    totals = report.totals
    log.info(
        "dry run of %s%s: %d document(s), %d would change, %d unchanged, %d error(s)",
        report.migration,
        " (validated)" if report.validate else "",
        totals["documents"],
        totals["would_change"],
        totals["unchanged"],
        totals["errors"],
    )
