"""migronaut: online, resumable MongoDB schema migrations.

The public API is :class:`Migronaut` (the kit, with its namespaces
:class:`Runs`, :class:`Background` and :class:`Drift`), :func:`load_config`, the error
hierarchy in :mod:`migronaut_core.errors`, and the result types the kit returns
(re-exported here so callers need not know the modules they live in), and
:func:`next_drift_signal` and :func:`next_stall_signal`, the async waits for
drift and for a stalled migration an event-driven scheduler's triggers run
(Airflow's ``AssetWatcher``). A scheduler's skin (the Airflow provider) also
finds here what it shows and waits on: the control actions' guides, the
statuses, the lanes' reads and their wait verdicts. It imports nothing else of
the core but :mod:`migronaut_core.errors` (an import contract says so).
Importing this package never imports Airflow.
"""

from __future__ import annotations

from migronaut_core.audit import Finding
from migronaut_core.background.canary import AWAITING_APPROVAL as CANARY_AWAITING_APPROVAL
from migronaut_core.background.canary import CanaryContext
from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.control.actions import (
    CONTROL_ACTIONS,
    CONTROL_GUIDES,
    ControlAction,
    ControlGuide,
    ControlResult,
    check_control,
)
from migronaut_core.background.control.brake import (
    BRAKE_ACTIONS,
    BrakeAction,
    BrakeLogEntry,
    BrakeView,
    parse_until,
)
from migronaut_core.background.coordinator import STALL_SECONDS, Answer, Driver, NextStep
from migronaut_core.background.drift.events import (
    DriftEventSettings,
    DriftSignal,
    drift_event_settings,
    next_drift_signal,
)
from migronaut_core.background.dry_run import DryRunReport, StepDryRunReport
from migronaut_core.background.estimate import BudgetView, MigrationEstimate, SampledCosts
from migronaut_core.background.eta import EtaRange
from migronaut_core.background.failed import FailedDocument, FailedDocumentsView
from migronaut_core.background.gate import MILESTONES as BACKGROUND_MILESTONES
from migronaut_core.background.gate import GateVerdict, Milestone, WaitResult, judge_gate
from migronaut_core.background.indexes import ConvergeReport, PruneReport
from migronaut_core.background.lanes.lane import LaneBinding, SliceOutcome, SliceResult
from migronaut_core.background.lanes.waiting import REASONS as LANE_WAIT_REASONS
from migronaut_core.background.lanes.waiting import LanesWatch
from migronaut_core.background.stalls import (
    StallSignal,
    StallWatchSettings,
    next_stall_signal,
    stall_watch_settings,
)
from migronaut_core.background.states import STATUSES as BACKGROUND_STATUSES
from migronaut_core.background.states import Status as BackgroundStatus
from migronaut_core.background.store.gate import GateSnapshot, read_gate, read_gate_async
from migronaut_core.background.store.lanes import read_lanes, read_lanes_async
from migronaut_core.background.telemetry import MetricsSink
from migronaut_core.background.throttle.health import HealthBreach
from migronaut_core.background.views import (
    BackgroundStatusView,
    CanaryView,
    DocumentError,
    HoldView,
    LanePacing,
    PartitionView,
    ValidatorView,
    WindowView,
)
from migronaut_core.baseline import BaselineResult
from migronaut_core.bson_values import iso_time
from migronaut_core.catalog import (
    CatalogEntry,
    MigrationCatalog,
    RejectedFile,
    default_cache_dir,
    ensure_private_folder,
    read_catalog,
)
from migronaut_core.changelog import MAX_REASON_LENGTH, Actor
from migronaut_core.checks import check_int
from migronaut_core.config import (
    DEFAULT_BACKGROUND_COLLECTION,
    BackgroundCollections,
    Config,
    config_from_text,
    load_config,
)
from migronaut_core.errors import (
    BackgroundConflictError,
    BackgroundFailedError,
    BackgroundPendingError,
    BaselineConflictError,
    ChecksumMismatchError,
    ConfigInvalidError,
    ConnectionFailedError,
    DryRunRefusedError,
    IndexMissingError,
    IrreversibleMigrationError,
    LockAlreadyHeldError,
    LockLostError,
    MigrationFailedError,
    MigrationFileNotFoundError,
    MigrationInvalidExportError,
    MigrationInvalidNameError,
    MigronautError,
    NotAppliedError,
    PrivilegeMissingError,
    RunAbortedError,
    TransactionsUnsupportedError,
    UndoUnavailableError,
)
from migronaut_core.kit import Background, Drift, Migronaut, Runs
from migronaut_core.kit.results import (
    ConvergeLogEntry,
    DriftFinding,
    HistoryEntry,
    RunnableMigration,
    VerifyReport,
    WatchLeader,
    WatchResume,
    WatchStatus,
)
from migronaut_core.preview import PlannedMigration, RunPlan
from migronaut_core.runner import MigrationContext, RunOptions, RunResult, StatusRow
from migronaut_core.scrub import redact_uri

__version__ = "0.1.0"

__all__ = [
    "BACKGROUND_MILESTONES",
    "BACKGROUND_STATUSES",
    "BRAKE_ACTIONS",
    "CANARY_AWAITING_APPROVAL",
    "CONTROL_ACTIONS",
    "CONTROL_GUIDES",
    "DEFAULT_BACKGROUND_COLLECTION",
    "LANE_WAIT_REASONS",
    "MAX_REASON_LENGTH",
    "STALL_SECONDS",
    "Actor",
    "Answer",
    "Background",
    "BackgroundCollections",
    "BackgroundConflictError",
    "BackgroundFailedError",
    "BackgroundPendingError",
    "BackgroundStatus",
    "BackgroundStatusView",
    "BaselineConflictError",
    "BaselineResult",
    "BrakeAction",
    "BrakeLogEntry",
    "BrakeView",
    "BudgetView",
    "CanaryContext",
    "CanaryView",
    "CancelToken",
    "CatalogEntry",
    "ChecksumMismatchError",
    "Config",
    "ConfigInvalidError",
    "ConnectionFailedError",
    "ControlAction",
    "ControlGuide",
    "ControlResult",
    "ConvergeLogEntry",
    "ConvergeReport",
    "DocumentError",
    "Drift",
    "DriftEventSettings",
    "DriftFinding",
    "DriftSignal",
    "Driver",
    "DryRunRefusedError",
    "DryRunReport",
    "EtaRange",
    "FailedDocument",
    "FailedDocumentsView",
    "Finding",
    "GateSnapshot",
    "GateVerdict",
    "HealthBreach",
    "HistoryEntry",
    "HoldView",
    "IndexMissingError",
    "IrreversibleMigrationError",
    "LaneBinding",
    "LanePacing",
    "LanesWatch",
    "LockAlreadyHeldError",
    "LockLostError",
    "MetricsSink",
    "MigrationCatalog",
    "MigrationContext",
    "MigrationEstimate",
    "MigrationFailedError",
    "MigrationFileNotFoundError",
    "MigrationInvalidExportError",
    "MigrationInvalidNameError",
    "Migronaut",
    "MigronautError",
    "Milestone",
    "NextStep",
    "NotAppliedError",
    "PartitionView",
    "PlannedMigration",
    "PrivilegeMissingError",
    "PruneReport",
    "RejectedFile",
    "RunAbortedError",
    "RunOptions",
    "RunPlan",
    "RunResult",
    "RunnableMigration",
    "Runs",
    "SampledCosts",
    "SliceOutcome",
    "SliceResult",
    "StallSignal",
    "StallWatchSettings",
    "StatusRow",
    "StepDryRunReport",
    "TransactionsUnsupportedError",
    "UndoUnavailableError",
    "ValidatorView",
    "VerifyReport",
    "WaitResult",
    "WatchLeader",
    "WatchResume",
    "WatchStatus",
    "WindowView",
    "check_control",
    "check_int",
    "config_from_text",
    "default_cache_dir",
    "drift_event_settings",
    "ensure_private_folder",
    "iso_time",
    "judge_gate",
    "load_config",
    "next_drift_signal",
    "next_stall_signal",
    "parse_until",
    "read_catalog",
    "read_gate",
    "read_gate_async",
    "read_lanes",
    "read_lanes_async",
    "redact_uri",
    "stall_watch_settings",
]
