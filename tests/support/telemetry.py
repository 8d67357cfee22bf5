"""OpenTelemetry's in-memory exporters, wired into a kit explicitly (never the global providers).

The global providers can be set once per process; each test builds its own
:class:`Captured` and hands its providers to ``Migronaut(tracer_provider=…,
meter_provider=…)`` (``make_kit(..., **captured.providers())``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


@dataclass(frozen=True)
class Point:
    """One metric data point: its attributes and its value (a sum, or a histogram's)."""

    metric: str
    attributes: dict[str, Any]
    value: float
    count: int = 1


@dataclass
class Captured:
    """Spans and metrics of one test, read from in-memory exporters."""

    exporter: InMemorySpanExporter = field(default_factory=InMemorySpanExporter)
    reader: InMemoryMetricReader = field(default_factory=InMemoryMetricReader)

    def __post_init__(self) -> None:
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def providers(self) -> dict[str, Any]:
        return {"tracer_provider": self.tracer_provider, "meter_provider": self.meter_provider}

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if name is None or s.name == name]

    def points(self, metric: str, **attributes: Any) -> list[Point]:
        """The data points of ``metric`` whose attributes include ``attributes`` (cumulative)."""
        return [
            point
            for point in self._read()
            if point.metric == metric
            and all(point.attributes.get(key) == value for key, value in attributes.items())
        ]

    def total(self, metric: str, **attributes: Any) -> float:
        return sum(point.value for point in self.points(metric, **attributes))

    def count(self, metric: str, **attributes: Any) -> int:
        return sum(point.count for point in self.points(metric, **attributes))

    def metric_names(self) -> set[str]:
        return {point.metric for point in self._read()}

    def every_attribute_text(self) -> Iterator[str]:
        """Every key, value and description a span or data point carries, as text."""
        for span in self.spans():
            yield span.name
            yield from _texts(span.attributes)
            yield from _texts(span.resource.attributes)
            yield str(span.status.description or "")
            for event in span.events:
                yield event.name
                yield from _texts(event.attributes)
        for point in self._read():
            yield from _texts(point.attributes)

    def _read(self) -> list[Point]:
        """Collect now; the reader is cumulative, so each read has every total so far."""
        return list(_points_of(self.reader.get_metrics_data()))


def _texts(attributes: Any) -> Iterator[str]:
    for key, value in dict(attributes or {}).items():
        yield str(key)
        yield str(value)


def _points_of(data: Any) -> Iterator[Point]:
    if data is None:
        return
    for resource_metrics in data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                for point in metric.data.data_points:
                    attributes = dict(point.attributes or {})
                    if hasattr(point, "bucket_counts"):
                        yield Point(metric.name, attributes, point.sum, point.count)
                    else:
                        yield Point(metric.name, attributes, point.value)


class RecordingSink:
    """A metrics sink that keeps what it was sent (kind, name, value, tags), or raises
    when told to; thread-safe enough for lanes (a list append)."""

    def __init__(self, *, broken: bool = False) -> None:
        self.sent: list[tuple[str, str, float, dict[str, str]]] = []
        self.broken = broken

    def incr(self, name: str, count: int, tags: Mapping[str, str]) -> None:
        self._keep("incr", name, count, tags)

    def timing(self, name: str, milliseconds: float, tags: Mapping[str, str]) -> None:
        self._keep("timing", name, milliseconds, tags)

    def gauge(self, name: str, value: float, tags: Mapping[str, str]) -> None:
        self._keep("gauge", name, value, tags)

    def _keep(self, kind: str, name: str, value: float, tags: Mapping[str, str]) -> None:
        if self.broken:
            raise ConnectionError("the metrics backend is down")
        self.sent.append((kind, name, value, dict(tags)))

    def last_gauge(self, name: str, **tags: str) -> float | None:
        """The last value sent for the gauge series ``name`` whose tags include ``tags``."""
        values = [
            value
            for kind, sent, value, sent_tags in self.sent
            if kind == "gauge"
            and sent == name
            and all(sent_tags.get(key) == text for key, text in tags.items())
        ]
        return values[-1] if values else None
