"""A migration's gauges, read from its status view and reported through the kit's telemetry.

Each coordinator step, each control that moves a status and each lane that
records progress (at the end of a lease it held, at most every
:data:`LANE_REPORT_EVERY_S` per kit) reports them
(:func:`publish_status`), so a dashboard's status, done, remaining, failed
documents, rate, lanes and hold follow what ``migronaut background status``
shows: the same view, the same numbers. A migration nothing drives keeps the
last values sent; alerts on a stall read the ``last_progress`` gauge's age,
which keeps growing then.

No ETA gauge: the view's ``eta_seconds`` is told by this pass's average rate,
which a hold or a pause skews; dashboards derive one from ``remaining`` over the
recent slope of ``done`` instead (docs/monitoring/metrics.md).
"""

from __future__ import annotations

import logging
from typing import Final

from pymongo.errors import PyMongoError

from migronaut_core.background.runtime import Runtime
from migronaut_core.background.states import STATUSES
from migronaut_core.background.telemetry import MigrationReadings
from migronaut_core.background.views import BackgroundStatusView, read_status
from migronaut_core.clock import aware

__all__ = ["LANE_REPORT_EVERY_S", "publish_status", "readings_of"]

log = logging.getLogger(__name__)

#: A lane reports a migration's gauges at a lease's end at most this often per kit.
LANE_REPORT_EVERY_S: Final = 5.0


def readings_of(view: BackgroundStatusView) -> MigrationReadings:
    """The gauges of one status view (see :mod:`migronaut_core.background.metric_names`)."""
    progress = view.progress
    completed = view.status == "completed"
    remaining = 0 if completed else max(0, progress.estimate - progress.done)
    return MigrationReadings(
        migration=view.name,
        collection=view.collection,
        status=view.status or "pending",
        statuses=STATUSES,
        done=progress.done,
        remaining=remaining,
        failed_documents=view.failed_documents,
        rate=view.average_docs_per_second or 0.0,
        lanes=view.live_leases,
        held=view.held_by is not None and view.held_by.reason != "window",
        window_wait=view.held_by is not None and view.held_by.reason == "window",
        last_progress=(
            0.0 if view.last_progress_at is None else aware(view.last_progress_at).timestamp()
        ),
    )


def publish_status(rt: Runtime, name: str, *, every_s: float | None = None) -> None:
    """Report ``name``'s gauges now, when the kit reports anything at all.

    Reads the status view (the state, its partitions, its live leases); a read
    that fails is logged and skipped: metrics never fail a step or a control.

    :param every_s: report only if this kit's last such report of ``name`` is at
        least this old (the lanes' reports: many small partitions end often).
    """
    if not rt.telemetry.enabled:
        return
    if every_s is not None and not rt.telemetry.due(name, every_s):
        return
    try:
        view = read_status(rt.store, name)
    except PyMongoError as exc:
        log.warning("%s: its gauges were not reported: %s", name, type(exc).__name__)
        return
    if view is not None:
        rt.telemetry.migration_observed(readings_of(view))
