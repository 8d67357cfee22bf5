"""The target's assets: each migrated collection (drift watcher), the state collection
(stalls) and each migration's milestones (the deploy gate's asset events).

Asset URIs follow the mongo provider (``mongodb://host:port/database/collection``),
so lineage shows which collection a migration rewrites. The host comes from the
target's ``asset_host`` when set; otherwise from the connection: one set in the
environment is read as Airflow reads it, any other is looked up at most once
per ``ENDPOINT_TTL_SECONDS`` per machine (remembered in the target's cache
folder), not at every parse and every task start.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from airflow.providers.mongo.assets.mongo import create_asset
from airflow.sdk import Asset, AssetWatcher, Connection

from migronaut_airflow.dags.options import DriftEventOptions
from migronaut_airflow.targets import DEFAULT_TARGET, TargetSettings, dag_prefix
from migronaut_airflow.triggers.drift import CollectionDriftTrigger
from migronaut_airflow.triggers.stall import StalledMigrationTrigger
from migronaut_core import MigrationCatalog, ensure_private_folder

log = logging.getLogger(__name__)

#: How long a connection's host, port and schema are reused before they are read again.
ENDPOINT_TTL_SECONDS = 300.0


def completed_asset(migration: str, target: str = DEFAULT_TARGET) -> Asset:
    """The asset whose events say ``migration`` of ``target`` completed.

    The migration's DAG emits one event (its ``announce_completed`` task) in the run
    that saw it complete — with a ``validator``, once it is enforced: completion waits
    for the soak, so completed is finalized. A deploy DAG is scheduled on it:
    ``schedule=[completed_asset("20260115090000_split_user_names")]``. Name and URI
    (``x-migronaut://TARGET/MIGRATION/completed``) depend only on the arguments, so
    any DAG file builds the same asset without reading anything.
    """
    return Asset(
        name=f"{dag_prefix(target)}{migration}__completed",
        uri=f"x-migronaut://{target}/{migration}/completed",
        group="migronaut",
    )


@dataclass(frozen=True, slots=True)
class AssetEndpoint:
    """Host, port and database of the assets' URIs."""

    host: str
    port: int
    database: str


def asset_endpoint(settings: TargetSettings, options: DriftEventOptions) -> AssetEndpoint | None:
    """Where the target's assets point; None when that cannot be told (no assets are built).

    A connection that cannot be read (unknown, or a secrets backend failing) is
    logged by id and type of error only, and the DAGs are built without assets.
    """
    host: object = options.host or settings.asset_host
    port: object = options.port or settings.asset_port
    database: object = settings.database
    if host is None or database is None:
        found = _connection_endpoint(settings)
        if found is None:
            return None
        host = host or found.get("host")
        port = port or found.get("port")
        database = database or found.get("database")
    if not host or not database:
        log.warning(
            "migronaut: connection %s names no host or database; no assets",
            settings.mongo_conn_id,
        )
        return None
    return AssetEndpoint(str(host), int(str(port or 27017)), str(database))


def _connection_endpoint(settings: TargetSettings) -> dict[str, str | int | None] | None:
    cache = _endpoint_cache_file(settings)
    remembered = _remembered(cache)
    if remembered is not None:
        return remembered
    try:
        connection = Connection.get(settings.mongo_conn_id)
    except Exception as exc:  # any secrets backend's failure: build without assets
        log.warning(
            "migronaut: connection %s unreadable (%s); no assets",
            settings.mongo_conn_id,
            type(exc).__name__,
        )
        return None
    first = (connection.host or "").split(",")[0].strip()
    first_host, _, first_port = first.partition(":")
    found: dict[str, str | int | None] = {
        "host": first_host or None,
        "port": connection.port or (int(first_port) if first_port.isdigit() else None),
        "database": connection.schema or None,
    }
    _remember(cache, found)
    return found


def _endpoint_cache_file(settings: TargetSettings) -> Path | None:
    """None when nothing is worth remembering: no cache, or a connection set in the
    environment (``AIRFLOW_CONN_<ID>``), which Airflow reads before any backend."""
    if settings.cache_dir is None or f"AIRFLOW_CONN_{settings.mongo_conn_id.upper()}" in os.environ:
        return None
    key = hashlib.sha256(settings.mongo_conn_id.encode()).hexdigest()[:24]
    return settings.cache_dir / f"endpoint-{key}.json"


def _remembered(cache: Path | None) -> dict[str, str | int | None] | None:
    if cache is None or not ensure_private_folder(cache.parent):
        return None
    try:
        content = json.loads(cache.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(content, dict) or not isinstance(content.get("at"), int | float):
        return None
    if not 0 <= time.time() - content["at"] <= ENDPOINT_TTL_SECONDS:
        return None
    endpoint = content.get("endpoint")
    return endpoint if isinstance(endpoint, dict) else None


def _remember(cache: Path | None, endpoint: dict[str, str | int | None]) -> None:
    if cache is None or not ensure_private_folder(cache.parent):
        return
    try:
        handle, temporary = tempfile.mkstemp(dir=cache.parent, suffix=".tmp")
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            json.dump({"at": time.time(), "endpoint": endpoint}, stream)
        os.replace(temporary, cache)
    except OSError as exc:
        log.debug("migronaut: endpoint cache not written (%s)", type(exc).__name__)


def collection_assets(
    settings: TargetSettings,
    catalog: MigrationCatalog,
    endpoint: AssetEndpoint,
    options: DriftEventOptions,
) -> dict[str, Asset]:
    """Each background migration's collection as an asset watched by a drift trigger.

    By migration name; migrations of one collection share its asset (one watcher).
    A migration whose collection is computed, not literal, gets none.
    """
    by_collection: dict[str, Asset] = {}
    assets = {}
    for entry in catalog.background:
        collection = entry.collection
        if collection is None:
            continue
        if collection not in by_collection:
            trigger = CollectionDriftTrigger(
                mongo_conn_id=settings.mongo_conn_id,
                database=settings.database,
                collection=collection,
                collection_prefix=settings.collection_prefix,
                refire_after_seconds=options.refire_after_seconds,
                refresh_seconds=options.refresh_seconds,
            )
            by_collection[collection] = _watched(
                endpoint, collection, settings.dag_id(f"drift__{collection}"), trigger
            )
        assets[entry.name] = by_collection[collection]
    return assets


def state_asset(settings: TargetSettings, endpoint: AssetEndpoint) -> Asset:
    """Migronaut's state collection as an asset, watched by the stall trigger."""
    trigger = StalledMigrationTrigger(
        mongo_conn_id=settings.mongo_conn_id,
        database=settings.database,
        collection_prefix=settings.collection_prefix,
        stall_seconds=settings.stall.total_seconds(),
    )
    return _watched(endpoint, settings.collection_prefix, settings.dag_id("stalls"), trigger)


def _watched(
    endpoint: AssetEndpoint,
    collection: str,
    watcher: str,
    trigger: CollectionDriftTrigger | StalledMigrationTrigger,
) -> Asset:
    plain = create_asset(
        host=endpoint.host, port=endpoint.port, database=endpoint.database, collection=collection
    )
    return Asset(
        name=plain.name,
        uri=plain.uri,
        extra=plain.extra,
        watchers=[AssetWatcher(name=watcher, trigger=trigger)],
    )
