"""DAG factories: one DAG per background migration, plus the drift, control and up DAGs.

Building a DAG reads no database and imports no migration: background migration
files are found by parsing their source (a module-level ``background = …``), so
a DAG file stays fast to parse and safe when MongoDB is down.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Mapping
from dataclasses import InitVar, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, TypedDict

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG, BaseOperator, Param, XComArg
from airflow.sdk.definitions.mappedoperator import MappedOperator

from migronaut_airflow.hooks.migronaut import (
    MIGRATIONS_DIR_ENV,
    MigronautHook,
    mongo_conn_id_from,
)
from migronaut_airflow.operators.background import (
    BackgroundControlOperator,
    BackgroundLaneOperator,
    ContinueBackgroundOperator,
    CoordinateBackgroundOperator,
    HealBackgroundOperator,
    MigrationsUpOperator,
    VerifyDriftOperator,
    dag_id_for,
)
from migronaut_airflow.sensors.lanes import BackgroundLanesSensor
from migronaut_core import CONTROL_ACTIONS, files

TAGS = ["migronaut"]
#: Lanes run before the sensor that waits for them (``dag.test()`` runs one task at a time).
LANE_PRIORITY = 100
SENSOR_PRIORITY = 1


def background_migration_names(migrations_dir: str | os.PathLike[str]) -> list[str]:
    """Names of the background migration files in ``migrations_dir``, without importing them."""
    names = []
    for file in files.discover(Path(migrations_dir)):
        try:
            tree = ast.parse(file.path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue  # `migronaut up` reports it; a DAG file must still parse
        if any(_assigns_background(node) for node in tree.body):
            names.append(file.name)
    return names


def _assigns_background(node: ast.stmt) -> bool:
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == "background" for t in node.targets)
    if isinstance(node, ast.AnnAssign):
        return isinstance(node.target, ast.Name) and node.target.id == "background"
    return False


class OperatorArgs(TypedDict):
    """The connection and config keywords every migronaut operator takes."""

    mongo_conn_id: str
    migrations_dir: str
    database: str | None
    migronaut_config: dict[str, Any]


class Retries(TypedDict):
    """``retries`` and ``retry_delay`` of a task."""

    retries: int
    retry_delay: timedelta


@dataclass(frozen=True)
class Target:
    """Where the DAGs' tasks work: a ``mongo`` connection, the migrations, config keys.

    :param migrations_dir: the migration files, as the workers see them.
    :param mongo_conn_id: a ``mongo`` connection; its schema is the database.
    :param database: overrides the connection's schema.
    :param migronaut_config: further migronaut config keys (``lock_ttl_seconds``, …).
    :param conn_id: deprecated name of ``mongo_conn_id`` (not kept as a field).
    """

    migrations_dir: str
    mongo_conn_id: str = MigronautHook.default_conn_name
    database: str | None = None
    migronaut_config: Mapping[str, Any] = field(default_factory=dict)
    conn_id: InitVar[str | None] = None

    def __post_init__(self, conn_id: str | None) -> None:
        if conn_id is not None:
            object.__setattr__(
                self, "mongo_conn_id", mongo_conn_id_from(self.mongo_conn_id, conn_id)
            )

    def operator_args(self) -> OperatorArgs:
        return {
            "mongo_conn_id": self.mongo_conn_id,
            "migrations_dir": self.migrations_dir,
            "database": self.database,
            "migronaut_config": dict(self.migronaut_config),
        }


def _trigger_dags(task_id: str, upstream: BaseOperator, reason: str) -> MappedOperator:
    """Start the DAGs an upstream task returned (none: the mapped task is skipped)."""
    return TriggerDagRunOperator.partial(
        task_id=task_id, conf={"reason": reason}, skip_when_already_exists=True
    ).expand(trigger_dag_id=upstream.output)


def background_dag(
    migration: str,
    target: Target,
    *,
    slice_ms: int | None = None,
    lane_max_slices: int | None = None,
    lane_retries: int = 3,
    lane_retry_delay: timedelta = timedelta(seconds=10),
    sensor_timeout: timedelta = timedelta(hours=24),
    no_lease_grace_seconds: float = 60.0,
    poll_interval: float = 5.0,
) -> DAG:
    """The DAG of one background migration: a run is one coordinator round.

    ``coordinate`` → mapped ``lane`` tasks (one per claimable slot) and the
    deferrable ``wait_for_lanes`` sensor → ``continue`` (a new run when a new pass
    or more work is needed). One active run at a time.
    """
    connection = target.operator_args()
    with DAG(
        dag_id=dag_id_for(migration),
        schedule=None,
        max_active_runs=1,
        catchup=False,
        tags=[*TAGS, "background"],
        doc_md=f"Background migration `{migration}`: coordinator round, lanes, wait, continue.",
        default_args={"retries": 0},
    ) as dag:
        # Coordinator steps and the sensor only read or compare-and-set: retrying them is
        # safe, and it rides out a deferred task that Airflow marks failed on resuming.
        safe_retries: Retries = {"retries": 2, "retry_delay": timedelta(seconds=5)}
        coordinate = CoordinateBackgroundOperator(
            task_id="coordinate", migration=migration, **safe_retries, **connection
        )
        lanes = BackgroundLaneOperator.partial(
            task_id="lane",
            migration=migration,
            slice_ms=slice_ms,
            max_slices=lane_max_slices,
            priority_weight=LANE_PRIORITY,
            weight_rule="absolute",
            retries=lane_retries,
            retry_delay=lane_retry_delay,
            retry_exponential_backoff=True,
            **connection,
        ).expand(slot=coordinate.output)
        wait = BackgroundLanesSensor(
            task_id="wait_for_lanes",
            migration=migration,
            generation=XComArg(coordinate, key="generation"),
            plan=XComArg(coordinate, key="plan"),
            mongo_conn_id=target.mongo_conn_id,
            database=target.database,
            collection_prefix=XComArg(coordinate, key="collection_prefix"),
            poll_interval=poll_interval,
            no_lease_grace_seconds=no_lease_grace_seconds,
            timeout=sensor_timeout.total_seconds(),
            priority_weight=SENSOR_PRIORITY,
            weight_rule="absolute",
            deferrable=True,
            **safe_retries,
        )
        carry_on = ContinueBackgroundOperator(
            task_id="continue",
            migration=migration,
            trigger_rule="none_failed_min_one_success",
            **connection,
        )
        coordinate >> [lanes, wait]
        [lanes, wait] >> carry_on
    return dag


def drift_dag(
    target: Target,
    *,
    schedule: timedelta | str | None = timedelta(minutes=10),
    on_drift: str | None = None,
) -> DAG:
    """``migronaut_drift``: verify completed migrations, then start DAGs that have work."""
    connection = target.operator_args()
    with DAG(
        dag_id="migronaut_drift",
        schedule=schedule,
        max_active_runs=1,
        catchup=False,
        tags=TAGS,
        doc_md="Find old-shape documents after completion (reopen or report), then heal.",
    ) as dag:
        verify = VerifyDriftOperator(task_id="verify", on_drift=on_drift, **connection)
        heal = HealBackgroundOperator(task_id="heal", **connection)
        verify >> heal
        _trigger_dags("start_migrations", heal, "heal")
    return dag


def control_dag(target: Target) -> DAG:
    """``migronaut_control``: a trigger form to pause, resume, cancel, retry, repin, unlock."""
    connection = target.operator_args()
    with DAG(
        dag_id="migronaut_control",
        schedule=None,
        catchup=False,
        tags=TAGS,
        doc_md="Control a background migration; the triggering user is recorded with the reason.",
        params={
            "migration": Param("", type="string", description="the background migration's name"),
            "action": Param("pause", type="string", enum=list(CONTROL_ACTIONS)),
            "reason": Param("", type="string", description="why (recorded in its history)"),
        },
    ) as dag:
        control = BackgroundControlOperator(
            task_id="control",
            migration="{{ params.migration }}",
            action="{{ params.action }}",
            reason="{{ params.reason }}",
            **connection,
        )
        _trigger_dags("start_migration", control, "control")
    return dag


def up_dag(target: Target) -> DAG:
    """``migronaut_up``: apply regular migrations, register background ones, start their DAGs."""
    connection = target.operator_args()
    with DAG(
        dag_id="migronaut_up",
        schedule=None,
        max_active_runs=1,
        catchup=False,
        tags=TAGS,
        doc_md="Run `migronaut up`, then start the DAG of every background migration with work.",
        params={"reason": Param("", type="string", description="why (recorded)")},
    ) as dag:
        up = MigrationsUpOperator(task_id="up", reason="{{ params.reason }}", **connection)
        _trigger_dags("start_migrations", up, "up")
    return dag


def build_dags(
    migrations_dir: str | os.PathLike[str] | None = None,
    *,
    mongo_conn_id: str = MigronautHook.default_conn_name,
    database: str | None = None,
    migronaut_config: Mapping[str, Any] | None = None,
    drift_schedule: timedelta | str | None = timedelta(minutes=10),
    conn_id: str | None = None,
    **background_options: Any,
) -> dict[str, DAG]:
    """Every migronaut DAG for one migrations directory, by DAG id (for a DAG file's globals).

    ``conn_id`` is the deprecated name of ``mongo_conn_id``; ``background_options``
    go to :func:`background_dag`.
    """
    chosen = migrations_dir or os.environ.get(MIGRATIONS_DIR_ENV)
    if not chosen:
        raise ValueError("build_dags needs migrations_dir or MIGRONAUT_MIGRATIONS_DIR")
    target = Target(
        migrations_dir=str(Path(chosen).resolve()),
        mongo_conn_id=mongo_conn_id_from(mongo_conn_id, conn_id),
        database=database,
        migronaut_config=dict(migronaut_config or {}),
    )
    dags = [
        drift_dag(target, schedule=drift_schedule),
        control_dag(target),
        up_dag(target),
        *(
            background_dag(name, target, **background_options)
            for name in background_migration_names(target.migrations_dir)
        ),
    ]
    return {dag.dag_id: dag for dag in dags}
