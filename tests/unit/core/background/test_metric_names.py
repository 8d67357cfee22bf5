"""The one metric name table against what ships with it: the exporter mapping, the alert
rules, the dashboard and the metrics reference (docs/monitoring/).

Every metric name and label the rules and the dashboard use must be one the code
emits: a name of :data:`~migronaut_core.background.metric_names.METRICS`, mapped
to its Prometheus name by docs/monitoring/statsd-mapping.yml, and one of its tags.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from migronaut_core.background import metric_names
from migronaut_core.background.metric_names import BASE_TAGS, METRICS, Metric
from migronaut_core.background.states import STATUSES
from migronaut_core.background.telemetry import MigrationReadings, Telemetry
from tests.support.telemetry import RecordingSink

MONITORING = Path(__file__).resolve().parents[4] / "docs" / "monitoring"
NAME = re.compile(r"\bmigronaut_[a-z0-9_]+\b")
SELECTOR = re.compile(r"\b(migronaut_[a-z0-9_]+)\s*\{([^}]*)\}")
MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
GROUPING = re.compile(r"\b(?:by|on|without|ignoring)\s*\(([^)]*)\)")
LABEL_VALUES = re.compile(r"label_values\(\s*(migronaut_[a-z0-9_]+)\s*,\s*(\w+)\s*\)")
LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def load_yaml(name: str) -> Any:
    return yaml.safe_load((MONITORING / name).read_text())


def exported() -> dict[str, Metric]:
    """Every series name statsd_exporter exports with the shipped mapping, and its metric."""
    table = metric_names.by_sink_name()
    names: dict[str, Metric] = {}
    for mapping in load_yaml("statsd-mapping.yml")["mappings"]:
        metric = table[mapping["match"].removeprefix("*.")]
        name = mapping["name"]
        suffixes = ("_bucket", "_sum", "_count") if metric.kind == "timer" else ("",)
        names.update({name + suffix: metric for suffix in suffixes})
    return names


def labels_of(series: str, metric: Metric) -> set[str]:
    return {*BASE_TAGS, *metric.tags, *({"le"} if series.endswith("_bucket") else set())}


def problems(expr: str, known: Mapping[str, Metric], legend: str = "") -> list[str]:
    """What in a PromQL expression (and its legend) names no metric or label the code emits."""
    found: list[str] = []
    used = NAME.findall(expr)
    for name in used:
        if name not in known:
            found.append(f"unknown metric {name}")
    for name, matchers in SELECTOR.findall(expr):
        for label in MATCHER.findall(matchers):
            if name in known and label not in labels_of(name, known[name]):
                found.append(f"{name} has no label {label}")
    for name, label in LABEL_VALUES.findall(expr):
        if name in known and label not in labels_of(name, known[name]):
            found.append(f"{name} has no label {label}")
    every = set().union(*(labels_of(name, known[name]) for name in used if name in known))
    grouped = [label.strip() for group in GROUPING.findall(expr) for label in group.split(",")]
    for label in [*grouped, *LEGEND.findall(legend)]:
        if label and label not in every:
            found.append(f"no metric of {sorted(set(used))} has label {label}")
    return found


def rule_texts() -> Iterator[tuple[str, str]]:
    """(where, PromQL) of every rule expression, and the metric names its annotations name."""
    for group in load_yaml("prometheus-rules.yml")["groups"]:
        for rule in group["rules"]:
            yield rule["alert"], rule["expr"]
            for key, text in rule.get("annotations", {}).items():
                names = " ".join(NAME.findall(text))
                yield f"{rule['alert']}.{key}", names
    for test in load_yaml("prometheus-rules.test.yml")["tests"]:
        for series in test["input_series"]:
            yield "prometheus-rules.test.yml", series["series"]


def dashboard_texts() -> Iterator[tuple[str, str, str]]:
    """(where, PromQL, legend) of every panel target and template query."""
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            yield panel["title"], target["expr"], target.get("legendFormat", "")
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            yield f"${variable['name']}", variable["definition"], ""


def test_the_mapping_maps_every_metric_once_with_prometheus_suffixes() -> None:
    mappings = load_yaml("statsd-mapping.yml")["mappings"]
    matched = [mapping["match"].removeprefix("*.") for mapping in mappings]
    assert sorted(matched) == sorted(metric.sink for metric in METRICS)
    for mapping in mappings:
        metric = metric_names.by_sink_name()[mapping["match"].removeprefix("*.")]
        name = mapping["name"]
        assert name.startswith("migronaut_"), name
        if metric.kind == "counter":
            assert name.endswith("_total"), name
        elif metric.kind == "timer":
            assert name.endswith("_seconds"), name  # the exporter turns ms into seconds
        else:
            assert not name.endswith("_total"), name


def test_every_metric_and_label_the_alert_rules_use_is_one_the_code_emits() -> None:
    known = exported()
    texts = list(rule_texts())
    assert len(texts) > 6
    found = [(where, problems(expr, known)) for where, expr in texts]
    assert [(where, errors) for where, errors in found if errors] == []
    alerts = {where for where, _ in texts if "." not in where and where.startswith("Migronaut")}
    assert {
        "MigronautMigrationFailed",
        "MigronautMigrationStalled",
        "MigronautMigrationHeld",
        "MigronautMigrationThrottled",
        "MigronautMigrationPaused",
        "MigronautFailedDocuments",
    } <= alerts


def test_every_metric_and_label_the_dashboard_uses_is_one_the_code_emits() -> None:
    known = exported()
    texts = list(dashboard_texts())
    assert len(texts) > 10
    found = [(where, problems(expr, known, legend)) for where, expr, legend in texts]
    assert [(where, errors) for where, errors in found if errors] == []
    used = {name for _, expr, _ in texts for name in NAME.findall(expr)}
    shown = {known[name].sink for name in used}
    assert {metric.sink for metric in METRICS if metric.kind == "gauge"} <= shown


@pytest.mark.parametrize(
    ("expr", "legend", "problem"),
    [
        (
            'migronaut_migration_stauts{status="failed"} == 1',
            "",
            "unknown metric migronaut_migration_stauts",
        ),
        ("rate(migronaut_lease_claimed[5m])", "", "unknown metric migronaut_lease_claimed"),
        (
            'migronaut_migration_status{state="failed"}',
            "",
            "migronaut_migration_status has no label state",
        ),
        (
            "sum by (shard) (migronaut_migration_done)",
            "",
            "no metric of ['migronaut_migration_done'] has label shard",
        ),
        ("migronaut_health_reading", "{{sigal}}", "has label sigal"),
        (
            "label_values(migronaut_migration_done, status)",
            "",
            "migronaut_migration_done has no label status",
        ),
    ],
)
def test_the_check_catches_a_misspelled_metric_or_label(
    expr: str, legend: str, problem: str
) -> None:
    found = problems(expr, exported(), legend)
    assert any(problem in text for text in found), found


def test_the_check_passes_what_the_code_emits() -> None:
    expr = (
        "histogram_quantile(0.95, sum by (le, migration) (rate("
        'migronaut_batch_duration_seconds_bucket{migration=~"m.*",shard!=""}[5m])))'
    )
    assert problems(expr, exported(), "{{migration}}") == []


def test_the_metrics_reference_lists_every_name_of_the_table_and_of_prometheus() -> None:
    page = (MONITORING / "metrics.md").read_text()
    missing = [
        name for metric in METRICS for name in (metric.sink, metric.otel) if f"`{name}`" not in page
    ]
    mapped = {mapping["name"] for mapping in load_yaml("statsd-mapping.yml")["mappings"]}
    missing += [name for name in mapped if f"`{name}`" not in page]
    assert missing == []


def test_every_name_of_the_table_is_sent_by_the_telemetry() -> None:
    sink = RecordingSink()
    telemetry = Telemetry(enabled=True, sink=sink)
    telemetry.slice_ended("m1", "exhausted", 5.0)
    telemetry.batch_written("m1", size=10, duration_ms=2.0)
    telemetry.transaction_retried("m1", "transient")
    telemetry.throttled("m1", "lag")
    telemetry.lease_claimed("m1")
    telemetry.leases_reclaimed("m1", 1)
    telemetry.lease_lost("m1")
    telemetry.migration_observed(
        MigrationReadings("m1", "users", "running", STATUSES, 1, 2, 0, 1.5, 1, False, False, 0.0)
    )
    telemetry.throttle_observed("m1", batch_size=100, pause_ms=0)
    telemetry.health_read("m1", {"cache_dirty": 0.1})
    kinds = {"incr": "counter", "timing": "timer", "gauge": "gauge"}
    sent = {(name, kinds[kind]) for kind, name, _, _ in sink.sent}
    assert sent == {(metric.sink, metric.kind) for metric in METRICS}
