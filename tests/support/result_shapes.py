"""Instances of every result type the kit returns, with optional fields set and unset.

What the JSON pins (``tests/unit/test_json_shapes.py``) and the UI's model pins
(``tests/airflow/plugins/test_models.py``) are built from.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from bson import ObjectId

from migronaut_core.audit import Finding
from migronaut_core.background.control.actions import ControlResult
from migronaut_core.background.coordinator import Answer
from migronaut_core.background.dry_run.report import DocumentPreview, DryRunReport, StepDryRunReport
from migronaut_core.background.failed import FailedDocument, FailedDocumentsView
from migronaut_core.background.indexes.converge import ConvergeReport, IndexReport
from migronaut_core.background.indexes.prune import PruneReport
from migronaut_core.background.lanes.lane import SliceResult
from migronaut_core.background.store.partitions import PartitionCounts
from migronaut_core.background.throttle.adaptive import ThrottleChange
from migronaut_core.background.views import (
    BackgroundStatusView,
    DocumentError,
    LanePacing,
    LeaseView,
    PacingView,
    PartitionView,
    ProgressView,
)
from migronaut_core.baseline import BaselineResult
from migronaut_core.definitions import Versioning
from migronaut_core.errors import LockAlreadyHeldError, MigrationFailedError
from migronaut_core.lock import LockInfo
from migronaut_core.preview import PlannedMigration, RunPlan
from migronaut_core.required_indexes import RequiredIndex
from migronaut_core.runner import MigrationResult, RunResult, StatusRow

UTC_TIME = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
OFFSET_TIME = datetime(2026, 1, 2, 5, 4, 5, tzinfo=timezone(timedelta(hours=2)))
NAIVE_TIME = datetime(2026, 1, 2, 3, 4, 5)

PROGRESS = ProgressView(
    estimate=100, at_least=True, approximate=False, done=40, percent=40.0, source="plan"
)
LEASE = LeaseView(owner="host:1", slot=2, renewed_at=OFFSET_TIME)
PARTITION = PartitionView(
    id="p-1",
    generation=3,
    index=0,
    status="running",
    scope={"kind": "ids", "bracket": "objectId", "min": "a", "max": "b"},
    group="shard0",
    cursor={"_id": "a1"},
    counters={"migrated": 5, "scanned": 7},
    failed_documents=1,
    slice_failures=2,
    last_error="boom",
    lease=LEASE,
    updated_at=UTC_TIME,
    pacing=LanePacing(batch_size=50, pause_ms=10),
    document_errors=(DocumentError(reason="transform", error="KeyError"),),
)
BARE_PARTITION = PartitionView(
    id="p-2",
    generation=None,
    index=None,
    status=None,
    scope=None,
    group=None,
    cursor=None,
    counters={},
    failed_documents=0,
    slice_failures=0,
    last_error=None,
    lease=None,
    updated_at=None,
    pacing=None,
    document_errors=(),
)
STATUS = BackgroundStatusView(
    name="20260101_split",
    status="running",
    phase="draining",
    direction="forward",
    mode="declarative",
    runs_as="python",
    collection="users",
    description="split names",
    pass_number=2,
    generation=3,
    progress=PROGRESS,
    eta_seconds=12.5,
    average_docs_per_second=3.2,
    totals={"migrated": 10},
    partition_counts={"running": 1},
    live_leases=1,
    failed_documents=2,
    failed_document_samples=({"id": "x", "reason": "transform", "error": "KeyError"},),
    last_error="boom",
    waits_for=("a",),
    requires=("a", "b"),
    coordinator={"kind": "airflow", "ref": "run-1", "at": "2026-01-02T03:04:05+00:00"},
    round=4,
    plan={"estimate": 100, "partitioner": "ids"},
    sharding={"mode": "off"},
    created_at=UTC_TIME,
    started_at=OFFSET_TIME,
    pass_started_at=UTC_TIME,
    completed_at=UTC_TIME,
    failed_at=UTC_TIME,
    updated_at=UTC_TIME,
    last_progress_at=UTC_TIME,
    max_parallel=4,
    pacing=PacingView(batch_size=100, pause_ms=0, max_lag_ms=500, adaptive={"min_batch_size": 10}),
    partitions=(PARTITION, BARE_PARTITION),
    pass_failed_documents=1,
    document_errors=(DocumentError(reason="transform", error="KeyError"),),
)
BARE_STATUS = BackgroundStatusView(
    name="20260101_bare",
    status=None,
    phase=None,
    direction="forward",
    mode=None,
    runs_as=None,
    collection=None,
    description=None,
    pass_number=0,
    generation=0,
    progress=ProgressView(estimate=0, at_least=False, approximate=False, done=0, percent=None),
    eta_seconds=None,
    average_docs_per_second=None,
    totals={},
    partition_counts={},
    live_leases=0,
    failed_documents=0,
    failed_document_samples=(),
    last_error=None,
    waits_for=(),
    requires=(),
    coordinator=None,
    round=None,
    plan={},
    sharding=None,
    created_at=None,
    started_at=None,
    pass_started_at=None,
    completed_at=None,
    failed_at=None,
    updated_at=None,
    last_progress_at=None,
    max_parallel=None,
    pacing=PacingView(batch_size=None, pause_ms=0, max_lag_ms=None, adaptive=None),
    partitions=(),
    pass_failed_documents=0,
    document_errors=(),
)
REFUSAL = LockAlreadyHeldError("the run lock is held", {"lock": "migrations"})

CASES: dict[str, Any] = {
    "progress": PROGRESS,
    "lease": LEASE,
    "lease_unset": LeaseView(owner=None, slot=None, renewed_at=None),
    "partition": PARTITION,
    "partition_unset": BARE_PARTITION,
    "status": STATUS,
    "status_unset": BARE_STATUS,
    "lock_aware": LockInfo(
        name="migrations",
        token=7,
        host="h",
        pid=12,
        requested_by="ann",
        acquired_at=OFFSET_TIME,
        expires_at=UTC_TIME,
        held=True,
    ),
    "lock_naive": LockInfo(
        name="migrations",
        token=0,
        host=None,
        pid=None,
        requested_by=None,
        acquired_at=None,
        expires_at=NAIVE_TIME,
        held=False,
    ),
    "planned": PlannedMigration(
        name="20260101_a",
        kind="background",
        action="register",
        requires=("x",),
        waits_for=({"migration": "x", "status": "running"},),
        refusal=REFUSAL,
    ),
    "planned_unset": PlannedMigration(name="20260101_b", kind="regular", action="apply"),
    "run_plan": RunPlan(
        direction="up",
        migrations=(PlannedMigration(name="a", kind="regular", action="apply"),),
        refusal=REFUSAL,
    ),
    "run_plan_unset": RunPlan(direction="down", migrations=()),
    "required_index": RequiredIndex(
        collection="c",
        key=(("a", 1), ("_id", -1)),
        name="a_1",
        unique=True,
        partial={"a": {"$exists": True}},
    ),
    "required_index_unset": RequiredIndex(collection="c", key=(("a", 1),)),
    "migration_result": MigrationResult(
        name="a", kind="background", status="applied", duration_ms=12, details={"generation": 1}
    ),
    "migration_result_unset": MigrationResult(
        name="a", kind="regular", status="applied", duration_ms=0
    ),
    "run_result": RunResult(
        run_id="r",
        direction="up",
        migrations=(MigrationResult(name="a", kind="regular", status="applied", duration_ms=1),),
        stopped_at="b",
    ),
    "run_result_unset": RunResult(run_id="r", direction="down", migrations=()),
    "status_row": StatusRow(
        name="a",
        status="applied",
        applied_at="2026-01-02T03:04:05+00:00",
        checksum_ok=False,
        kind="regular",
        description="d",
        file_missing=True,
        last_error={"code": "X"},
        adopted=True,
    ),
    "status_row_unset": StatusRow(
        name="a", status="pending", applied_at=None, checksum_ok=None, kind=None, description=None
    ),
    "baseline": BaselineResult(run_id="r", to="b", adopted=("a", "b"), already_applied=("z",)),
    "answer": Answer(
        next="process",
        status="running",
        lanes=2,
        retry_after_ms=100,
        reason="planned",
        generation=3,
        plan="tok",
        counts={"pending": 2},
        round=1,
        waits_for=["x"],
        error="boom",
    ),
    "answer_unset": Answer(next="done"),
    "answer_empty_counts": Answer(next="wait", counts={}),
    "slice": SliceResult(
        outcome="deferred",
        counters={"migrated": 3},
        retry_after_ms=50,
        error="e",
        reason="checksum_mismatch",
        checksums={"registered": "abc", "on_disk": "def"},
    ),
    "slice_unset": SliceResult(outcome="exhausted"),
    "throttle_change": ThrottleChange(reason="latency", batch_size=10, pause_ms=5),
    "control": ControlResult(
        applied="changed",
        status="running",
        replan=False,
        stopped=True,
        lock=False,
        leases=0,
        failed=4,
        may_run=True,
    ),
    "control_unset": ControlResult(applied="unchanged", status="paused"),
    "document_preview": DocumentPreview(
        id=ObjectId("65a1b2c3d4e5f60718293a4b"),
        set_fields=("a", "_v"),
        unset_fields=("b",),
        changed=True,
    ),
    "document_preview_failed": DocumentPreview(id=UTC_TIME, error="KeyError", reason="transform"),
    "dry_run": DryRunReport(
        migration="m",
        collection="c",
        direction="forward",
        status=None,
        file_changed=True,
        method="first",
        size=3,
        validate=True,
        estimate=None,
        at_least=False,
        documents=(
            DocumentPreview(id=1, set_fields=("a",), changed=True),
            DocumentPreview(id=2, error="e", reason="shape"),
            DocumentPreview(id=3),
        ),
    ),
    "step_dry_run": StepDryRunReport(
        migration="m",
        direction="forward",
        status="running",
        from_checkpoint=True,
        steps=({"done": False, "total": 3},),
    ),
    "index_report": IndexReport(
        collection="c",
        action="created",
        index={"_v": 1, "_id": 1},
        name="_v_1__id_1",
        sharding="shard",
        note="why",
    ),
    "index_report_unset": IndexReport(collection="c", action="skipped"),
    "prune_report": PruneReport(
        collection="c", name="n", index={"_v": 1}, action="kept", note="declared"
    ),
    "prune_report_unset": PruneReport(collection="c", name="n", index={"_v": 1}, action="dropped"),
    "converge": ConvergeReport(
        collections=(
            IndexReport(collection="c", action="created", index={"_v": 1}, name="n"),
            IndexReport(collection="d", action="exists", note="x"),
        ),
        pruned=(PruneReport(collection="c", name="n", index={"_v": 1}, action="dropped"),),
    ),
    "converge_unset": ConvergeReport(collections=()),
    "partition_counts": PartitionCounts(
        pending=1, running=2, leased=3, done=4, failed=5, cancelled=6, superseded=7
    ),
    "versioning": Versioning(field="_v", revision_field="rev"),
    "versioning_unset": Versioning(),
    "finding": Finding(
        kind="lock_stale", migration="m", collection=None, message="msg", severity="warning"
    ),
    "error": MigrationFailedError("failed", {"migration": "m"}),
    "failed_documents": FailedDocumentsView(
        name="m",
        status="completed",
        total=3,
        offset=1,
        limit=2,
        retrying=True,
        documents=(
            FailedDocument(
                id=7,
                reason="write",
                code=11000,
                error="duplicate key on index email_1 (code 11000)",
                generation=2,
                at=UTC_TIME,
                retrying=True,
            ),
            FailedDocument(
                id='{"$oid": "65a1b2c3d4e5f60718293a4b"}',
                reason=None,
                code=None,
                error=None,
                generation=None,
                at=None,
            ),
        ),
    ),
}
