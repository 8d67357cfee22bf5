"""``build_dags``: every migronaut DAG of a target, for a DAG file's globals.

Building reads no database, imports no migration file and, with its caches warm,
looks nothing up: the migrations folder is read from the files' sources through
:func:`migronaut_core.read_catalog` (answers remembered by checksum), and the
assets' host comes from the target's ``asset_host`` or a remembered connection.
A file in the folder that is no migration is named in a warning (which the DAG
processor records with the parse) and on ``migronaut_up``'s page, and every other
DAG is still built; a missing folder is an error naming the path.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG

from migronaut_airflow.dags.assets import (
    asset_endpoint,
    collection_assets,
    state_asset,
)
from migronaut_airflow.dags.builders import (
    admin_dag,
    background_dag,
    check_background_options,
    control_dag,
    drift_dag,
    drift_events_dag,
    migration_pools,
    stalls_dag,
    up_dag,
)
from migronaut_airflow.dags.options import DagOptions, DriftEventOptions, drift_event_options
from migronaut_airflow.hooks.migronaut import mongo_conn_id_from
from migronaut_airflow.targets import (
    DEFAULT_TARGET,
    TargetSettings,
    resolve_target,
    target_names,
)
from migronaut_core import MigrationCatalog, read_catalog

log = logging.getLogger(__name__)

#: DAG ids of the default target (a named target's carry its name; see ``TargetSettings.dag_id``).
DRIFT_EVENTS_DAG_ID = "migronaut_drift_events"
STALLS_DAG_ID = "migronaut_stalls"
#: Kept for DAG files that read them: the legacy variables of the default target.
LANE_POOL_ENV = "MIGRONAUT_LANE_POOL"
STALL_ENV = "MIGRONAUT_STALL_SECONDS"


class MigrationFileWarning(UserWarning):
    """A file in a migrations folder is no migration; its DAG is not built."""


_UNSET: Any = object()


def build_dags(
    migrations_dir: str | os.PathLike[str] | None = None,
    *,
    target: str = DEFAULT_TARGET,
    mongo_conn_id: str | None = None,
    database: str | None = None,
    migronaut_config: Mapping[str, Any] | None = None,
    drift_schedule: timedelta | str | None = _UNSET,
    drift_events: DriftEventOptions | Mapping[str, Any] | bool = True,
    stall: timedelta | None = None,
    stall_watch: bool = True,
    default_args: Mapping[str, Any] | None = None,
    tags: Sequence[str] = (),
    dag_args: Mapping[str, Any] | None = None,
    background_dag_args: Mapping[str, Any] | None = None,
    task_args: Mapping[str, Mapping[str, Any]] | None = None,
    paused_upon_creation: bool | None = False,
    base_folder: str | os.PathLike[str] | None = None,
    conn_id: str | None = None,
    **background_options: Any,
) -> dict[str, DAG]:
    """Every migronaut DAG of ``target``, by DAG id.

    Each argument left out comes from the target's settings (Airflow's
    ``[migronaut]`` / ``[migronaut_<target>]`` section, the ``MIGRONAUT_*``
    variables for the default target, ``migronaut.toml``): see
    :mod:`migronaut_airflow.targets`.

    :param drift_schedule: the drift DAG's schedule; None: manual runs only.
    :param drift_events: the event-driven drift DAG and the collections' assets;
        ``False`` builds neither, a mapping or :class:`DriftEventOptions` tunes them.
    :param stall: how long a running migration may stand still before its run is
        taken over (the drift DAG's heal and ``migronaut_stalls``, built unless
        ``stall_watch`` is false).
    :param default_args, tags, dag_args, background_dag_args, task_args,
        paused_upon_creation: see :class:`DagOptions`.
    :param base_folder: where the target's migrations folder is when no setting names
        one (``migrations/``, ``migrations_<target>/``); default: Airflow's dags folder.
        The ready DAG file passes its own folder, as a DAG bundle needs.
    :param conn_id: deprecated name of ``mongo_conn_id``.
    :param background_options: :func:`~.builders.background_dag`'s keywords.
    :raises ConfigInvalidError: a setting or argument is invalid (``lane_retries`` out
        of 0 to 100, …) or the migrations folder is missing, naming the key or the path.
    """
    arguments: dict[str, Any] = {
        "migrations_dir": os.fspath(migrations_dir) if migrations_dir is not None else None,
        "conn_id": _conn_id(mongo_conn_id, conn_id),
        "database": database,
        "migronaut_config": migronaut_config,
        "stall_seconds": stall,
    }
    if drift_schedule is not _UNSET:
        arguments["drift_schedule"] = drift_schedule
    settings = resolve_target(
        target, arguments, base_folder=Path(base_folder) if base_folder is not None else None
    )
    options = DagOptions(
        default_args=dict(default_args or {}),
        tags=tuple(tags),
        dag_args=dict(dag_args or {}),
        background_dag_args=dict(background_dag_args or {}),
        task_args={kind: dict(values) for kind, values in (task_args or {}).items()},
        paused_upon_creation=paused_upon_creation,
    )
    return dags_for(
        settings,
        options,
        drift_events=drift_event_options(drift_events),
        stall_watch=stall_watch,
        **background_options,
    )


def build_all_dags(**keywords: Any) -> dict[str, DAG]:
    """The DAGs of every configured target (the default one and ``[migronaut] targets``).

    ``keywords`` go to :func:`build_dags` for each target; settings that differ by
    target belong in each target's configuration section.
    """
    dags: dict[str, DAG] = {}
    for name in target_names():
        dags.update(build_dags(target=name, **keywords))
    return dags


def dags_for(
    settings: TargetSettings,
    options: DagOptions,
    *,
    drift_events: DriftEventOptions | None,
    stall_watch: bool,
    **background_options: Any,
) -> dict[str, DAG]:
    """The DAGs of resolved settings (what :func:`build_dags` does after resolving).

    :raises ConfigInvalidError: a background option is out of range (before any DAG is built).
    """
    check_background_options(background_options)
    catalog = read_catalog(Path(settings.migrations_dir), cache_dir=settings.cache_dir)
    _report_rejected(settings, catalog)
    endpoint = (
        asset_endpoint(settings, drift_events or DriftEventOptions())
        if drift_events is not None or stall_watch
        else None
    )
    assets = (
        collection_assets(settings, catalog, endpoint, drift_events)
        if drift_events is not None and endpoint is not None
        else {}
    )
    pools = migration_pools(settings, options, background_options.get("lane_pool"))
    dags = [
        drift_dag(
            settings,
            options,
            on_drift=drift_events.on_drift if drift_events else None,
            pools=pools,
        ),
        control_dag(settings, options),
        up_dag(settings, options, catalog),
        admin_dag(settings, options),
        *(
            background_dag(
                entry.name,
                settings,
                options,
                collection_asset=assets.get(entry.name),
                canary_approval=entry.approval,
                **background_options,
            )
            for entry in catalog.background
        ),
    ]
    if drift_events is not None and assets:
        dags.append(
            drift_events_dag(settings, options, list(assets.values()), drift_events, pools=pools)
        )
    if stall_watch and endpoint is not None:
        dags.append(stalls_dag(settings, options, state_asset(settings, endpoint), pools=pools))
    return {dag.dag_id: dag for dag in dags}


def background_migration_names(migrations_dir: str | os.PathLike[str]) -> list[str]:
    """Names of the background migration files in ``migrations_dir``, without importing them."""
    return [entry.name for entry in read_catalog(Path(migrations_dir)).background]


def _report_rejected(settings: TargetSettings, catalog: MigrationCatalog) -> None:
    for item in catalog.rejected:
        warnings.warn(
            f"migronaut target {settings.name!r}: {item.file} in {settings.migrations_dir} "
            f"is no migration ({item.reason}); no DAG for it, and `migronaut up` refuses it",
            MigrationFileWarning,
            stacklevel=3,
        )


def _conn_id(mongo_conn_id: str | None, conn_id: str | None) -> str | None:
    if conn_id is None:
        return mongo_conn_id
    return mongo_conn_id_from(mongo_conn_id or conn_id, conn_id)
