"""DAG factories: one DAG per background migration, plus the drift, control and up DAGs.

The assets (each collection's, watched by a drift trigger; migronaut's state
collection's, watched by the stall trigger) are the one exception to "no
lookups": their URIs need the connection's host, read once per parse from the
connection (never from MongoDB); without it the DAGs are built without assets
and without the event-driven drift and stall DAGs.

Building a DAG reads no database and imports no migration: background migration
files are found by parsing their source (a module-level ``background = …``), so
a DAG file stays fast to parse and safe when MongoDB is down.
"""

from __future__ import annotations

import ast
import logging
import os
from collections.abc import Mapping
from dataclasses import InitVar, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, TypedDict

from airflow.providers.mongo.assets.mongo import create_asset
from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG, Asset, AssetAny, AssetWatcher, BaseOperator, Connection, Param, XComArg
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
from migronaut_airflow.operators.drift import VerifyDriftEventsOperator
from migronaut_airflow.sensors.lanes import BackgroundLanesSensor
from migronaut_airflow.triggers.drift import CollectionDriftTrigger
from migronaut_airflow.triggers.stall import StalledMigrationTrigger
from migronaut_core import (
    CONTROL_ACTIONS,
    STALL_SECONDS,
    ConfigInvalidError,
    files,
    stall_watch_settings,
)
from migronaut_core.config import DEFAULT_BACKGROUND_COLLECTION

log = logging.getLogger(__name__)

TAGS = ["migronaut"]
#: The DAG that applies the on-drift policy when a drift trigger fires.
DRIFT_EVENTS_DAG_ID = "migronaut_drift_events"
#: The DAG that takes a stalled migration over when the stall trigger fires.
STALLS_DAG_ID = "migronaut_stalls"
#: Lanes run before the sensor that waits for them (``dag.test()`` runs one task at a time).
LANE_PRIORITY = 100
SENSOR_PRIORITY = 1
#: The Airflow pool of every lane task when ``build_dags`` is given none.
LANE_POOL_ENV = "MIGRONAUT_LANE_POOL"
#: The stall time in seconds when ``build_dags`` is given none.
STALL_ENV = "MIGRONAUT_STALL_SECONDS"


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


def background_collections(migrations_dir: str | os.PathLike[str]) -> dict[str, str]:
    """The collection of each background migration file whose ``background`` names one literally.

    Parsed, not imported, like :func:`background_migration_names`; a migration
    whose collection is computed (or a step migration without one) is left out.
    """
    found = {}
    for file in files.discover(Path(migrations_dir)):
        try:
            tree = ast.parse(file.path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in tree.body:
            if _assigns_background(node) and isinstance(node, ast.Assign | ast.AnnAssign):
                collection = _literal_collection(node.value)
                if collection:
                    found[file.name] = collection
    return found


def _literal_collection(value: ast.expr | None) -> str | None:
    if not isinstance(value, ast.Dict):
        return None
    for key, item in zip(value.keys, value.values, strict=True):
        if (
            isinstance(key, ast.Constant)
            and key.value == "collection"
            and isinstance(item, ast.Constant)
            and isinstance(item.value, str)
        ):
            return item.value
    return None


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

    @property
    def collection_prefix(self) -> str:
        """The prefix of migronaut's background collections (config ``background_collection``)."""
        return str(
            self.migronaut_config.get("background_collection", DEFAULT_BACKGROUND_COLLECTION)
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
    lane_deploy_wait: timedelta = timedelta(minutes=15),
    lane_pool: str | None = None,
    sensor_timeout: timedelta = timedelta(hours=24),
    no_lease_grace_seconds: float = 60.0,
    poll_interval: float = 5.0,
    collection_asset: Asset | None = None,
) -> DAG:
    """The DAG of one background migration: a run is one coordinator round.

    ``coordinate`` → mapped ``lane`` tasks (one per claimable slot) and the
    deferrable ``wait_for_lanes`` sensor → ``continue`` (a new run when a new pass
    or more work is needed). One active run at a time, plus a takeover started
    beside a stalled one (a newer round) by the stall DAG or the drift DAG's
    heal. A lane waits up to ``lane_deploy_wait`` for a deploy to bring its
    worker the registered file.

    :param collection_asset: the migrated collection's asset, the lanes' outlet
        (lineage shows which collection the migration rewrites).
    :param lane_pool: the Airflow pool the lane tasks run in (default
        ``$MIGRONAUT_LANE_POOL``, else Airflow's default pool): its slots cap how many
        lanes of all migrations write at once. The coordinator and the sensor stay out
        of it, so a full pool never holds up a round's bookkeeping.
    """
    connection = target.operator_args()
    pool = lane_pool or os.environ.get(LANE_POOL_ENV)
    with DAG(
        dag_id=dag_id_for(migration),
        schedule=None,
        # One run at a time, and room for a takeover of a stalled one.
        max_active_runs=2,
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
            outlets=[collection_asset] if collection_asset is not None else [],
            max_deploy_wait_seconds=lane_deploy_wait.total_seconds(),
            **({"pool": pool} if pool else {}),
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
    stall: timedelta = timedelta(seconds=STALL_SECONDS),
) -> DAG:
    """``migronaut_drift``: verify completed migrations, then start DAGs that have work.

    Its heal also takes over a migration whose run made no progress for ``stall``.
    """
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
        heal = HealBackgroundOperator(
            task_id="heal", stall_seconds=stall.total_seconds(), **connection
        )
        verify >> heal
        _trigger_dags("start_migrations", heal, "heal")
    return dag


@dataclass(frozen=True)
class DriftEventOptions:
    """How the event-driven drift healing is built (``build_dags(drift_events=…)``).

    :param host: the MongoDB host the assets' URIs name (default: the connection's
        first host); ``port`` likewise.
    :param refire_after_seconds: how long a fired event has to reopen its
        migration before old-shape documents still there fire again.
    :param refresh_seconds: how often the triggers read the migrations again.
    :param on_drift: ``reopen`` or ``report``; default ``background_on_drift``.
    """

    host: str | None = None
    port: int | None = None
    refire_after_seconds: float = 300.0
    refresh_seconds: float = 10.0
    on_drift: str | None = None


def drift_event_options(
    value: DriftEventOptions | Mapping[str, Any] | bool,
) -> DriftEventOptions | None:
    """``build_dags``' ``drift_events`` as options; None: build no assets and no DAG."""
    if value is True:
        return DriftEventOptions()
    if value is False:
        return None
    if isinstance(value, DriftEventOptions):
        return value
    return DriftEventOptions(**value)


#: Host, port and database of the assets' URIs.
AssetEndpoint = tuple[str, int, str]


def collection_assets(
    target: Target, endpoint: AssetEndpoint, options: DriftEventOptions
) -> dict[str, Asset]:
    """Each background migration's collection as an asset watched by a drift trigger.

    By migration name; migrations of one collection share its asset (one watcher).
    URIs are the mongo provider's (``mongodb://host:port/database/collection``).
    """
    host, port, database = endpoint
    by_collection: dict[str, Asset] = {}
    assets = {}
    for name, collection in background_collections(target.migrations_dir).items():
        if collection not in by_collection:
            plain = create_asset(host=host, port=port, database=database, collection=collection)
            trigger = CollectionDriftTrigger(
                mongo_conn_id=target.mongo_conn_id,
                database=target.database,
                collection=collection,
                collection_prefix=target.collection_prefix,
                refire_after_seconds=options.refire_after_seconds,
                refresh_seconds=options.refresh_seconds,
            )
            by_collection[collection] = Asset(
                name=plain.name,
                uri=plain.uri,
                extra=plain.extra,
                watchers=[AssetWatcher(name=f"migronaut_drift__{collection}", trigger=trigger)],
            )
        assets[name] = by_collection[collection]
    return assets


def _asset_endpoint(target: Target, options: DriftEventOptions) -> AssetEndpoint | None:
    """Host, port and database of the assets' URIs, from the options and the connection;
    None when they cannot be told without a database read."""
    host, port, database = options.host, options.port, target.database
    if host is None or database is None:
        try:
            connection = Connection.get(target.mongo_conn_id)
        except Exception as exc:  # any secrets backend's failure: build without assets
            log.warning(
                "migronaut: connection %s unreadable (%s); no drift event assets",
                target.mongo_conn_id,
                type(exc).__name__,
            )
            return None
        first = (connection.host or "").split(",")[0].strip()
        first_host, _, first_port = first.partition(":")
        host = host or first_host or None
        port = port or connection.port or (int(first_port) if first_port.isdigit() else None)
        database = database or connection.schema or None
    if not host or not database:
        log.warning("migronaut: the connection names no host or database; no drift event assets")
        return None
    return host, port or 27017, database


def drift_events_dag(target: Target, assets: list[Asset], options: DriftEventOptions) -> DAG:
    """``migronaut_drift_events``: when a collection drifts, apply the on-drift policy.

    Scheduled on the collections' assets (any of them); each fire of a drift
    trigger becomes a run that verifies the collections the events name (reopen
    or report), then starts the DAGs of migrations with work and no active run.
    Idempotent: a run with nothing left to heal does nothing.
    """
    connection = target.operator_args()
    unique = list({asset.uri: asset for asset in assets}.values())
    with DAG(
        dag_id=DRIFT_EVENTS_DAG_ID,
        schedule=AssetAny(*unique),
        max_active_runs=1,
        catchup=False,
        tags=TAGS,
        doc_md="Old-shape writes after completion (a drift trigger fired): reopen or report, heal.",
        # Every task is idempotent (verify reopens once, heal skips DAGs with a run):
        # retrying is safe, and a lost task start must not lose the event.
        default_args={"retries": 2, "retry_delay": timedelta(seconds=5)},
    ) as dag:
        verify = VerifyDriftEventsOperator(
            task_id="verify", on_drift=options.on_drift, **connection
        )
        heal = HealBackgroundOperator(task_id="heal", **connection)
        verify >> heal
        _trigger_dags("start_migrations", heal, "drift event")
    return dag


def state_asset(target: Target, endpoint: AssetEndpoint, stall: timedelta) -> Asset:
    """Migronaut's state collection as an asset, watched by the stall trigger."""
    host, port, database = endpoint
    plain = create_asset(
        host=host, port=port, database=database, collection=target.collection_prefix
    )
    trigger = StalledMigrationTrigger(
        mongo_conn_id=target.mongo_conn_id,
        database=target.database,
        collection_prefix=target.collection_prefix,
        stall_seconds=stall.total_seconds(),
    )
    return Asset(
        name=plain.name,
        uri=plain.uri,
        extra=plain.extra,
        watchers=[AssetWatcher(name=STALLS_DAG_ID, trigger=trigger)],
    )


def stalls_dag(target: Target, asset: Asset, stall: timedelta) -> DAG:
    """``migronaut_stalls``: take over a migration as soon as nothing moved it for ``stall``.

    Scheduled on the state collection's asset, whose stall trigger fires the
    moment a running migration stands still for ``stall`` (no live lease, no
    partition write, no progress, no coordinator step), instead of at the drift
    DAG's next tick. Its heal starts a takeover run beside the stuck one (a newer
    round, which the stuck run's later steps find ``superseded``), and a run for a
    running migration that has none. Idempotent: a run with nothing stalled does nothing.
    """
    connection = target.operator_args()
    with DAG(
        dag_id=STALLS_DAG_ID,
        schedule=asset,
        max_active_runs=1,
        catchup=False,
        tags=TAGS,
        doc_md="A running migration stood still past its stall time: take its run over.",
        default_args={"retries": 2, "retry_delay": timedelta(seconds=5)},
    ) as dag:
        heal = HealBackgroundOperator(
            task_id="heal", stall_seconds=stall.total_seconds(), **connection
        )
        _trigger_dags("start_migrations", heal, "stall")
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


def stall_from_env() -> timedelta:
    """The stall time ``$MIGRONAUT_STALL_SECONDS`` sets, else the coordinator's 15 minutes.

    :raises ConfigInvalidError: naming the variable, when it is not a number of
        seconds the stall watch accepts.
    """
    raw = os.environ.get(STALL_ENV, "").strip()
    if not raw:
        return timedelta(seconds=STALL_SECONDS)
    try:
        seconds = float(raw)
    except ValueError:
        raise ConfigInvalidError(
            f"{STALL_ENV} must be a number of seconds", {"key": STALL_ENV}
        ) from None
    try:
        settings = stall_watch_settings(stall_seconds=seconds)
    except ConfigInvalidError as error:  # out of the watch's range, in its own words
        raise ConfigInvalidError(f"{STALL_ENV}: {error.message}", {"key": STALL_ENV}) from None
    return timedelta(seconds=settings.stall_seconds)


def build_dags(
    migrations_dir: str | os.PathLike[str] | None = None,
    *,
    mongo_conn_id: str = MigronautHook.default_conn_name,
    database: str | None = None,
    migronaut_config: Mapping[str, Any] | None = None,
    drift_schedule: timedelta | str | None = timedelta(minutes=10),
    drift_events: DriftEventOptions | Mapping[str, Any] | bool = True,
    stall: timedelta | None = None,
    stall_watch: bool = True,
    conn_id: str | None = None,
    **background_options: Any,
) -> dict[str, DAG]:
    """Every migronaut DAG for one migrations directory, by DAG id (for a DAG file's globals).

    ``conn_id`` is the deprecated name of ``mongo_conn_id``; ``stall`` (default
    ``$MIGRONAUT_STALL_SECONDS``, else 15 minutes) goes to :func:`drift_dag` and
    :func:`stalls_dag` (built unless ``stall_watch`` is false),
    ``background_options`` to :func:`background_dag`.
    ``drift_events``: the event-driven drift DAG and the collections' assets (see
    :func:`~migronaut_airflow.dags.drift_events.collection_assets`); ``False``
    builds neither, a mapping or :class:`DriftEventOptions` tunes them.
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
    options = drift_event_options(drift_events)
    if stall is None:
        stall = stall_from_env()
    # One connection lookup per parse serves every asset.
    endpoint = (
        _asset_endpoint(target, options or DriftEventOptions())
        if options is not None or stall_watch
        else None
    )
    assets = (
        collection_assets(target, endpoint, options)
        if options is not None and endpoint is not None
        else {}
    )
    dags = [
        drift_dag(target, schedule=drift_schedule, stall=stall),
        control_dag(target),
        up_dag(target),
        *(
            background_dag(name, target, collection_asset=assets.get(name), **background_options)
            for name in background_migration_names(target.migrations_dir)
        ),
    ]
    if options is not None and assets:
        dags.append(drift_events_dag(target, list(assets.values()), options))
    if stall_watch and endpoint is not None:
        dags.append(stalls_dag(target, state_asset(target, endpoint, stall), stall))
    return {dag.dag_id: dag for dag in dags}
