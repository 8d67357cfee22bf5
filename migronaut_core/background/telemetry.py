"""OpenTelemetry spans and metrics of background migrations, when the API is installed.

``pip install 'migronaut-core[otel]'`` brings ``opentelemetry-api``; the
application configures an SDK (exporters, readers) as for any instrumented
library. The kit reports through the global tracer and meter providers, or the
ones passed to ``Migronaut(tracer_provider=…, meter_provider=…)``. Without
``opentelemetry`` every call below is one attribute check, and nothing else.

What is reported (the names and attributes dashboards rely on; listed in
docs/background.md):

- span ``migronaut.background.coordinate``: one coordinator step, opened once
  its lock is held (a busy coordinator makes none);
- span ``migronaut.background.slice``: one lease a lane held (a partition worked);
- ``migronaut.background.slice.duration`` (histogram, ms): per lease held, by outcome;
- ``migronaut.background.batch.duration`` (ms) and ``migronaut.background.batch.size``
  (documents read): per batch written;
- ``migronaut.background.transaction.retries``: per transactional retry, by reason;
- ``migronaut.background.throttled``: per throttle change or lag wait, by reason;
- ``migronaut.background.leases.reclaimed``: leases reaped after their lane died;
- gauges, observed at each collection from the last values reported here: per
  migration its status (one series per status, 0 or 1), documents done and
  remaining, failed documents, rate, lanes, hold and last progress (reported by
  each coordinator step and control, :mod:`migronaut_core.background.gauges`);
  per lane group the adaptive throttle's batch size and pause; the MongoDB
  health signals' readings.

Every name is defined once, in :mod:`migronaut_core.background.metric_names`.

Attributes carry migration names, outcomes, reasons, error class names, shard
names, partition ids (migronaut's own ObjectIds) and counts: never a document
value, never an ``_id``, never an error's message.

A :class:`MetricsSink` given to the kit (``Migronaut(metrics_sink=…)``) receives
the same measurements as StatsD-style counters, timers and gauges, whether or not
``opentelemetry`` is installed: the Airflow provider installs one that sends them
through Airflow's configured metrics backend. Its names (:data:`SINK_METRICS`) are
``migronaut.<what>``, tagged with ``migration``, ``collection`` (once known),
``outcome``/``reason`` and ``shard`` as above.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, Protocol

from migronaut_core.background import metric_names as names
from migronaut_core.background.metric_names import Metric, MetricKind
from migronaut_core.clock import monotonic

try:
    from opentelemetry import metrics, trace
    from opentelemetry.metrics import Observation
    from opentelemetry.trace import Status, StatusCode
except ImportError:  # the `otel` extra is absent: telemetry stays off
    AVAILABLE = False
else:
    AVAILABLE = True

if TYPE_CHECKING:
    from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider
    from opentelemetry.trace import Span, TracerProvider

__all__ = [
    "AVAILABLE",
    "NO_TELEMETRY",
    "SINK_METRICS",
    "AttributeValue",
    "MetricsSink",
    "MigrationReadings",
    "SpanAttributes",
    "Telemetry",
]

log = logging.getLogger(__name__)

#: The instrumentation scope of every span and instrument.
SCOPE: Final = "migronaut"

SPAN_COORDINATE: Final = "migronaut.background.coordinate"
SPAN_SLICE: Final = "migronaut.background.slice"

ATTR_NAME: Final = "migronaut.background.name"
ATTR_OUTCOME: Final = "migronaut.background.outcome"
ATTR_REASON: Final = "migronaut.background.reason"
ATTR_STATUS: Final = "migronaut.background.status"
ATTR_LANES: Final = "migronaut.background.lanes"
ATTR_DRIVER: Final = "migronaut.background.driver"
ATTR_PARTITION: Final = "migronaut.background.partition"
ATTR_SLOT: Final = "migronaut.background.slot"
ATTR_GENERATION: Final = "migronaut.background.generation"
ATTR_SHARD: Final = "migronaut.background.shard"
#: A slice's counters: ``migronaut.background.counters.migrated``, ``….scanned``, …
ATTR_COUNTERS: Final = "migronaut.background.counters"
#: What every attribute key but ``error.type`` begins with.
ATTR_PREFIX: Final = "migronaut.background."
#: OpenTelemetry's own attribute: the class name of what was raised.
ATTR_ERROR_TYPE: Final = "error.type"

METRIC_SLICE_DURATION: Final = names.SLICE_DURATION.otel
METRIC_BATCH_DURATION: Final = names.BATCH_DURATION.otel
METRIC_BATCH_SIZE: Final = names.BATCH_DOCUMENTS.otel
METRIC_TRANSACTION_RETRIES: Final = names.TRANSACTION_RETRIES.otel
METRIC_THROTTLED: Final = names.THROTTLED.otel
METRIC_LEASES_RECLAIMED: Final = names.LEASES_RECLAIMED.otel
METRIC_LEASES_CLAIMED: Final = names.LEASES_CLAIMED.otel
METRIC_LEASES_LOST: Final = names.LEASES_LOST.otel

SINK_SLICE_DURATION: Final = names.SLICE_DURATION.sink
SINK_BATCH_DURATION: Final = names.BATCH_DURATION.sink
SINK_BATCH_DOCUMENTS: Final = names.BATCH_DOCUMENTS.sink
SINK_TRANSACTION_RETRIES: Final = names.TRANSACTION_RETRIES.sink
SINK_THROTTLED: Final = names.THROTTLED.sink
SINK_LEASES_CLAIMED: Final = names.LEASES_CLAIMED.sink
SINK_LEASES_RECLAIMED: Final = names.LEASES_RECLAIMED.sink
SINK_LEASES_LOST: Final = names.LEASES_LOST.sink
_SINK_CALLS: Final[Mapping[MetricKind, SinkCall]] = {
    "timer": "timing",
    "counter": "incr",
    "gauge": "gauge",
}
#: Every name a :class:`MetricsSink` receives (``metric_names.METRICS``), with the
#: call that receives it: ``timing`` (in ms), ``incr`` or ``gauge``.
SINK_METRICS: Final = {metric.sink: _SINK_CALLS[metric.kind] for metric in names.METRICS}

AttributeValue = str | int | float | bool
SinkCall = Literal["timing", "incr", "gauge"]


class SpanAttributes:
    """Sets attributes on an open span; a no-op when telemetry is off."""

    __slots__ = ("_span",)

    def __init__(self, span: Span | None = None) -> None:
        self._span = span

    def set(self, key: str, value: AttributeValue | None) -> None:
        """Set ``key`` (nothing for None)."""
        if self._span is not None and value is not None:
            self._span.set_attribute(key, value)

    def set_counters(self, counters: Mapping[str, int]) -> None:
        """Set each counter as ``migronaut.background.counters.<key>``."""
        for key, value in counters.items():
            self.set(f"{ATTR_COUNTERS}.{key}", value)


class _NoSpan(AbstractContextManager[SpanAttributes]):
    """The span of disabled telemetry: stateless, so one instance serves every thread."""

    _attributes = SpanAttributes()

    def __enter__(self) -> SpanAttributes:
        return self._attributes

    def __exit__(self, *exc: object) -> None:
        return None


_NO_SPAN: Final = _NoSpan()

#: A gauge series: its attributes, sorted (hashable).
_SeriesKey = tuple[tuple[str, AttributeValue], ...]


class _LastValues:
    """The last value of every gauge series, which OpenTelemetry's observable gauges read
    at each collection; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, dict[_SeriesKey, float]] = {}

    def set(self, metric: str, attributes: Mapping[str, AttributeValue], value: float) -> None:
        with self._lock:
            self._values.setdefault(metric, {})[tuple(sorted(attributes.items()))] = value

    def observer(self, metric: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        """The callback of ``metric``'s observable gauge: one observation per series."""

        def observe(_options: CallbackOptions) -> Iterable[Observation]:
            with self._lock:
                series = list(self._values.get(metric, {}).items())
            return [Observation(value, dict(key)) for key, value in series]

        return observe

    def register(self, meter: Meter) -> None:
        """Create the observable gauge of every gauge of the name table."""
        for metric in names.METRICS:
            if metric.otel_kind == "gauge":
                meter.create_observable_gauge(
                    metric.otel,
                    callbacks=[self.observer(metric.otel)],
                    unit=metric.unit,
                    description=metric.meaning.replace("`", ""),
                )


class MetricsSink(Protocol):
    """Where StatsD-style metrics go besides OpenTelemetry (Airflow's ``Stats``, …).

    Called on the lanes' threads, so it must be thread-safe; it must not block (a
    UDP send, a buffer). What it raises is logged and dropped: metrics never fail
    a migration. Tags carry names, outcomes and reasons, never document values.
    """

    def incr(self, name: str, count: int, tags: Mapping[str, str]) -> None:
        """Add ``count`` to the counter ``name``."""

    def timing(self, name: str, milliseconds: float, tags: Mapping[str, str]) -> None:
        """Record one duration of ``name``."""

    def gauge(self, name: str, value: float, tags: Mapping[str, str]) -> None:
        """Set the gauge ``name`` (with these tags) to ``value``, replacing the last."""


@dataclass(frozen=True, slots=True)
class MigrationReadings:
    """One migration's gauges at a coordinator step or a control (see
    :mod:`migronaut_core.background.metric_names` for what each means).

    ``statuses`` is every status there is: the status gauge sends one series per
    status, 1 for ``status`` and 0 for the rest, so an alert matches a series
    that exists whatever the migration did before.
    """

    migration: str
    collection: str | None
    status: str
    statuses: tuple[str, ...]
    done: int
    remaining: int
    failed_documents: int
    rate: float
    lanes: int
    held: bool
    window_wait: bool
    last_progress: float


class Telemetry:
    """The spans and instruments of one kit, and its metrics sink.

    :param tracer_provider: where spans go (default: the global provider).
    :param meter_provider: where measurements go (default: the global provider).
    :param enabled: False makes every call a no-op, as without ``opentelemetry``
        (the sink too).
    :param sink: also send every measurement there (see :class:`MetricsSink`).
    """

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        *,
        enabled: bool = True,
        sink: MetricsSink | None = None,
    ) -> None:
        self._sink = sink if enabled else None
        self._collections: dict[str, str] = {}
        self._last = _LastValues()
        self._health: dict[str, dict[str, float]] = {}
        self._sink_without_gauge = False
        self._due: dict[str, float] = {}
        self._due_lock = threading.Lock()
        self.otel = enabled and AVAILABLE
        #: Whether anything is reported at all (OpenTelemetry or the sink).
        self.enabled = self.otel or self._sink is not None
        if not self.otel:
            return
        self._tracer = trace.get_tracer(SCOPE, tracer_provider=tracer_provider)
        meter = metrics.get_meter(SCOPE, meter_provider=meter_provider)
        self._slice_duration = meter.create_histogram(
            METRIC_SLICE_DURATION, unit="ms", description="How long a lane held a lease"
        )
        self._batch_duration = meter.create_histogram(
            METRIC_BATCH_DURATION,
            unit="ms",
            description="How long a batch took, read to checkpoint",
        )
        self._batch_size = meter.create_histogram(
            METRIC_BATCH_SIZE, unit="{document}", description="Documents a written batch read"
        )
        self._transaction_retries = meter.create_counter(
            METRIC_TRANSACTION_RETRIES, unit="{retry}", description="Transactional batches retried"
        )
        self._throttled = meter.create_counter(
            METRIC_THROTTLED, unit="{change}", description="Throttle changes and lag waits"
        )
        self._leases_reclaimed = meter.create_counter(
            METRIC_LEASES_RECLAIMED, unit="{lease}", description="Expired leases reaped"
        )
        self._leases_claimed = meter.create_counter(
            METRIC_LEASES_CLAIMED, unit="{lease}", description="Partitions claimed by lanes"
        )
        self._leases_lost = meter.create_counter(
            METRIC_LEASES_LOST, unit="{lease}", description="Leases lost while working"
        )
        self._last.register(meter)

    def due(self, migration: str, every_s: float) -> bool:
        """Whether ``every_s`` passed since the last time this answered True for
        ``migration`` (then it starts a new wait); thread-safe."""
        now = monotonic()
        with self._due_lock:
            last = self._due.get(migration)
            if last is not None and now - last < every_s:
                return False
            self._due[migration] = now
            return True

    def collection_of(self, migration: str, collection: str) -> None:
        """Note the collection a migration rewrites: the sink's ``collection`` tag."""
        if self._sink is not None:
            self._collections[migration] = collection

    def _send(self, kind: str, name: str, value: float, tags: Mapping[str, str]) -> None:
        sink = self._sink
        if sink is None:
            return
        migration = tags.get("migration")
        collection = self._collections.get(migration) if migration else None
        full = {**tags, **({"collection": collection} if collection else {})}
        try:
            if kind == "timing":
                sink.timing(name, value, full)
            elif kind == "gauge":
                self._sink_gauge(sink, name, value, full)
            else:
                sink.incr(name, int(value), full)
        except Exception as exc:  # a metrics backend must never fail a migration
            log.warning("the metrics sink failed on %s: %s", name, type(exc).__name__)

    def _sink_gauge(
        self, sink: MetricsSink, name: str, value: float, tags: Mapping[str, str]
    ) -> None:
        """Set a gauge on the sink; a sink written before gauges existed is told once."""
        gauge = getattr(sink, "gauge", None)
        if gauge is not None:
            gauge(name, value, tags)
        elif not self._sink_without_gauge:
            self._sink_without_gauge = True
            log.warning(
                "the metrics sink %s has no gauge(name, value, tags); its gauges are not sent",
                type(sink).__name__,
            )

    def _gauge(
        self,
        metric: Metric,
        value: float,
        migration: str,
        *,
        shard: str | None = None,
        **more: str,
    ) -> None:
        """Set one series of a gauge: on the sink, and for OpenTelemetry's next collection."""
        self._send("gauge", metric.sink, value, _tags(migration, shard, **more))
        if self.otel:
            attributes = {f"{ATTR_PREFIX}{key}": text for key, text in more.items()}
            self._last.set(metric.otel, _attributes(migration, shard, attributes), value)

    def migration_observed(self, readings: MigrationReadings) -> None:
        """Report one migration's gauges (:class:`MigrationReadings`)."""
        if not self.enabled:
            return
        name = readings.migration
        if readings.collection is not None:
            self.collection_of(name, readings.collection)
        for status in readings.statuses:
            self._gauge(names.STATUS, float(status == readings.status), name, status=status)
        self._gauge(names.DONE, readings.done, name)
        self._gauge(names.REMAINING, readings.remaining, name)
        self._gauge(names.FAILED_DOCUMENTS, readings.failed_documents, name)
        self._gauge(names.RATE, readings.rate, name)
        self._gauge(names.LANES, readings.lanes, name)
        self._gauge(names.HELD, float(readings.held), name)
        self._gauge(names.WINDOW_WAIT, float(readings.window_wait), name)
        self._gauge(names.LAST_PROGRESS, readings.last_progress, name)

    def hold_observed(self, migration: str, *, held: bool, reason: str = "health") -> None:
        """The lanes of ``migration`` began (or ended) a hold: a health signal past its
        hard limit (``reason="health"``: the ``held`` gauge), or no maintenance window
        open (``"window"``: ``window_wait``, a planned wait alerts leave alone).

        Sent by the lane that writes the hold, at once: a coordinator step (which
        reports the hold from the status too) may not run while lanes hold. Ending a
        hold clears both.
        """
        if not self.enabled:
            return
        self._gauge(names.HELD, float(held and reason != "window"), migration)
        self._gauge(names.WINDOW_WAIT, float(held and reason == "window"), migration)

    def throttle_observed(
        self, migration: str, *, batch_size: int, pause_ms: int, shard: str | None = None
    ) -> None:
        """The adaptive throttle of ``migration`` (its ``shard``'s) now reads batches of
        ``batch_size`` with ``pause_ms`` between them."""
        if not self.enabled:
            return
        self._gauge(names.THROTTLE_BATCH_SIZE, batch_size, migration, shard=shard)
        self._gauge(names.THROTTLE_PAUSE, pause_ms, migration, shard=shard)

    def health_read(self, migration: str, readings: Mapping[str, float | bool | None]) -> None:
        """The lanes of ``migration`` read MongoDB's health signals (``None``: not read).

        Sent only when a reading differs from the last one this kit sent for the
        migration: lanes ask before every claim, the probe reads once a second.
        """
        if not self.enabled:
            return
        values = {signal: float(value) for signal, value in readings.items() if value is not None}
        if not values or self._health.get(migration) == values:
            return
        self._health[migration] = values
        for signal, value in values.items():
            self._gauge(names.HEALTH_READING, value, migration, signal=signal)

    def span(
        self, name: str, migration: str, attributes: Mapping[str, AttributeValue] | None = None
    ) -> AbstractContextManager[SpanAttributes]:
        """A span around a coordinator step or a lease held, current while it is open.

        Something raised inside sets ``error.type`` and outcome ``error`` and
        marks the span failed, without recording the exception's message.
        """
        if not self.otel:
            return _NO_SPAN
        return self._span(name, {ATTR_NAME: migration, **(attributes or {})})

    @contextmanager
    def _span(self, name: str, attributes: dict[str, AttributeValue]) -> Iterator[SpanAttributes]:
        with self._tracer.start_as_current_span(
            name, attributes=attributes, record_exception=False, set_status_on_exception=False
        ) as span:
            try:
                yield SpanAttributes(span)
            except BaseException as exc:
                span.set_attribute(ATTR_OUTCOME, "error")
                span.set_attribute(ATTR_ERROR_TYPE, type(exc).__name__)
                span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
                raise

    def slice_ended(
        self,
        migration: str,
        outcome: str,
        duration_ms: float,
        *,
        error_type: str | None = None,
        shard: str | None = None,
    ) -> None:
        """A lease's work ended (or a slice ended before its claim: ``error`` or
        ``deferred``, 0 ms)."""
        if not self.enabled:
            return
        self._send(
            "timing", SINK_SLICE_DURATION, duration_ms, _tags(migration, shard, outcome=outcome)
        )
        if not self.otel:
            return
        attributes = _attributes(migration, shard, {ATTR_OUTCOME: outcome})
        if error_type is not None:
            attributes[ATTR_ERROR_TYPE] = error_type
        self._slice_duration.record(duration_ms, attributes)

    def batch_written(
        self, migration: str, *, size: int, duration_ms: float, shard: str | None = None
    ) -> None:
        """A batch was written and checkpointed: ``size`` documents read in ``duration_ms``."""
        if not self.enabled:
            return
        tags = _tags(migration, shard)
        self._send("timing", SINK_BATCH_DURATION, duration_ms, tags)
        self._send("incr", SINK_BATCH_DOCUMENTS, size, tags)
        if not self.otel:
            return
        attributes = _attributes(migration, shard)
        self._batch_duration.record(duration_ms, attributes)
        self._batch_size.record(size, attributes)

    def transaction_retried(self, migration: str, reason: str) -> None:
        """A transaction was retried: ``transient``, ``conflict`` or ``time_or_size``."""
        self._send("incr", SINK_TRANSACTION_RETRIES, 1, _tags(migration, None, reason=reason))
        if self.otel:
            self._transaction_retries.add(1, {ATTR_NAME: migration, ATTR_REASON: reason})

    def throttled(self, migration: str, reason: str, *, shard: str | None = None) -> None:
        """The throttle changed (``overload``, ``latency``, ``recovered``) or waited (``lag``)."""
        self._send("incr", SINK_THROTTLED, 1, _tags(migration, shard, reason=reason))
        if self.otel:
            self._throttled.add(1, _attributes(migration, shard, {ATTR_REASON: reason}))

    def leases_reclaimed(self, migration: str, count: int) -> None:
        """``count`` leases lapsed (their lanes died or stalled) and were reaped."""
        if count <= 0:
            return
        self._send("incr", SINK_LEASES_RECLAIMED, count, _tags(migration, None))
        if self.otel:
            self._leases_reclaimed.add(count, {ATTR_NAME: migration})

    def lease_claimed(self, migration: str, *, shard: str | None = None) -> None:
        """A lane claimed a partition (its lease begins)."""
        self._send("incr", SINK_LEASES_CLAIMED, 1, _tags(migration, shard))
        if self.otel:
            self._leases_claimed.add(1, _attributes(migration, shard))

    def lease_lost(self, migration: str, *, shard: str | None = None) -> None:
        """A lane found its lease reaped or unlocked under it and stopped."""
        self._send("incr", SINK_LEASES_LOST, 1, _tags(migration, shard))
        if self.otel:
            self._leases_lost.add(1, _attributes(migration, shard))


def _attributes(
    migration: str, shard: str | None, more: Mapping[str, AttributeValue] | None = None
) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {ATTR_NAME: migration, **(more or {})}
    if shard is not None:
        attributes[ATTR_SHARD] = shard
    return attributes


def _tags(migration: str, shard: str | None, **more: str) -> dict[str, str]:
    tags = {"migration": migration, **more}
    if shard is not None:
        tags["shard"] = shard
    return tags


#: Telemetry that reports nothing: the default of parts built without a kit.
NO_TELEMETRY: Final = Telemetry(enabled=False)
