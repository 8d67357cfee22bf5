"""Every metric migronaut reports, named once: the StatsD-style name, the OpenTelemetry one.

:data:`METRICS` is the one table: :class:`~migronaut_core.background.telemetry.Telemetry`
reports under these names and no other, docs/monitoring/metrics.md lists them,
and the shipped StatsD exporter mapping, Prometheus rules and Grafana dashboard
(docs/monitoring/) are checked against it by the tests. A metric a dashboard
relies on is renamed here or nowhere.

A :class:`~migronaut_core.background.telemetry.MetricsSink` receives the
``sink`` names (``migronaut.<what>.<which>``) with the ``tags`` listed; every one
is tagged ``migration``, and ``collection`` once the migration's job was built in
the kit. OpenTelemetry gets the ``otel`` names, with the same facts as
``migronaut.background.*`` attributes (``migronaut.background.name`` for the
migration; the collection is not an attribute there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "METRICS",
    "Metric",
    "MetricKind",
    "by_sink_name",
]

#: What a sink receives: ``counter`` (``incr``), ``timer`` (``timing``, in ms) or
#: ``gauge`` (``gauge``: the value now, replacing the last).
MetricKind = Literal["counter", "timer", "gauge"]
#: What OpenTelemetry records: a counter, a histogram, or an observable gauge.
OtelKind = Literal["counter", "histogram", "gauge"]

#: Tags every sink metric carries (``collection`` once known).
BASE_TAGS: Final = ("migration", "collection")


@dataclass(frozen=True, slots=True)
class Metric:
    """One metric: its names, kinds, unit and tags, and what one value means."""

    sink: str
    otel: str
    kind: MetricKind
    otel_kind: OtelKind
    unit: str
    #: The sink's tags beyond :data:`BASE_TAGS` (the OpenTelemetry attributes
    #: carry the same, prefixed ``migronaut.background.``).
    tags: tuple[str, ...]
    meaning: str


SLICE_DURATION: Final = Metric(
    "migronaut.slice.duration",
    "migronaut.background.slice.duration",
    "timer",
    "histogram",
    "ms",
    ("outcome", "shard"),
    "how long a lane held a lease; 0 for a slice that ended before its claim "
    "(outcome `error`, `deferred`)",
)
BATCH_DURATION: Final = Metric(
    "migronaut.batch.duration",
    "migronaut.background.batch.duration",
    "timer",
    "histogram",
    "ms",
    ("shard",),
    "one written batch, read to checkpoint",
)
BATCH_DOCUMENTS: Final = Metric(
    "migronaut.batch.documents",
    "migronaut.background.batch.size",
    "counter",
    "histogram",
    "{document}",
    ("shard",),
    "documents read by written batches (OpenTelemetry: per batch, as a histogram)",
)
TRANSACTION_RETRIES: Final = Metric(
    "migronaut.transaction.retries",
    "migronaut.background.transaction.retries",
    "counter",
    "counter",
    "{retry}",
    ("reason",),
    "transactional batches or steps retried (`transient`, `conflict`, `time_or_size`)",
)
THROTTLED: Final = Metric(
    "migronaut.throttled",
    "migronaut.background.throttled",
    "counter",
    "counter",
    "{change}",
    ("reason", "shard"),
    "throttle changes (`overload`, `latency`, `recovered`), lag waits (`lag`), "
    "health breaches (`health`) and waits for the write budget (`budget`)",
)
LEASES_CLAIMED: Final = Metric(
    "migronaut.lease.claimed",
    "migronaut.background.leases.claimed",
    "counter",
    "counter",
    "{lease}",
    ("shard",),
    "partitions claimed by lanes",
)
LEASES_RECLAIMED: Final = Metric(
    "migronaut.lease.reclaimed",
    "migronaut.background.leases.reclaimed",
    "counter",
    "counter",
    "{lease}",
    (),
    "lapsed leases reaped (their lanes died or stalled)",
)
LEASES_LOST: Final = Metric(
    "migronaut.lease.lost",
    "migronaut.background.leases.lost",
    "counter",
    "counter",
    "{lease}",
    ("shard",),
    "leases found reaped or unlocked under a working lane",
)

STATUS: Final = Metric(
    "migronaut.migration.status",
    "migronaut.background.status",
    "gauge",
    "gauge",
    "1",
    ("status",),
    "one series per status (`pending`, `blocked`, `running`, `paused`, `completed`, "
    "`failed`, `cancelled`): 1 for the migration's status, 0 for the others",
)
DONE: Final = Metric(
    "migronaut.migration.done",
    "migronaut.background.done",
    "gauge",
    "gauge",
    "{document}",
    (),
    "documents done in this pass (migrated and skipped), or the units a step "
    "migration reports: the status view's `progress.done`",
)
REMAINING: Final = Metric(
    "migronaut.migration.remaining",
    "migronaut.background.remaining",
    "gauge",
    "gauge",
    "{document}",
    (),
    "this pass's estimate less what is done, never below 0; 0 once completed (the "
    "estimate is the plan's, possibly sampled or capped: see `progress`)",
)
FAILED_DOCUMENTS: Final = Metric(
    "migronaut.migration.failed_documents",
    "migronaut.background.failed_documents",
    "gauge",
    "gauge",
    "{document}",
    (),
    "documents that failed and were set aside, over every pass (the status's `failed_documents`)",
)
RATE: Final = Metric(
    "migronaut.migration.rate",
    "migronaut.background.rate",
    "gauge",
    "gauge",
    "{document}/s",
    (),
    "this pass's average: documents done over the time since the pass was planned "
    "(to its completion); 0 while untold. Not a recent rate: held or paused time "
    "lowers it",
)
LANES: Final = Metric(
    "migronaut.migration.lanes",
    "migronaut.background.lanes",
    "gauge",
    "gauge",
    "{lease}",
    (),
    "live leases: lanes working a partition now",
)
HELD: Final = Metric(
    "migronaut.migration.held",
    "migronaut.background.held",
    "gauge",
    "gauge",
    "1",
    (),
    "1 while the lanes of a running migration hold on a MongoDB health signal past its "
    "hard limit or on the target's brake (the status's `held_by`, reason `health` or "
    "`brake`), else 0",
)
WINDOW_WAIT: Final = Metric(
    "migronaut.migration.window_wait",
    "migronaut.background.window_wait",
    "gauge",
    "gauge",
    "1",
    (),
    "1 while the lanes of a running migration wait for a maintenance window to open "
    "(the status's `held_by`, reason `window`), else 0: a planned wait, not an alarm",
)
LAST_PROGRESS: Final = Metric(
    "migronaut.migration.last_progress",
    "migronaut.background.last_progress",
    "gauge",
    "gauge",
    "s",
    (),
    "when a lane last recorded progress (or the pass was planned), in seconds since "
    "the Unix epoch; 0 before any",
)
THROTTLE_BATCH_SIZE: Final = Metric(
    "migronaut.throttle.batch_size",
    "migronaut.background.throttle.batch_size",
    "gauge",
    "gauge",
    "{document}",
    ("shard",),
    "the adaptive throttle's batch size now (set when it changes)",
)
THROTTLE_PAUSE: Final = Metric(
    "migronaut.throttle.pause_ms",
    "migronaut.background.throttle.pause",
    "gauge",
    "gauge",
    "ms",
    ("shard",),
    "the adaptive throttle's pause between batches now (set when it changes)",
)
HEALTH_READING: Final = Metric(
    "migronaut.health.reading",
    "migronaut.background.health.reading",
    "gauge",
    "gauge",
    "1",
    ("signal",),
    "a MongoDB health signal the lanes read (`signal`: the spec's `health` keys, in "
    "their units: `majority_lag_ms` ms, `oplog_window_s` s, `cache_dirty`, "
    "`cache_used`, `write_tickets` fractions, `queued_operations` a count, "
    "`flow_control` 0/1); sent per new reading, only for signals read",
)

#: Every metric, in the order docs/monitoring/metrics.md lists them.
METRICS: Final[tuple[Metric, ...]] = (
    SLICE_DURATION,
    BATCH_DURATION,
    BATCH_DOCUMENTS,
    TRANSACTION_RETRIES,
    THROTTLED,
    LEASES_CLAIMED,
    LEASES_RECLAIMED,
    LEASES_LOST,
    STATUS,
    DONE,
    REMAINING,
    FAILED_DOCUMENTS,
    RATE,
    LANES,
    HELD,
    WINDOW_WAIT,
    LAST_PROGRESS,
    THROTTLE_BATCH_SIZE,
    THROTTLE_PAUSE,
    HEALTH_READING,
)


def by_sink_name() -> dict[str, Metric]:
    """:data:`METRICS` by their sink name."""
    return {metric.sink: metric for metric in METRICS}
