"""The DAGs of one target, each built the same way by :func:`target_dag`.

Every builder only wires operators: what a task decides is the core's. The
DAG-level scaffolding (ids, tags, ``default_args``, the caller's DAG arguments,
unpaused creation) is written once, in :func:`target_dag`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any, TypedDict

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG, Asset, AssetAny, BaseOperator, Param, XComArg
from airflow.sdk.definitions.mappedoperator import MappedOperator

from migronaut_airflow.dags.assets import completed_asset
from migronaut_airflow.dags.options import DagOptions, DriftEventOptions
from migronaut_airflow.operators.approval import RECHECK, CanaryApprovalOperator
from migronaut_airflow.operators.background import (
    AnnounceCompletedOperator,
    BackgroundControlOperator,
    BackgroundLaneOperator,
    ContinueBackgroundOperator,
    CoordinateBackgroundOperator,
    HealBackgroundOperator,
    MigrationsUpOperator,
    ResumeUpOperator,
    VerifyDriftOperator,
)
from migronaut_airflow.operators.drift import VerifyDriftEventsOperator
from migronaut_airflow.operators.runs import OPERATIONS, AdminOperationOperator
from migronaut_airflow.sensors.lanes import BackgroundLanesSensor
from migronaut_airflow.targets import DEFAULT_TARGET, TargetSettings
from migronaut_core import BRAKE_ACTIONS, CONTROL_ACTIONS, MigrationCatalog, check_int

TAGS = ["migronaut"]
#: Airflow's pool of a task that names none.
DEFAULT_POOL = "default_pool"
#: Lanes run before the sensor that waits for them (``dag.test()`` runs one task at a time).
LANE_PRIORITY = 100
SENSOR_PRIORITY = 1
#: Failed tries in a row before a lane task gives up (the seeds' ``maxLaneRetries``), and
#: the most a caller may ask for.
LANE_RETRIES = 8
MAX_LANE_RETRIES = 100


class Retries(TypedDict):
    """``retries`` and ``retry_delay`` of a task."""

    retries: int
    retry_delay: timedelta


#: For tasks that only read or compare-and-set: retrying is safe, and it rides out a
#: deferred task that Airflow marks failed on resuming, or a lost task start.
SAFE_RETRIES: Retries = {"retries": 2, "retry_delay": timedelta(seconds=5)}


def target_dag(
    settings: TargetSettings,
    options: DagOptions,
    kind: str,
    *,
    doc_md: str,
    schedule: Any = None,
    max_active_runs: int | None = 1,
    default_args: Mapping[str, Any] | None = None,
    params: Mapping[str, Param] | None = None,
    background: bool = False,
) -> DAG:
    """A DAG of the target, with the caller's tags, arguments and pause policy.

    ``default_args`` are migronaut's own for this DAG; the caller's
    ``default_args`` go over them.
    """
    tags = [*TAGS, *options.tags]
    if background:
        tags.append("background")
    if settings.name != DEFAULT_TARGET:
        tags.append(f"migronaut:{settings.name}")
    limits: dict[str, Any] = {} if max_active_runs is None else {"max_active_runs": max_active_runs}
    return DAG(
        dag_id=settings.dag_id(kind),
        schedule=schedule,
        **limits,
        catchup=False,
        tags=list(dict.fromkeys(tags)),
        doc_md=doc_md,
        default_args={**(default_args or {}), **options.default_args},
        params=dict(params or {}),
        is_paused_upon_creation=options.paused_upon_creation,
        **options.for_dag(background=background),
    )


def trigger_dags(
    task_id: str, upstream: BaseOperator, reason: str, options: DagOptions
) -> MappedOperator:
    """Start the DAGs an upstream task returned (none: the mapped task is skipped)."""
    return TriggerDagRunOperator.partial(
        task_id=task_id,
        conf={"reason": reason},
        skip_when_already_exists=True,
        **options.for_tasks("admin"),
    ).expand(trigger_dag_id=upstream.output)


def check_background_options(options: Mapping[str, Any]) -> None:
    """Refuse a :func:`background_dag` keyword out of its range, before any DAG is built.

    :raises ConfigInvalidError: naming the argument (``lane_retries``: 0 to 100).
    """
    if "lane_retries" in options:
        check_int("lane_retries", options["lane_retries"], 0, MAX_LANE_RETRIES)


def migration_pools(
    settings: TargetSettings, options: DagOptions, lane_pool: str | None = None
) -> dict[str, str]:
    """The pool of each task of a migration's DAG, as :func:`background_dag` sets them.

    The heal names them when a stalled migration's tasks wait for a slot.
    """
    lane = lane_pool or settings.lane_pool or options.for_tasks("lane").get("pool")
    coordinator = options.for_tasks("coordinator").get("pool")
    return {
        "coordinate": coordinator or DEFAULT_POOL,
        "lane": lane or DEFAULT_POOL,
        "wait_for_lanes": options.for_tasks("sensor").get("pool") or DEFAULT_POOL,
        "continue": coordinator or DEFAULT_POOL,
    }


def background_dag(
    migration: str,
    settings: TargetSettings,
    options: DagOptions | None = None,
    *,
    slice_ms: int | None = None,
    lane_max_slices: int | None = None,
    lane_retries: int = LANE_RETRIES,
    lane_retry_delay: timedelta = timedelta(seconds=10),
    lane_deploy_wait: timedelta = timedelta(minutes=15),
    lane_pool: str | None = None,
    sensor_timeout: timedelta = timedelta(hours=24),
    no_lease_grace_seconds: float = 60.0,
    poll_interval: float = 5.0,
    collection_asset: Asset | None = None,
    canary_approval: bool = False,
    approval_recheck: timedelta = RECHECK,
) -> DAG:
    """The DAG of one background migration: a run is one coordinator round.

    ``coordinate`` → mapped ``lane`` tasks (one per claimable slot) and the
    deferrable ``wait_for_lanes`` sensor → ``continue`` (a new run when a new pass
    or more work is needed) → ``resume_up`` (``migronaut_up`` again once the
    migration completed and a regular migration waited for it) and
    ``announce_completed`` (the ``completed`` asset event, in the run that saw it
    complete: :func:`~migronaut_airflow.dags.assets.completed_asset`). One active run at
    a time, plus a takeover started beside a stalled one (a newer round) by the
    stall DAG or the drift DAG's heal. A lane waits up to ``lane_deploy_wait`` for
    a deploy to bring its worker the registered file.

    :param lane_retries: how many times a failed lane task is retried, with exponential
        backoff from ``lane_retry_delay`` (0 to 100; the seeds' ``maxLaneRetries``, 8).
    :param collection_asset: the migrated collection's asset, the lanes' outlet.
    :param canary_approval: its spec's canary waits for an approval: ``coordinate``
        hands a canary awaiting it to an ``approve_canary`` human-in-the-loop task
        (:mod:`~migronaut_airflow.operators.approval`), then ``continue_after_approval``
        starts the next round. Without it, ``coordinate`` waits as for any soak, and
        the canary is approved with the CLI, the UI or the control DAG.
    :param approval_recheck: how often a waiting question looks whether the canary
        was decided elsewhere.
    :param lane_pool: the Airflow pool of the lane tasks (default: the target's
        ``lane_pool``, then ``task_args["lane"]["pool"]``, else Airflow's default
        pool): its slots cap how many lanes of all migrations write at once. The
        coordinator and the sensor stay out of it, so a full pool never holds up a
        round's bookkeeping.
    """
    check_background_options({"lane_retries": lane_retries})
    options = options or DagOptions()
    connection = settings.operator_args()
    lane_args = options.for_tasks("lane")
    pool = lane_pool or settings.lane_pool or lane_args.pop("pool", None)
    coordinator_args = {**SAFE_RETRIES, **options.for_tasks("coordinator"), **connection}
    with target_dag(
        settings,
        options,
        f"bg__{migration}",
        doc_md=f"Background migration `{migration}`: coordinator round, lanes, wait, continue.",
        # One run at a time, and room for a takeover of a stalled one.
        max_active_runs=2,
        default_args={"retries": 0},
        background=True,
    ) as dag:
        coordinate = CoordinateBackgroundOperator(
            task_id="coordinate",
            migration=migration,
            hand_off_approval=canary_approval,
            **coordinator_args,
        )
        lanes = BackgroundLaneOperator.partial(
            task_id="lane",
            migration=migration,
            # Bound to the step that mapped them: a superseded round's lanes claim nothing.
            registration=XComArg(coordinate, key="registration"),
            generation=XComArg(coordinate, key="generation"),
            round=XComArg(coordinate, key="round"),
            slice_ms=slice_ms,
            max_slices=lane_max_slices,
            priority_weight=LANE_PRIORITY,
            weight_rule="absolute",
            retries=lane_retries,
            retry_delay=lane_retry_delay,
            retry_exponential_backoff=True,
            outlets=[collection_asset] if collection_asset is not None else [],
            max_deploy_wait_seconds=lane_deploy_wait.total_seconds(),
            **({"pool": pool} if pool else {}),
            **lane_args,
            **connection,
        ).expand(slot=coordinate.output)
        wait = BackgroundLanesSensor(
            task_id="wait_for_lanes",
            migration=migration,
            generation=XComArg(coordinate, key="generation"),
            plan=XComArg(coordinate, key="plan"),
            mongo_conn_id=settings.mongo_conn_id,
            database=settings.database,
            collection_prefix=XComArg(coordinate, key="collection_prefix"),
            poll_interval=poll_interval,
            no_lease_grace_seconds=no_lease_grace_seconds,
            timeout=sensor_timeout.total_seconds(),
            priority_weight=SENSOR_PRIORITY,
            weight_rule="absolute",
            deferrable=True,
            **SAFE_RETRIES,
            **options.for_tasks("sensor"),
        )
        carry_on = ContinueBackgroundOperator(
            task_id="continue",
            migration=migration,
            trigger_rule="none_failed_min_one_success",
            **options.for_tasks("coordinator"),
            **connection,
        )
        # Last, whatever came before (a migration can complete in coordinate's own step).
        resume_up = ResumeUpOperator(
            task_id="resume_up",
            migration=migration,
            trigger_rule="all_done",
            **options.for_tasks("admin"),
            **connection,
        )
        # Its own event for a deploy DAG to be scheduled on, whatever came before.
        announce = AnnounceCompletedOperator(
            task_id="announce_completed",
            migration=migration,
            outlets=[completed_asset(migration, settings.name)],
            trigger_rule="all_done",
            **options.for_tasks("admin"),
            **connection,
        )
        coordinate >> [lanes, wait]
        [lanes, wait] >> carry_on >> [resume_up, announce]
        if canary_approval:
            _approval_tasks(migration, coordinate, options, connection, approval_recheck)
    return dag


def _approval_tasks(
    migration: str,
    coordinate: BaseOperator,
    options: DagOptions,
    connection: Mapping[str, Any],
    recheck: timedelta,
) -> None:
    """``approve_canary`` after ``coordinate`` (whatever it did: it skips unless the canary
    awaits approval), then ``continue_after_approval`` once it answered."""
    approve = CanaryApprovalOperator(
        task_id="approve_canary",
        migration=migration,
        recheck=recheck,
        trigger_rule="all_done",
        **SAFE_RETRIES,
        **options.for_tasks("admin"),
        **connection,
    )
    after = ContinueBackgroundOperator(
        task_id="continue_after_approval",
        migration=migration,
        **options.for_tasks("coordinator"),
        **connection,
    )
    coordinate >> approve >> after


def drift_dag(
    settings: TargetSettings,
    options: DagOptions,
    *,
    on_drift: str | None = None,
    pools: Mapping[str, str] | None = None,
) -> DAG:
    """``migronaut_drift``: verify completed migrations, then start DAGs that have work.

    Its heal also takes over a migration whose run made no progress for the
    target's stall time.
    """
    admin = {**options.for_tasks("admin"), **settings.operator_args()}
    with target_dag(
        settings,
        options,
        "drift",
        schedule=settings.drift_schedule,
        doc_md="Find old-shape documents after completion (reopen or report), then heal.",
    ) as dag:
        verify = VerifyDriftOperator(task_id="verify", on_drift=on_drift, **admin)
        heal = HealBackgroundOperator(
            task_id="heal", stall_seconds=settings.stall.total_seconds(), pools=pools, **admin
        )
        verify >> heal
        trigger_dags("start_migrations", heal, "heal", options)
    return dag


def drift_events_dag(
    settings: TargetSettings,
    options: DagOptions,
    assets: list[Asset],
    drift_options: DriftEventOptions,
    *,
    pools: Mapping[str, str] | None = None,
) -> DAG:
    """``migronaut_drift_events``: when a collection drifts, apply the on-drift policy.

    Scheduled on the collections' assets (any of them); each fire of a drift
    trigger becomes a run that verifies the collections the events name (reopen
    or report), then starts the DAGs of migrations with work and no active run.
    Idempotent: a run with nothing left to heal does nothing.
    """
    admin = {**options.for_tasks("admin"), **settings.operator_args()}
    unique = list({asset.uri: asset for asset in assets}.values())
    with target_dag(
        settings,
        options,
        "drift_events",
        schedule=AssetAny(*unique),
        doc_md="Old-shape writes after completion (a drift trigger fired): reopen or report, heal.",
        default_args={**SAFE_RETRIES},
    ) as dag:
        verify = VerifyDriftEventsOperator(
            task_id="verify", on_drift=drift_options.on_drift, **admin
        )
        heal = HealBackgroundOperator(
            task_id="heal", stall_seconds=settings.stall.total_seconds(), pools=pools, **admin
        )
        verify >> heal
        trigger_dags("start_migrations", heal, "drift event", options)
    return dag


def stalls_dag(
    settings: TargetSettings,
    options: DagOptions,
    asset: Asset,
    *,
    pools: Mapping[str, str] | None = None,
) -> DAG:
    """``migronaut_stalls``: take over a migration as soon as nothing moved it for the stall time.

    Scheduled on the state collection's asset, whose stall trigger fires the
    moment a running migration stands still (no live lease, no partition write,
    no progress, no coordinator step), instead of at the drift DAG's next tick.
    Its heal starts a takeover run beside the stuck one (a newer round, which the
    stuck run's later steps find ``superseded``), unless Airflow itself holds the
    run (a paused DAG, a queued run, tasks waiting for a slot in ``pools``): that
    is reported, not taken over. Idempotent.
    """
    admin = {**options.for_tasks("admin"), **settings.operator_args()}
    with target_dag(
        settings,
        options,
        "stalls",
        schedule=asset,
        doc_md="A running migration stood still past its stall time: take its run over.",
        default_args={**SAFE_RETRIES},
    ) as dag:
        heal = HealBackgroundOperator(
            task_id="heal", stall_seconds=settings.stall.total_seconds(), pools=pools, **admin
        )
        trigger_dags("start_migrations", heal, "stall", options)
    return dag


def control_dag(settings: TargetSettings, options: DagOptions) -> DAG:
    """``migronaut_control``: a trigger form to pause, resume, cancel, retry, repin, unlock,
    undo, and to brake or release the whole target.

    A run acts only for a triggering user who may edit the migration's DAG (for
    ``brake``/``release``: this DAG) (the target's ``authorize_runs``).
    """
    admin = {**options.for_tasks("admin"), **settings.operator_args()}
    with target_dag(
        settings,
        options,
        "control",
        max_active_runs=None,
        doc_md="Control a background migration; the triggering user is recorded with the reason.",
        params={
            "migration": Param(
                "", type="string", description="the background migration's name (not for brake)"
            ),
            "action": Param("pause", type="string", enum=[*CONTROL_ACTIONS, *BRAKE_ACTIONS]),
            "reason": Param("", type="string", description="why (recorded in its history)"),
            "until": Param(
                "",
                type="string",
                description="brake only: when it ends by itself (ISO 8601 with a time zone)",
            ),
            "failed_only": Param(
                False,
                type="boolean",
                description="retry: only the documents it could not rewrite",
            ),
        },
    ) as dag:
        control = BackgroundControlOperator(
            task_id="control",
            migration="{{ params.migration }}",
            action="{{ params.action }}",
            reason="{{ params.reason }}",
            until="{{ params.until }}",
            failed_only="{{ params.failed_only }}",
            authorize_runs=settings.authorize_runs,
            **admin,
        )
        trigger_dags("start_migration", control, "control", options)
    return dag


def up_dag(settings: TargetSettings, options: DagOptions, catalog: MigrationCatalog) -> DAG:
    """``migronaut_up``: apply regular migrations, register background ones, start their DAGs.

    Its description lists the files of the migrations folder that are no
    migration (by name, with why), so they show on the DAG's page; the run
    itself refuses them as ``migronaut up`` does.
    """
    admin = {**options.for_tasks("admin"), **settings.operator_args()}
    with target_dag(
        settings,
        options,
        "up",
        doc_md=_up_doc(settings, catalog),
        params={"reason": Param("", type="string", description="why (recorded)")},
    ) as dag:
        up = MigrationsUpOperator(task_id="up", reason="{{ params.reason }}", **admin)
        trigger_dags("start_migrations", up, "up", options)
    return dag


def admin_dag(settings: TargetSettings, options: DagOptions) -> DAG:
    """``migronaut_admin``: a trigger form for every operation of the ``migronaut`` CLI.

    ``up`` (``to``, ``only``), ``down`` (``to``), either with ``plan`` (what it would
    do, changing nothing), ``baseline`` (``to``), ``converge`` (``prune``), a
    ``dry_run`` of a background migration and ``audit``; the result is the task's
    XCom and log. After an ``up`` or a ``down`` the DAGs of background migrations
    with work are started, as ``migronaut_up`` does. A run acts only for a
    triggering user who may edit this DAG (a dry run: the migration's DAG), under
    the target's ``authorize_runs``.
    """
    admin = {**options.for_tasks("admin"), **settings.operator_args()}
    optional_name = ["null", "string"]
    optional_count = ["null", "integer"]
    with target_dag(
        settings,
        options,
        "admin",
        max_active_runs=None,
        doc_md=(
            f"Run one `migronaut` operation on target `{settings.name}`: up, down "
            "(with `plan`: what it would do), baseline, converge, a dry run, audit. "
            "The triggering user is recorded with the reason."
        ),
        params={
            "operation": Param("audit", type="string", enum=list(OPERATIONS)),
            "plan": Param(
                False, type="boolean", description="up or down: show what it would do only"
            ),
            "to": Param(
                None,
                type=optional_name,
                description="up/down/baseline: up to (down: back to) this migration",
            ),
            "only": Param(None, type=optional_name, description="up: only this migration"),
            "prune": Param(
                False, type="boolean", description="converge: drop undeclared version indexes"
            ),
            "migration": Param(
                None, type=optional_name, description="dry_run: the background migration"
            ),
            "sample": Param(None, type=optional_count, minimum=1, description="dry_run"),
            "first": Param(None, type=optional_count, minimum=1, description="dry_run"),
            "validate": Param(False, type="boolean", description="dry_run: check the writes"),
            "steps": Param(None, type=optional_count, minimum=1, description="dry_run"),
            "from_start": Param(False, type="boolean", description="dry_run: step migrations"),
            "reason": Param("", type="string", description="why (recorded)"),
        },
    ) as dag:
        run = AdminOperationOperator(task_id="run", authorize_runs=settings.authorize_runs, **admin)
        trigger_dags("start_migrations", run, "admin", options)
    return dag


def _up_doc(settings: TargetSettings, catalog: MigrationCatalog) -> str:
    lines = [
        f"Run `migronaut up` on target `{settings.name}` ({len(catalog.migrations)} "
        "migration files), then start the DAG of every background migration with work."
    ]
    if catalog.rejected:
        lines += ["", "**Files in the migrations folder that are no migration:**", ""]
        lines += [f"- `{item.file}`: {item.reason}" for item in catalog.rejected]
    return "\n".join(lines)
