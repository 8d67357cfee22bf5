"""The UI's JSON API models as the readings build them from the core's views, pinned.

The summaries and details of two status views (every optional field set; a bare
pending one) are compared, keys and order, with what the plugin sent before its
models were built from the views (``from_attributes``) instead of by hand.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection
from datetime import UTC, datetime
from typing import Any, cast

from migronaut_airflow.plugins.models import MigrationDetail, MigrationSummary, Permissions
from migronaut_airflow.plugins.readings import detail, summaries
from migronaut_airflow.plugins.throughput import ThroughputSampler
from migronaut_core import (
    BackgroundStatusView,
    CanaryView,
    HistoryEntry,
    HoldView,
    Migronaut,
    ValidatorView,
    WatchLeader,
    WatchResume,
    WatchStatus,
    WindowView,
)
from tests.support.result_shapes import CASES

STATUS = CASES["status"]
PENDING = dataclasses.replace(CASES["status_unset"], status="pending")
HISTORY: list[dict[str, Any]] = [
    {
        "action": "pause",
        "from": "running",
        "to": "paused",
        "by": "ann",
        "reason": "slo",
        "at": "2026-01-02T03:04:05+00:00",
    },
    {
        "action": "unlock",
        "requested_by": "bob",
        "lock": True,
        "leases": 2,
        "replan": False,
        "reason": "stuck",
        "at": "2026-01-02T03:05:05+00:00",
    },
    {"action": "reopen", "from": "completed", "to": "pending"},
]
WATCH = WatchStatus(
    collection="users",
    state="watching",
    edges=("1->2",),
    target=2,
    leader=WatchLeader(host="h", pid=3, owner="o", since=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
    counters={"healed": 1},
    last_event_at=None,
    last_error=None,
    updated_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
    fresh=True,
    resume=WatchResume(saved=True, at=None, lag_seconds=None),
)


class FakeBackground:
    """``kit.background``'s reads the readings call, answering fixed views."""

    def __init__(self, views: dict[str, BackgroundStatusView]) -> None:
        self.views = views

    def statuses(
        self, *, names: Collection[str], statuses: Collection[str] | None
    ) -> list[BackgroundStatusView]:
        return [
            self.views[name]
            for name in names
            if statuses is None or self.views[name].status in statuses
        ]

    def status(self, name: str) -> BackgroundStatusView | None:
        return self.views.get(name)

    def history(self, name: str) -> list[HistoryEntry]:
        return [HistoryEntry.from_document(entry) for entry in HISTORY]


class FakeDrift:
    """``kit.drift``'s watch status, answering a fixed row."""

    def watch_status(self, collection: str) -> WatchStatus | None:
        return WATCH if collection == "users" else None


class FakeKit:
    """The kit's reads the readings call, answering fixed views."""

    def __init__(self, *views: BackgroundStatusView) -> None:
        self.background = FakeBackground({view.name: view for view in views})
        self.drift = FakeDrift()


def readings() -> tuple[list[MigrationSummary], list[MigrationDetail]]:
    clock = iter([1000.0, 1000.0, 1030.0, 1030.0, 1060.0, 1060.0, 1090.0, 1090.0])
    sampler = ThroughputSampler(clock=lambda: next(clock))
    kit = cast("Migronaut", FakeKit(STATUS, PENDING))
    rows = summaries(kit, [STATUS.name, PENDING.name], None, sampler, "default")
    permissions = Permissions(can_control=True, can_trigger=False)
    shown = [
        detail(kit, STATUS.name, sampler, permissions, "other"),
        detail(kit, PENDING.name, sampler, permissions),
    ]
    return rows, shown


def shown(model: MigrationSummary | MigrationDetail) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True)


def test_summaries_and_details_send_the_pinned_json() -> None:
    rows, details = readings()
    sent = {"summaries": [shown(row) for row in rows], "details": [shown(one) for one in details]}
    assert sent == EXPECTED
    assert json.dumps(sent) == json.dumps(EXPECTED)


def test_a_soaking_validator_shows_its_phase_and_counts() -> None:
    soaking = dataclasses.replace(
        STATUS,
        validator=ValidatorView(
            phase="warn",
            since=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
            clean_passes=1,
            old_shape=2,
            old_shape_seen=5,
        ),
    )
    kit = cast("Migronaut", FakeKit(soaking))
    sampler = ThroughputSampler(clock=lambda: 1000.0)
    (row,) = summaries(kit, [soaking.name], None, sampler, "default")
    assert shown(row)["validator"] == {
        "phase": "warn",
        "since": "2026-01-02T03:04:05+00:00",
        "until": None,
        "clean_passes": 1,
        "old_shape": 2,
        "old_shape_seen": 5,
        "old_shape_at": None,
        "enforced_at": None,
    }


def test_a_canary_awaiting_approval_shows_its_phase_counts_and_checks() -> None:
    awaiting = dataclasses.replace(
        STATUS,
        canary=CanaryView(
            phase="awaiting_approval",
            subset="fraction",
            approval=True,
            fraction=0.1,
            clean_passes=2,
            counts={"old": 0, "new": 120},
            drift=0.0,
            sample={"sampled": 20, "changed": 0, "raised": 0},
        ),
    )
    kit = cast("Migronaut", FakeKit(awaiting))
    sampler = ThroughputSampler(clock=lambda: 1000.0)
    (row,) = summaries(kit, [awaiting.name], None, sampler, "default")
    assert shown(row)["canary"] == {
        "phase": "awaiting_approval",
        "subset": "fraction",
        "approval": True,
        "fraction": 0.1,
        "since": None,
        "until": None,
        "clean_passes": 2,
        "counts": {"old": 0, "new": 120},
        "drift": 0.0,
        "sample": {"sampled": 20, "changed": 0, "raised": 0},
        "checked_at": None,
        "failed": None,
        "approved": None,
        "rejected": None,
    }


EXPECTED: dict[str, Any] = {
    "summaries": [
        {
            "name": "20260101_split",
            "target": "default",
            "dag_id": "migronaut_bg__20260101_split",
            "status": "running",
            "phase": "draining",
            "direction": "forward",
            "mode": "declarative",
            "runs_as": "python",
            "collection": "users",
            "description": "split names",
            "pass": 2,
            "generation": 3,
            "progress": {
                "estimate": 100,
                "at_least": True,
                "approximate": False,
                "done": 40,
                "percent": 40.0,
                "source": "plan",
            },
            "processed": 40,
            "eta_seconds": 12.5,
            "eta_range": None,
            "live_leases": 1,
            "max_parallel": 4,
            "partition_counts": {"running": 1},
            "failed_documents": 2,
            "last_error": "boom",
            "held": None,
            "window": None,
            "validator": None,
            "canary": None,
            "waits_for": ["a"],
            "requires": ["a", "b"],
            "throughput": {
                "docs_per_second": None,
                "average_docs_per_second": 3.2,
                "window_seconds": 600,
                "series": [],
            },
            "created_at": "2026-01-02T03:04:05.678000+00:00",
            "started_at": "2026-01-02T03:04:05+00:00",
            "completed_at": "2026-01-02T03:04:05.678000+00:00",
            "updated_at": "2026-01-02T03:04:05.678000+00:00",
            "last_progress_at": "2026-01-02T03:04:05.678000+00:00",
        },
        {
            "name": "20260101_bare",
            "target": "default",
            "dag_id": "migronaut_bg__20260101_bare",
            "status": "pending",
            "phase": None,
            "direction": "forward",
            "mode": None,
            "runs_as": None,
            "collection": None,
            "description": None,
            "pass": 0,
            "generation": 0,
            "progress": {
                "estimate": 0,
                "at_least": False,
                "approximate": False,
                "done": 0,
                "percent": None,
                "source": "plan",
            },
            "processed": 0,
            "eta_seconds": None,
            "eta_range": None,
            "live_leases": 0,
            "max_parallel": None,
            "partition_counts": {},
            "failed_documents": 0,
            "last_error": None,
            "held": None,
            "window": None,
            "validator": None,
            "canary": None,
            "waits_for": [],
            "requires": [],
            "throughput": {
                "docs_per_second": None,
                "average_docs_per_second": None,
                "window_seconds": 600,
                "series": [],
            },
            "created_at": None,
            "started_at": None,
            "completed_at": None,
            "updated_at": None,
            "last_progress_at": None,
        },
    ],
    "details": [
        {
            "name": "20260101_split",
            "target": "other",
            "dag_id": "migronaut_other__bg__20260101_split",
            "status": "running",
            "phase": "draining",
            "direction": "forward",
            "mode": "declarative",
            "runs_as": "python",
            "collection": "users",
            "description": "split names",
            "pass": 2,
            "generation": 3,
            "progress": {
                "estimate": 100,
                "at_least": True,
                "approximate": False,
                "done": 40,
                "percent": 40.0,
                "source": "plan",
            },
            "processed": 40,
            "eta_seconds": 12.5,
            "eta_range": None,
            "live_leases": 1,
            "max_parallel": 4,
            "partition_counts": {"running": 1},
            "failed_documents": 2,
            "last_error": "boom",
            "held": None,
            "window": None,
            "validator": None,
            "canary": None,
            "waits_for": ["a"],
            "requires": ["a", "b"],
            "throughput": {
                "docs_per_second": None,
                "average_docs_per_second": 3.2,
                "window_seconds": 600,
                "series": [],
            },
            "created_at": "2026-01-02T03:04:05.678000+00:00",
            "started_at": "2026-01-02T03:04:05+00:00",
            "completed_at": "2026-01-02T03:04:05.678000+00:00",
            "updated_at": "2026-01-02T03:04:05.678000+00:00",
            "last_progress_at": "2026-01-02T03:04:05.678000+00:00",
            "totals": {"migrated": 10},
            "plan": {
                "partitioner": "ids",
                "method": None,
                "estimate": 100,
                "at_least": False,
                "approximate": False,
                "degraded": False,
                "sharding": "off",
            },
            "coordinator": {"kind": "airflow", "ref": "run-1", "at": "2026-01-02T03:04:05+00:00"},
            "round": 4,
            "partitions": [
                {
                    "id": "p-1",
                    "index": 0,
                    "status": "running",
                    "scope": {"kind": "ids", "bracket": "objectId", "group": None},
                    "cursor": "moving",
                    "scanned": 7,
                    "counters": {"migrated": 5, "scanned": 7},
                    "failed_documents": 1,
                    "slice_failures": 2,
                    "last_error": "boom",
                    "lease": {
                        "owner": "host:1",
                        "slot": 2,
                        "renewed_at": "2026-01-02T03:04:05+00:00",
                    },
                    "throttle": {"batch_size": 50, "pause_ms": 10},
                    "updated_at": "2026-01-02T03:04:05.678000+00:00",
                },
                {
                    "id": "p-2",
                    "index": None,
                    "status": None,
                    "scope": {"kind": None, "bracket": None, "group": None},
                    "cursor": "start",
                    "scanned": 0,
                    "counters": {},
                    "failed_documents": 0,
                    "slice_failures": 0,
                    "last_error": None,
                    "lease": None,
                    "throttle": None,
                    "updated_at": None,
                },
            ],
            "history": [
                {
                    "action": "pause",
                    "from": "running",
                    "to": "paused",
                    "by": "ann",
                    "reason": "slo",
                    "at": "2026-01-02T03:04:05+00:00",
                    "details": {},
                },
                {
                    "action": "unlock",
                    "from": None,
                    "to": None,
                    "by": "bob",
                    "reason": "stuck",
                    "at": "2026-01-02T03:05:05+00:00",
                    "details": {"lock": True, "leases": 2, "replan": False},
                },
                {
                    "action": "reopen",
                    "from": "completed",
                    "to": "pending",
                    "by": None,
                    "reason": None,
                    "at": None,
                    "details": {},
                },
            ],
            "throttle": {
                "batch_size": 100,
                "pause_ms": 0,
                "max_lag_ms": 500,
                "adaptive": {
                    "min_batch_size": 10,
                    "max_batch_size": None,
                    "increase": None,
                    "decrease": None,
                    "target_latency_ms": None,
                    "max_pause_ms": None,
                },
                "lanes": [{"batch_size": 50, "pause_ms": 10}],
            },
            "drift": {
                "watch": [
                    {
                        "collection": "users",
                        "state": "watching",
                        "edges": ["1->2"],
                        "target": 2,
                        "leader": {
                            "host": "h",
                            "pid": 3,
                            "owner": "o",
                            "since": "2026-01-02T03:04:05+00:00",
                        },
                        "counters": {"healed": 1},
                        "last_event_at": None,
                        "last_error": None,
                        "updated_at": "2026-01-02T03:04:05+00:00",
                        "fresh": True,
                    }
                ],
                "reopened": 1,
            },
            "failure_reasons": [{"reason": "transform", "error": "KeyError"}],
            "permissions": {"can_control": True, "can_trigger": False},
        },
        {
            "name": "20260101_bare",
            "target": "default",
            "dag_id": "migronaut_bg__20260101_bare",
            "status": "pending",
            "phase": None,
            "direction": "forward",
            "mode": None,
            "runs_as": None,
            "collection": None,
            "description": None,
            "pass": 0,
            "generation": 0,
            "progress": {
                "estimate": 0,
                "at_least": False,
                "approximate": False,
                "done": 0,
                "percent": None,
                "source": "plan",
            },
            "processed": 0,
            "eta_seconds": None,
            "eta_range": None,
            "live_leases": 0,
            "max_parallel": None,
            "partition_counts": {},
            "failed_documents": 0,
            "last_error": None,
            "held": None,
            "window": None,
            "validator": None,
            "canary": None,
            "waits_for": [],
            "requires": [],
            "throughput": {
                "docs_per_second": 0.0,
                "average_docs_per_second": None,
                "window_seconds": 600,
                "series": [{"at": "1970-01-01T00:18:10+00:00", "docs_per_second": 0.0}],
            },
            "created_at": None,
            "started_at": None,
            "completed_at": None,
            "updated_at": None,
            "last_progress_at": None,
            "totals": {},
            "plan": None,
            "coordinator": None,
            "round": None,
            "partitions": [],
            "history": [
                {
                    "action": "pause",
                    "from": "running",
                    "to": "paused",
                    "by": "ann",
                    "reason": "slo",
                    "at": "2026-01-02T03:04:05+00:00",
                    "details": {},
                },
                {
                    "action": "unlock",
                    "from": None,
                    "to": None,
                    "by": "bob",
                    "reason": "stuck",
                    "at": "2026-01-02T03:05:05+00:00",
                    "details": {"lock": True, "leases": 2, "replan": False},
                },
                {
                    "action": "reopen",
                    "from": "completed",
                    "to": "pending",
                    "by": None,
                    "reason": None,
                    "at": None,
                    "details": {},
                },
            ],
            "throttle": {
                "batch_size": None,
                "pause_ms": 0,
                "max_lag_ms": None,
                "adaptive": None,
                "lanes": [],
            },
            "drift": {"watch": [], "reopened": 1},
            "failure_reasons": [],
            "permissions": {"can_control": True, "can_trigger": False},
        },
    ],
}


def test_a_migration_waiting_for_a_window_says_so_and_when_it_opens() -> None:
    opens = datetime(2026, 6, 2, 1, 0, tzinfo=UTC)
    waiting = dataclasses.replace(
        STATUS,
        last_error=None,
        held_by=HoldView(None, None, None, None, None, None, reason="window", until=opens),
        window=WindowView(
            source="target", open=False, rate=None, opens_at=opens, closes_at=None, windows=()
        ),
    )
    sampler = ThroughputSampler(clock=lambda: 1000.0)
    kit = cast("Migronaut", FakeKit(waiting))
    (row,) = summaries(kit, [waiting.name], None, sampler, "default")
    one = detail(kit, waiting.name, sampler, Permissions(can_control=True, can_trigger=False))
    for model in (row, one):
        sent = shown(model)
        assert sent["held"] == "waiting for window until 2026-06-02 01:00 UTC"
        assert sent["window"] == {
            "source": "target",
            "open": False,
            "rate": None,
            "opens_at": "2026-06-02T01:00:00+00:00",
            "closes_at": None,
        }
