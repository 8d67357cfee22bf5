"""migronaut's metrics through Airflow's own metrics backend.

:class:`AirflowStatsSink` is the :class:`~migronaut_core.MetricsSink` the hook gives
every kit it builds: the lanes' slice, batch, retry, throttle and lease metrics and
the migrations' gauges (status, done, remaining, …) go
wherever the deployment sends Airflow's (``[metrics] statsd_on``, ``otel_on``, the
Datadog flavour), under Airflow's ``statsd_prefix``, with its allow and block lists
applied. With metrics off, Airflow's ``Stats`` drops them at no cost.
"""

from __future__ import annotations

from collections.abc import Mapping

from airflow.sdk.observability.stats import Stats


class AirflowStatsSink:
    """Sends migronaut's counters, timers and gauges to ``airflow.sdk.observability.stats.Stats``.

    Tags (``migration``, ``collection``, ``outcome``, ``reason``, ``shard``) reach
    backends that carry them (InfluxDB-style StatsD tags, Datadog, OpenTelemetry);
    plain StatsD receives the names alone.
    """

    def incr(self, name: str, count: int, tags: Mapping[str, str]) -> None:
        Stats.incr(name, count, tags=dict(tags))

    def timing(self, name: str, milliseconds: float, tags: Mapping[str, str]) -> None:
        Stats.timing(name, milliseconds, tags=dict(tags))

    def gauge(self, name: str, value: float, tags: Mapping[str, str]) -> None:
        Stats.gauge(name, value, tags=dict(tags))
