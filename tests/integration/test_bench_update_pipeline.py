"""``bench.update_pipeline`` at a tiny size: every contender rewrites every document.

A smoke test of the harness, not a measurement: the figures come from running the
benchmark itself (docs/performance.md). Each contender checks that it modified every
document, so a broken contender fails here instead of printing a fast figure.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from bench import update_pipeline

DOCS = 3_000


@pytest.fixture(scope="module")
def report(mongo_uri: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("bench") / "update_pipeline.json"
    argv = ["--uri", mongo_uri, "--sizes", f"{DOCS}", "--ranges", "500,2000"]
    argv += ["--lanes", "1,2", "--repeat", "1", "--json", "--json-out", str(out)]
    assert update_pipeline.main(argv) == 0
    document: dict[str, Any] = json.loads(Path(out).read_text())
    return document


def test_every_contender_rewrites_every_document_with_ratios_to_both_bases(
    report: dict[str, Any],
) -> None:
    (size,) = report["sizes"]
    rows = {row["contender"]: row for row in size["contenders"]}
    assert list(rows) == [
        "client ceiling",
        "update_many, whole",
        "update_many, ranges of 500",
        "update_many, ranges of 2,000",
        "engine update x1",
        "engine update x2",
    ]
    assert all(row["docs"] == DOCS and row["docs_per_s"] > 0 for row in rows.values())
    assert rows["update_many, whole"]["ratio_to_update_many"] == pytest.approx(1.0)
    assert rows["client ceiling"]["ratio_to_ceiling"] == pytest.approx(1.0)
    engine = rows["engine update x2"]
    assert engine["mode"] == "update"
    assert engine["migrated"] == DOCS
    assert size["best_engine_ratio_1_or_2_lanes"] == max(
        rows["engine update x1"]["ratio_to_update_many"],
        rows["engine update x2"]["ratio_to_update_many"],
    )


def test_planning_rows_compare_both_modes_on_the_same_data(report: dict[str, Any]) -> None:
    (plan,) = report["planning"]
    assert plan["docs"] == DOCS
    assert plan["python_ms"] > 0 and plan["update_ms"] > 0
    assert plan["update_partitions"] >= 1


def test_the_harness_leaves_no_database_behind(
    report: dict[str, Any], mongo_client: MongoClient[dict[str, Any]]
) -> None:
    assert not [name for name in mongo_client.list_database_names() if name.startswith("bench_")]
