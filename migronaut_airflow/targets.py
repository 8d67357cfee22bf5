"""Targets: which database a set of migronaut DAGs migrates, and every setting it takes.

A *target* is a ``mongo`` connection, a database, a migrations folder and the
migronaut settings that go with them. One Airflow may serve any number of
targets; each gets its own DAGs, assets and watchers, whose ids carry its name.
The ``default`` target keeps the ids deployments already have
(``migronaut_up``, ``migronaut_bg__<migration>``, …); a target named ``orders``
gets ``migronaut_orders__up``, ``migronaut_orders__bg__<migration>``, ….

Settings are resolved here, once and one way, for the DAG factory, the
operators (through their arguments), the triggers, the hook and the UI. For
each key, the first source that sets it wins:

1. arguments (``build_dags(...)``);
2. Airflow's configuration: the ``[migronaut]`` section for the default target,
   ``[migronaut_<target>]`` for another (so ``AIRFLOW__MIGRONAUT__CONN_ID`` or
   ``AIRFLOW__MIGRONAUT_ORDERS__CONN_ID``); other targets are listed in
   ``[migronaut] targets``;
3. for the default target only, the ``MIGRONAUT_*`` variables the DAG file has
   always read (``MIGRONAUT_CONN_ID``, ``MIGRONAUT_MIGRATIONS_DIR``, …);
4. ``migronaut.toml`` (or ``[tool.migronaut]`` of ``pyproject.toml``) in the
   folder that holds the migrations folder, for the core's keys;
5. the defaults.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cached_property
from pathlib import Path
from typing import Any, Final, TypedDict

from migronaut_airflow.authorization import AUTH_MANAGER, check_policy
from migronaut_core import (
    STALL_SECONDS,
    Config,
    ConfigInvalidError,
    config_from_text,
    default_cache_dir,
    load_config,
    stall_watch_settings,
)

DEFAULT_TARGET: Final = "default"
#: The Airflow configuration section of the default target; ``<SECTION>_<target>`` for others.
SECTION: Final = "migronaut"
_TARGET_NAME = re.compile(r"^[a-z][a-z0-9]{0,29}(?:_[a-z0-9]+)*$")
_MAX_TARGET_NAME = 40

#: Settings of the provider itself (the rest of a section are the core's config keys).
PROVIDER_KEYS: Final = frozenset(
    {
        "conn_id",
        "migrations_dir",
        "database",
        "lane_pool",
        "stall_seconds",
        "drift_schedule",
        "asset_host",
        "asset_port",
        "cache_dir",
        "authorize_runs",
    }
)
#: Keys only the ``[migronaut]`` section holds.
GLOBAL_KEYS: Final = frozenset({"targets"})
#: The variables the default target has always read, and the keys they set.
LEGACY_ENV: Final[Mapping[str, str]] = {
    "MIGRONAUT_CONN_ID": "conn_id",
    "MIGRONAUT_MIGRATIONS_DIR": "migrations_dir",
    "MIGRONAUT_DATABASE": "database",
    "MIGRONAUT_LANE_POOL": "lane_pool",
    "MIGRONAUT_STALL_SECONDS": "stall_seconds",
    "MIGRONAUT_DRIFT_SCHEDULE": "drift_schedule",
}
#: The drift DAG's schedule when nothing sets one.
DEFAULT_DRIFT_SCHEDULE: Final = timedelta(minutes=10)


class OperatorArgs(TypedDict):
    """The keywords every migronaut operator takes to reach its target."""

    target: str
    mongo_conn_id: str
    migrations_dir: str
    database: str | None
    migronaut_config: dict[str, Any]


def check_target_name(name: str) -> str:
    """Return ``name`` when it can be part of DAG ids and a configuration section.

    :raises ConfigInvalidError: naming the rule (lower-case letters, digits and
        single underscores, starting with a letter, at most 40 characters).
    """
    if len(name) > _MAX_TARGET_NAME or not _TARGET_NAME.match(name):
        raise ConfigInvalidError(
            "a target name is lower-case letters, digits and single underscores, starting "
            f"with a letter, at most {_MAX_TARGET_NAME} characters",
            {"key": "target", "target": name[:_MAX_TARGET_NAME]},
        )
    return name


def section_for(target: str) -> str:
    """The Airflow configuration section of ``target``."""
    return SECTION if target == DEFAULT_TARGET else f"{SECTION}_{target}"


def dag_prefix(target: str) -> str:
    """What every DAG id of ``target`` starts with."""
    return "migronaut_" if target == DEFAULT_TARGET else f"migronaut_{target}__"


def dag_id_for(migration: str, target: str = DEFAULT_TARGET) -> str:
    """The id of a background migration's DAG."""
    return f"{dag_prefix(target)}bg__{migration}"


def migration_of_dag(dag_id: str) -> tuple[str, str] | None:
    """The target and migration of a background migration's DAG id; None for any other DAG."""
    match = _MIGRATION_DAG.match(dag_id)
    if match is None:
        return None
    return match.group("target") or DEFAULT_TARGET, match.group("migration")


_MIGRATION_DAG = re.compile(r"^migronaut_(?:(?P<target>[a-z0-9_]+?)__)?bg__(?P<migration>.+)$")


@dataclass(frozen=True)
class TargetSettings:
    """One target's settings, resolved (see the module's docstring for the order).

    :param migronaut_config: the core's config keys set by arguments or Airflow's
        configuration; ``migronaut.toml`` beside the migrations folder fills the rest
        when the kit is built (:attr:`config` shows the result).
    :param asset_host: the host the assets' URIs name; None: the connection's.
    :param authorize_runs: how a control run's triggering user is checked
        (:mod:`migronaut_airflow.authorization`).
    """

    name: str
    mongo_conn_id: str
    migrations_dir: str
    database: str | None = None
    migronaut_config: Mapping[str, Any] = field(default_factory=dict)
    lane_pool: str | None = None
    stall: timedelta = timedelta(seconds=STALL_SECONDS)
    drift_schedule: timedelta | str | None = DEFAULT_DRIFT_SCHEDULE
    asset_host: str | None = None
    asset_port: int | None = None
    cache_dir: Path | None = None
    authorize_runs: str = AUTH_MANAGER

    @cached_property
    def config(self) -> Config:
        """The core's config as the hook builds it (arguments over ``migronaut.toml``).

        :raises ConfigInvalidError: naming the key and its source.
        """
        return load_config(
            {**self.migronaut_config, "migrations_dir": self.migrations_dir},
            env={},
            cwd=Path(self.migrations_dir).parent,
        )

    @property
    def collection_prefix(self) -> str:
        """The prefix of migronaut's background collections, wherever it was set."""
        return self.config.background_collection

    def dag_id(self, kind: str) -> str:
        """The id of one of the target's DAGs: ``up``, ``control``, ``drift``, …"""
        return f"{dag_prefix(self.name)}{kind}"

    def background_dag_id(self, migration: str) -> str:
        return dag_id_for(migration, self.name)

    def operator_args(self) -> OperatorArgs:
        return {
            "target": self.name,
            "mongo_conn_id": self.mongo_conn_id,
            "migrations_dir": self.migrations_dir,
            "database": self.database,
            "migronaut_config": dict(self.migronaut_config),
        }


def target_names(airflow_conf: Any = None) -> list[str]:
    """The default target and every one ``[migronaut] targets`` lists (comma separated).

    :raises ConfigInvalidError: a listed name is not a valid target name.
    """
    listed = _airflow_section(SECTION, airflow_conf).get("targets", "")
    names = [DEFAULT_TARGET]
    for name in (item.strip() for item in listed.split(",")):
        if name and name not in names:
            names.append(check_target_name(name))
    return names


def resolve_target(
    name: str = DEFAULT_TARGET,
    arguments: Mapping[str, Any] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    airflow_conf: Any = None,
    base_folder: Path | None = None,
) -> TargetSettings:
    """Resolve ``name``'s settings from arguments, Airflow's configuration and the rest.

    :param arguments: provider keys (``conn_id``, ``migrations_dir``, …) and
        ``migronaut_config`` (the core's keys); None values count as unset.
    :param env: for the default target's ``MIGRONAUT_*`` variables (``os.environ``).
    :param base_folder: where the default migrations folders are (``migrations/``,
        ``migrations_<target>/``) when nothing names one; default: Airflow's dags folder.
    :raises ConfigInvalidError: naming the key and where it was set, never its value.
    """
    check_target_name(name)
    # None counts as unset, except a drift schedule: there it means "manual runs only".
    given = {
        key: value
        for key, value in (arguments or {}).items()
        if value is not None or key == "drift_schedule"
    }
    section = section_for(name)
    configured = _airflow_section(section, airflow_conf)
    source = f"Airflow configuration [{section}]"
    unknown_global = GLOBAL_KEYS & configured.keys() if name != DEFAULT_TARGET else set()
    if unknown_global:
        raise ConfigInvalidError(
            f"{sorted(unknown_global)[0]!r} belongs in [{SECTION}], not [{section}]",
            {"key": sorted(unknown_global)[0], "source": source},
        )
    legacy = _legacy_settings(env) if name == DEFAULT_TARGET else {}
    provider: dict[str, Any] = {
        **legacy,
        **{key: value for key, value in configured.items() if key in PROVIDER_KEYS},
        **{key: value for key, value in given.items() if key in PROVIDER_KEYS},
    }
    # Where each provider key was set, for errors: a variable's name, else the key.
    origin = {key: var for var, key in LEGACY_ENV.items() if key in legacy}
    origin.update({key: key for key in provider if key in configured or key in given})
    core_from_conf = {
        key: value
        for key, value in configured.items()
        if key not in PROVIDER_KEYS and key not in GLOBAL_KEYS
    }
    migronaut_config = {
        **config_from_text(core_from_conf, source),
        **dict(given.get("migronaut_config") or {}),
    }
    database = provider.get("database") or migronaut_config.pop("database", None)
    return TargetSettings(
        name=name,
        mongo_conn_id=str(provider.get("conn_id") or _default_conn_id(name)),
        migrations_dir=str(
            Path(provider.get("migrations_dir") or _default_folder(name, base_folder)).resolve()
        ),
        database=str(database) if database else None,
        migronaut_config=migronaut_config,
        lane_pool=str(provider["lane_pool"]) if provider.get("lane_pool") else None,
        stall=_stall(provider.get("stall_seconds"), origin.get("stall_seconds", "")),
        drift_schedule=_drift_schedule(provider, given),
        asset_host=str(provider["asset_host"]) if provider.get("asset_host") else None,
        asset_port=_port(provider.get("asset_port"), origin.get("asset_port", "")),
        cache_dir=_cache_dir(provider.get("cache_dir")),
        authorize_runs=check_policy(str(provider.get("authorize_runs") or AUTH_MANAGER)),
    )


def _airflow_section(section: str, airflow_conf: Any) -> dict[str, str]:
    """A configuration section as text, environment variables included; {} when absent.

    Airflow's ``getsection`` ignores ``AIRFLOW__<SECTION>__*`` variables of a
    section no file declares, so their keys are gathered here too.
    """
    if airflow_conf is None:
        from airflow.configuration import conf as airflow_conf  # noqa: PLC0415 - parse-time cost
    keys = set(airflow_conf.getsection(section) or {})
    prefix = f"AIRFLOW__{section.upper()}__"
    for variable in os.environ:
        if variable.startswith(prefix):
            keys.add(
                variable.removeprefix(prefix).removesuffix("_CMD").removesuffix("_SECRET").lower()
            )
    found = {}
    for key in sorted(keys):
        value = airflow_conf.get(section, key, fallback=None)
        if value not in (None, ""):
            found[key] = str(value)
    return found


def _legacy_settings(env: Mapping[str, str] | None) -> dict[str, str]:
    environment = os.environ if env is None else env
    return {key: environment[var] for var, key in LEGACY_ENV.items() if environment.get(var)}


def _default_conn_id(target: str) -> str:
    return "migronaut_default" if target == DEFAULT_TARGET else f"migronaut_{target}"


def _default_folder(target: str, base_folder: Path | None) -> Path:
    if base_folder is None:
        from airflow.configuration import conf  # noqa: PLC0415 - parse-time cost

        base_folder = Path(conf.get("core", "dags_folder"))
    return base_folder / ("migrations" if target == DEFAULT_TARGET else f"migrations_{target}")


def _stall(value: Any, key: str) -> timedelta:
    if value is None or value == "":
        return timedelta(seconds=STALL_SECONDS)
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    else:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            raise ConfigInvalidError(f"{key} must be a number of seconds", {"key": key}) from None
    try:
        return timedelta(seconds=stall_watch_settings(stall_seconds=seconds).stall_seconds)
    except ConfigInvalidError as error:  # out of the watch's range, in its own words
        raise ConfigInvalidError(f"{key}: {error.message}", {"key": key}) from None


def _drift_schedule(
    provider: Mapping[str, Any], given: Mapping[str, Any]
) -> timedelta | str | None:
    if "drift_schedule" in given:
        return given["drift_schedule"]  # type: ignore[no-any-return]
    text = provider.get("drift_schedule")
    if text is None or text == "":
        return DEFAULT_DRIFT_SCHEDULE
    return None if str(text).strip().lower() == "none" else str(text).strip()


def _port(value: Any, key: str) -> int | None:
    if value is None or value == "":
        return None
    try:
        port = int(value)
    except (TypeError, ValueError):
        port = 0
    if not 1 <= port <= 65535:
        raise ConfigInvalidError(f"{key} must be a port number", {"key": key})
    return port


def _cache_dir(value: Any) -> Path | None:
    """The catalog cache's folder: the given one, none for ``off``, else the default."""
    if value is None or value == "":
        return default_cache_dir()
    if str(value).strip().lower() in ("off", "none", "false"):
        return None
    return Path(value)
