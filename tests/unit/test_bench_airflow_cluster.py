"""``bench.airflow_cluster``'s arithmetic: hand-offs timed from Airflow's task logs.

The benchmark itself needs a Celery cluster and minutes (docs/performance.md); what
can be wrong without one is reading the lanes' logs and dividing, checked here on
logs written the way Airflow 3 writes them (one JSON object a line).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bench.airflow_cluster import hand_off_phases, per_hand_off, slice_list_arg

DAG_ID = "migronaut_bg__20260101000001_bench_split_names"
T0 = datetime(2026, 12, 3, 18, 0, tzinfo=UTC)


def _line(seconds: float, event: str) -> str:
    stamp = (T0 + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")
    return json.dumps({"timestamp": stamp, "level": "info", "event": event})


def _task_log(events: list[tuple[float, str]]) -> str:
    return "\n".join(_line(seconds, event) for seconds, event in events) + "\n"


def _start(at: float, ready: float) -> list[tuple[float, str]]:
    return [
        (at, "::group::Pre Execute"),
        (at + 0.1, "DAG bundles loaded: dags-folder"),
        (ready - 0.1, "Worker startup parse complete"),
        (ready, "::endgroup::"),
    ]


def _slice_end(at: float) -> list[tuple[float, str]]:
    return [
        (at, "m lane 0: slice yielded ({})"),
        (at + 0.01, "::group::Post Execute"),
        (at + 0.02, "Pausing task as DEFERRED. "),
        (at + 0.2, "::endgroup::"),
    ]


def _write_lane(logs: Path, map_index: int, events: list[tuple[float, str]]) -> Path:
    folder = logs / f"dag_id={DAG_ID}" / "run_id=manual_1" / "task_id=lane"
    folder = folder / f"map_index={map_index}"
    folder.mkdir(parents=True)
    log = folder / "attempt=1.log"
    log.write_text(_task_log(events) + "not json: a line Airflow's own logging wrote\n")
    return log


def test_each_hand_off_is_timed_from_deferring_to_restart_and_to_the_task_running(
    tmp_path: Path,
) -> None:
    # Lane 0: two slices (one hand-off, restarted 3 s after deferring, ready 1 s later).
    lane = _start(0, 1) + _slice_end(30) + _start(33.02, 34.02) + [(60, "m: slice exhausted")]
    log = _write_lane(tmp_path, 0, lane)
    # Airflow keeps the last trigger's log only: it fired 1.5 s after the deferral.
    log.with_name("attempt=1.log.trigger.2.log").write_text(
        _task_log([(31.52, "Trigger fired event")])
    )
    # Lane 1: one slice, no hand-off.
    _write_lane(tmp_path, 1, [*_start(0, 2), (50, "m: slice exhausted")])

    (phase,) = hand_off_phases(tmp_path, DAG_ID)

    assert phase == pytest.approx({"restart": 3.0, "task_start": 1.0, "to_trigger": 1.5})


def test_a_deferral_the_logs_show_no_restart_of_is_left_out(tmp_path: Path) -> None:
    _write_lane(tmp_path, 0, _start(0, 1) + _slice_end(30))

    assert hand_off_phases(tmp_path, DAG_ID) == []


def _row(slices: list[int], phases: list[dict[str, float]]) -> dict[str, Any]:
    return {
        "seconds": 130.0,
        "start_seconds": 12.0,
        "tail_seconds": 6.0,
        "lanes": [{"slices": count} for count in slices],
        "hand_off_phases": phases,
    }


def test_the_time_per_hand_off_divides_the_extra_time_by_a_lane_s_hand_offs() -> None:
    phases = [{"restart": 3.0, "task_start": 1.0}, {"restart": 4.0, "task_start": 2.0}]

    # Lanes of 5 and 3 slices hand off 4 and 2 times: 3 per lane; a lane that
    # claimed nothing (0 slices) is not counted.
    result = per_hand_off(_row([5, 3, 0], phases), engine_seconds=100.0)

    assert result["hand_offs_per_lane"] == 3
    assert result["gross"] == pytest.approx(30.0 / 3)
    assert result["net"] == pytest.approx((30.0 - 18.0) / 3)
    assert result["measured"] == pytest.approx(5.0)
    assert result["to_trigger"] is None
    # Airflow's own: start 12 + tail 6 + 3 hand-offs of 5 s, out of the run's 130 s.
    assert result["airflow_seconds"] == pytest.approx(33.0)
    assert result["equal_speed_ratio"] == pytest.approx(130.0 / 97.0)


def test_no_hand_off_leaves_the_per_hand_off_times_empty() -> None:
    result = per_hand_off(_row([1, 1], []), engine_seconds=100.0)

    assert result["gross"] is None
    assert result["net"] is None
    assert result["measured"] is None


def test_slice_lengths_name_each_cluster_contender() -> None:
    assert slice_list_arg("default, 30000,120000") == [None, 30_000, 120_000]
