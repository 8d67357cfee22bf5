"""The UI's readings of progress: a step migration's ``total`` (done of total, percent, ETA)
and a running pass's ETA range."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pymongo.database import Database

from migronaut_airflow.plugins.models import Permissions
from migronaut_airflow.plugins.readings import detail, summaries
from migronaut_airflow.plugins.throughput import ThroughputSampler
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.steps import COUNTED_STEPS


def test_the_list_and_the_detail_show_a_step_total(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    db.orders.insert_many([{"_id": i} for i in range(40)])
    migrations = tmp_path / "migrations"
    write_background(migrations, body=COUNTED_STEPS)
    sampler = ThroughputSampler()
    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up()
        kit.background.coordinate(SPLIT_NAME)
        kit.background.run_slice(SPLIT_NAME, slice_ms=100)
        (row,) = summaries(kit, [SPLIT_NAME], None, sampler)
        shown = detail(kit, SPLIT_NAME, sampler, Permissions(can_control=False, can_trigger=False))
    for reading in (row, shown):
        assert reading.progress.source == "step"
        assert (reading.processed, reading.progress.estimate) == (10, 40)
        assert reading.progress.percent == 25.0
        assert reading.eta_seconds is not None
        assert reading.eta_seconds > 0
        assert reading.eta_range is None  # the range counts documents against a plan


def test_the_list_and_the_detail_show_a_running_passs_eta_range(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    seed_users(db, 2_000)
    migrations = tmp_path / "migrations"
    write_background(migrations, batch_size=50, max_parallel=1, per_document_seconds=0.002)
    sampler = ThroughputSampler()
    with make_kit(mongo_uri, db, migrations) as kit:
        kit.runs.up()
        kit.background.coordinate(SPLIT_NAME)
        kit.background.run_slice(SPLIT_NAME, slice_ms=300)
        (row,) = summaries(kit, [SPLIT_NAME], None, sampler)
        shown = detail(kit, SPLIT_NAME, sampler, Permissions(can_control=False, can_trigger=False))
    for reading in (row, shown):
        assert reading.eta_range is not None
        low, high = reading.eta_range.low_seconds, reading.eta_range.high_seconds
        assert low is not None and high is not None and reading.eta_range.seconds is not None
        assert 0 < low < reading.eta_range.seconds < high
    assert set(row.model_dump()["eta_range"]) == {"low_seconds", "seconds", "high_seconds"}
