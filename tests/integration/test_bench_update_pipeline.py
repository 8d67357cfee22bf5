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

from bench import common, update_pipeline

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


def test_a_scaling_pass_compares_each_contender_at_both_sizes_without_the_slow_loops(
    mongo_uri: str, tmp_path: Path
) -> None:
    out = tmp_path / "scaling.json"
    argv = ["--uri", mongo_uri, "--sizes", f"{DOCS},{2 * DOCS}", "--lanes", "1"]
    argv += ["--skip", "ceiling,ranges,planning", "--json", "--json-out", str(out)]
    assert update_pipeline.main(argv) == 0
    document: dict[str, Any] = json.loads(out.read_text())
    for size in document["sizes"]:
        rows = {row["contender"]: row for row in size["contenders"]}
        assert list(rows) == ["update_many, whole", "engine update x1"]
        assert rows["engine update x1"]["migrated"] == size["docs"]
        assert rows["engine update x1"]["ratio_to_ceiling"] is None
    scaling = {row["contender"]: row for row in document["scaling"]}
    assert list(scaling) == ["update_many, whole", "engine update x1"]
    engine = scaling["engine update x1"]
    assert engine["docs"] == [DOCS, 2 * DOCS]
    assert engine["rate_ratio"] == pytest.approx(engine["docs_per_s"][1] / engine["docs_per_s"][0])
    assert engine["rss_ratio"] > 0
    assert len(engine["rss_growth_mib"]) == 2


def test_the_server_seeds_exactly_the_documents_the_client_would_insert(
    mongo_client: MongoClient[dict[str, Any]],
) -> None:
    db = mongo_client["bench_seed_check"]
    try:
        common.seed(db, 1_234)
        users = db[common.COLLECTION]
        assert users.count_documents({}) == 1_234
        for i in (0, 617, 1_233):
            assert users.find_one({"_id": i}) == common.user(i)
        assert "_v_1__id_1" in users.index_information()
    finally:
        mongo_client.drop_database(db.name)
