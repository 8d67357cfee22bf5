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
- ``migronaut.background.leases.reclaimed``: leases reaped after their lane died.

Attributes carry migration names, outcomes, reasons, error class names, shard
names, partition ids (migronaut's own ObjectIds) and counts: never a document
value, never an ``_id``, never an error's message.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Final

try:
    from opentelemetry import metrics, trace
    from opentelemetry.trace import Status, StatusCode
except ImportError:  # the `otel` extra is absent: telemetry stays off
    AVAILABLE = False
else:
    AVAILABLE = True

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import Span, TracerProvider

__all__ = [
    "AVAILABLE",
    "NO_TELEMETRY",
    "AttributeValue",
    "SpanAttributes",
    "Telemetry",
]

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
#: OpenTelemetry's own attribute: the class name of what was raised.
ATTR_ERROR_TYPE: Final = "error.type"

METRIC_SLICE_DURATION: Final = "migronaut.background.slice.duration"
METRIC_BATCH_DURATION: Final = "migronaut.background.batch.duration"
METRIC_BATCH_SIZE: Final = "migronaut.background.batch.size"
METRIC_TRANSACTION_RETRIES: Final = "migronaut.background.transaction.retries"
METRIC_THROTTLED: Final = "migronaut.background.throttled"
METRIC_LEASES_RECLAIMED: Final = "migronaut.background.leases.reclaimed"

AttributeValue = str | int | float | bool


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


class Telemetry:
    """The spans and instruments of one kit.

    :param tracer_provider: where spans go (default: the global provider).
    :param meter_provider: where measurements go (default: the global provider).
    :param enabled: False makes every call a no-op, as without ``opentelemetry``.
    """

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        *,
        enabled: bool = True,
    ) -> None:
        self.enabled = enabled and AVAILABLE
        if not self.enabled:
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

    def span(
        self, name: str, migration: str, attributes: Mapping[str, AttributeValue] | None = None
    ) -> AbstractContextManager[SpanAttributes]:
        """A span around a coordinator step or a lease held, current while it is open.

        Something raised inside sets ``error.type`` and outcome ``error`` and
        marks the span failed, without recording the exception's message.
        """
        if not self.enabled:
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
        """A lease's work ended (or a slice failed before its claim: ``error``, 0 ms)."""
        if not self.enabled:
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
        attributes = _attributes(migration, shard)
        self._batch_duration.record(duration_ms, attributes)
        self._batch_size.record(size, attributes)

    def transaction_retried(self, migration: str, reason: str) -> None:
        """A transaction was retried: ``transient``, ``conflict`` or ``time_or_size``."""
        if self.enabled:
            self._transaction_retries.add(1, {ATTR_NAME: migration, ATTR_REASON: reason})

    def throttled(self, migration: str, reason: str, *, shard: str | None = None) -> None:
        """The throttle changed (``overload``, ``latency``, ``recovered``) or waited (``lag``)."""
        if self.enabled:
            self._throttled.add(1, _attributes(migration, shard, {ATTR_REASON: reason}))

    def leases_reclaimed(self, migration: str, count: int) -> None:
        """``count`` leases lapsed (their lanes died or stalled) and were reaped."""
        if self.enabled and count > 0:
            self._leases_reclaimed.add(count, {ATTR_NAME: migration})


def _attributes(
    migration: str, shard: str | None, more: Mapping[str, AttributeValue] | None = None
) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {ATTR_NAME: migration, **(more or {})}
    if shard is not None:
        attributes[ATTR_SHARD] = shard
    return attributes


#: Telemetry that reports nothing: the default of parts built without a kit.
NO_TELEMETRY: Final = Telemetry(enabled=False)
