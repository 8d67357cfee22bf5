"""migronaut: online, resumable MongoDB schema migrations.

The public API is :class:`Migronaut` (the kit), :func:`load_config`, the error
hierarchy in :mod:`migronaut_core.errors`, and the result types the kit returns
(re-exported here so callers need not know the modules they live in), and
:func:`next_drift_signal` and :func:`next_stall_signal`, the async waits for
drift and for a stalled migration an event-driven scheduler's triggers run
(Airflow's ``AssetWatcher``).
Importing this package never imports Airflow.
"""

from __future__ import annotations

from migronaut_core.audit import Finding
from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.control.actions import (
    CONTROL_ACTIONS,
    ControlAction,
    ControlResult,
)
from migronaut_core.background.coordinator import STALL_SECONDS, Answer, Driver, NextStep
from migronaut_core.background.drift.events import (
    DriftEventSettings,
    DriftSignal,
    drift_event_settings,
    next_drift_signal,
)
from migronaut_core.background.dry_run import DryRunReport, StepDryRunReport
from migronaut_core.background.indexes import ConvergeReport, PruneReport
from migronaut_core.background.lanes.lane import SliceOutcome, SliceResult
from migronaut_core.background.stalls import (
    StallSignal,
    StallWatchSettings,
    next_stall_signal,
    stall_watch_settings,
)
from migronaut_core.background.telemetry import MetricsSink
from migronaut_core.background.views import BackgroundStatusView, PartitionView
from migronaut_core.baseline import BaselineResult
from migronaut_core.catalog import (
    CatalogEntry,
    MigrationCatalog,
    RejectedFile,
    default_cache_dir,
    ensure_private_folder,
    read_catalog,
)
from migronaut_core.changelog import Actor
from migronaut_core.config import Config, config_from_text, load_config
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
    RunAbortedError,
    TransactionsUnsupportedError,
)
from migronaut_core.kit import Migronaut
from migronaut_core.preview import PlannedMigration, RunPlan
from migronaut_core.runner import MigrationContext, RunOptions, RunResult, StatusRow

__version__ = "0.1.0"

__all__ = [
    "CONTROL_ACTIONS",
    "STALL_SECONDS",
    "Actor",
    "Answer",
    "BackgroundConflictError",
    "BackgroundFailedError",
    "BackgroundPendingError",
    "BackgroundStatusView",
    "BaselineConflictError",
    "BaselineResult",
    "CancelToken",
    "CatalogEntry",
    "ChecksumMismatchError",
    "Config",
    "ConfigInvalidError",
    "ConnectionFailedError",
    "ControlAction",
    "ControlResult",
    "ConvergeReport",
    "DriftEventSettings",
    "DriftSignal",
    "Driver",
    "DryRunRefusedError",
    "DryRunReport",
    "Finding",
    "IndexMissingError",
    "IrreversibleMigrationError",
    "LockAlreadyHeldError",
    "LockLostError",
    "MetricsSink",
    "MigrationCatalog",
    "MigrationContext",
    "MigrationFailedError",
    "MigrationFileNotFoundError",
    "MigrationInvalidExportError",
    "MigrationInvalidNameError",
    "Migronaut",
    "MigronautError",
    "NextStep",
    "NotAppliedError",
    "PartitionView",
    "PlannedMigration",
    "PruneReport",
    "RejectedFile",
    "RunAbortedError",
    "RunOptions",
    "RunPlan",
    "RunResult",
    "SliceOutcome",
    "SliceResult",
    "StallSignal",
    "StallWatchSettings",
    "StatusRow",
    "StepDryRunReport",
    "TransactionsUnsupportedError",
    "config_from_text",
    "default_cache_dir",
    "drift_event_settings",
    "ensure_private_folder",
    "load_config",
    "next_drift_signal",
    "next_stall_signal",
    "read_catalog",
    "stall_watch_settings",
]
