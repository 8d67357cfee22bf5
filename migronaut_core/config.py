"""Configuration: where the database is, where migrations live, what to call things.

Sources, lowest precedence first: built-in defaults → ``migronaut.toml`` in the
working directory (or else the ``[tool.migronaut]`` table of its ``pyproject.toml``)
→ environment variables → keyword arguments. Every source is validated the same
way: an unknown key or a wrong type is a :class:`ConfigInvalidError` naming the key
and where it came from, raised before anything connects or writes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import UnionType
from typing import Any, Final, Literal, TypeAlias, TypeVar

from pymongo.uri_parser import parse_uri

from migronaut_core.checks import (
    NestedSettingError,
    check_choice,
    check_collection_name,
    check_int,
    check_number,
    choices,
    read_toml,
)
from migronaut_core.definitions import check_inline
from migronaut_core.errors import ConfigInvalidError
from migronaut_core.health_limits import DEFAULT_HEALTH, HealthSettings, parse_health
from migronaut_core.windows import Window, parse_windows

CONFIG_FILE = "migronaut.toml"
PYPROJECT_FILE = "pyproject.toml"

#: Environment variables and the keys they set.
ENV_KEYS: Mapping[str, str] = {
    "MIGRONAUT_MONGODB_URI": "uri",
    "MIGRONAUT_DATABASE": "database",
    "MIGRONAUT_MIGRATIONS_DIR": "migrations_dir",
    "MIGRONAUT_ENSURE_INDEXES": "ensure_indexes",
}
#: How an environment variable spells a flag.
_ENV_FLAGS: Mapping[str, bool] = {
    "true": True,
    "1": True,
    "yes": True,
    "on": True,
    "false": False,
    "0": False,
    "no": False,
    "off": False,
}

_DATABASE_NAME = re.compile(r"^[^/\\. \"$*<>:|?\x00]{1,63}$")


#: The default ``background_collection``: the prefix of the background engine's collections.
DEFAULT_BACKGROUND_COLLECTION: Final = "migronaut_background"

#: What ``background_shard_aware`` may be.
ShardAware: TypeAlias = Literal["auto", "off"]
#: What ``background_drift`` may be.
DriftMode: TypeAlias = Literal["poll", "stream", "both"]
#: What ``background_on_drift`` may be.
OnDrift: TypeAlias = Literal["reopen", "report"]
SHARD_AWARE_MODES: Final = choices(ShardAware)
DRIFT_MODES: Final = choices(DriftMode)
ON_DRIFT_MODES: Final = choices(OnDrift)


def _between(low: float, high: float) -> Mapping[str, Any]:
    """A field's metadata: the inclusive range its value must lie in."""
    return {"between": (low, high)}


@dataclass(frozen=True, slots=True)
class Config:
    """Validated settings of one migronaut kit.

    :param uri: MongoDB connection string.
    :param database: database holding the application's data and migronaut's
        bookkeeping; defaults to the URI's default database.
    :param migrations_dir: directory of migration modules; a relative path is
        resolved against the directory of the config file that set it (else the cwd).
    :param changelog_collection: one record per applied migration.
    :param lock_collection: the run lock, coordinator locks and watcher leaders.
    :param background_collection: prefix of the background migration collections
        (``<prefix>``, ``<prefix>_partitions``, ``<prefix>_watch``,
        ``<prefix>_converge_log``, ``<prefix>_drift_events``, ``<prefix>_undo``).
    :param lock_ttl_seconds: how long a lock outlives a holder that stopped renewing it.
    :param use_transaction: run each regular migration and its changelog record in
        one transaction (needs a replica set or sharded cluster).
    :param background_inline: drive background migrations to completion inside ``up``.
    :param server_selection_timeout_ms: how long to look for a usable server.
    :param collections: inline collection definitions, ``{name: {"versioning":
        {"field", "revision_field"}}}`` (see :mod:`migronaut_core.definitions`).
    :param collections_dir: a directory of collection definition files
        (``<name>.toml`` or ``<name>.py``); a relative path is resolved like
        ``migrations_dir``.
    :param background_shard_aware: ``"auto"`` splits a sharded collection along
        its shard key when it can; ``"off"`` keeps ``_id`` ranges everywhere.
    :param background_drift: how drift after completion is found: ``"poll"``
        (verify passes only), ``"stream"`` (the live watcher; verify skips the
        collections a fresh watcher streams) or ``"both"`` (the watcher, and
        verify polls every collection); audit reports dead watchers in either
        stream mode.
    :param background_on_drift: what verify and the watcher do with drift they
        find when not told: ``"reopen"`` the migration or only ``"report"`` it.
    :param ensure_indexes: create the indexes migronaut needs (its own
        collections', and the version indexes ``converge`` makes); ``False``, for
        a user without index-creation rights, only checks that they exist and
        raises :class:`~migronaut_core.errors.IndexMissingError` naming the
        missing ones before anything is written.
    :param background_budget: documents per second every background migration
        writing to this database may write together, shared by ``priority``
        through one bucket on the server (``None``: no budget; see
        :mod:`migronaut_core.background.throttle.budget`).
    :param background_windows: the target's maintenance windows, for every
        background migration without ``windows`` of its own: a list of
        ``{days, from, to, timezone, rate}`` (:mod:`migronaut_core.windows`;
        as text, JSON). Outside every window lanes hold; ``None`` or ``[]``:
        always open.
    :param background_health: the limits of MongoDB's health signals every
        background migration of the target starts from (its own ``health``
        overrides them signal by signal): ``true`` for the defaults, ``false``
        for off, or ``{signal: {soft, hard} | false}`` over the defaults
        (:mod:`migronaut_core.health_limits`; as text, JSON). Checked, ``None``
        means off.
    """

    uri: str = "mongodb://127.0.0.1:27017"
    database: str | None = None
    migrations_dir: Path = Path("migrations")
    changelog_collection: str = "migronaut_changelog"
    lock_collection: str = "migronaut_lock"
    background_collection: str = DEFAULT_BACKGROUND_COLLECTION
    lock_ttl_seconds: float = dataclasses.field(default=60.0, metadata=_between(1, 86_400))
    use_transaction: bool = False
    background_inline: bool = False
    server_selection_timeout_ms: int = dataclasses.field(
        default=10_000, metadata=_between(100, 600_000)
    )
    collections: Mapping[str, Any] | None = dataclasses.field(default=None, hash=False)
    collections_dir: Path | None = None
    background_shard_aware: ShardAware = "auto"
    background_drift: DriftMode = "poll"
    background_on_drift: OnDrift = "reopen"
    ensure_indexes: bool = True
    background_budget: int | None = dataclasses.field(
        default=None, metadata=_between(1, 10_000_000)
    )
    background_windows: tuple[Window, ...] | None = None
    background_health: HealthSettings | None = DEFAULT_HEALTH

    @property
    def background_collections(self) -> BackgroundCollections:
        return BackgroundCollections.from_prefix(self.background_collection)

    @property
    def bookkeeping_collections(self) -> tuple[str, ...]:
        """Every collection migronaut writes its own records to; never migrated."""
        background = self.background_collections
        return (
            self.changelog_collection,
            self.lock_collection,
            background.state,
            background.partitions,
            background.watch,
            background.converge_log,
            background.drift_events,
            background.budget,
            background.undo,
        )

    def database_name(self) -> str:
        """Return the database to use: the configured one, else the URI's default."""
        if self.database:
            return self.database
        try:
            parsed = parse_uri(self.uri)
        except Exception as exc:  # pymongo raises several types for a bad URI
            raise ConfigInvalidError(
                "uri is not a valid MongoDB connection string", {"key": "uri"}
            ) from exc
        name = parsed.get("database")
        if not name:
            raise ConfigInvalidError(
                "database is not set: give `database` (or MIGRONAUT_DATABASE), "
                "or put a default database in the URI",
                {"key": "database"},
            )
        return str(name)


@dataclass(frozen=True, slots=True)
class BackgroundCollections:
    """Names of the collections that hold background migration state.

    ``converge_log``: every index converge created or dropped (what, when, by whom).
    ``drift_events``: where the event-driven drift triggers resume their change streams.
    ``budget``: the target's write budget bucket and its brake (one document each).
    ``undo``: the undo journal, the before-images of documents rewritten by
    migrations with ``undo = "journal"``.
    """

    state: str
    partitions: str
    watch: str
    converge_log: str
    drift_events: str
    budget: str
    undo: str

    @classmethod
    def from_prefix(cls, prefix: str) -> BackgroundCollections:
        return cls(
            state=prefix,
            partitions=f"{prefix}_partitions",
            watch=f"{prefix}_watch",
            converge_log=f"{prefix}_converge_log",
            drift_events=f"{prefix}_drift_events",
            budget=f"{prefix}_budget",
            undo=f"{prefix}_undo",
        )


def _accepts(hint: Any) -> tuple[type, ...]:
    """The Python types a key accepts, read off its annotation.

    ``None`` is never given (a ``None`` override means "not set"); a path may
    come as text, a float as an int, a ``Literal`` of strings as text.
    """
    if typing.get_origin(hint) in (typing.Union, UnionType):
        members = [member for member in typing.get_args(hint) if member is not type(None)]
        return tuple(kind for member in members for kind in _accepts(member))
    if typing.get_origin(hint) is Literal:
        return (str,)
    if hint is Path:
        return (str, Path)
    if hint is float:
        return (int, float)
    if typing.get_origin(hint) is tuple:
        return (list, tuple)
    origin = typing.get_origin(hint)
    return (origin if origin is not None else hint,)


_HINTS: Final = typing.get_type_hints(Config)
_FIELDS: Final = dataclasses.fields(Config)
#: What each key accepts, derived from :class:`Config`.
_FIELD_TYPES: Final[Mapping[str, tuple[type, ...]]] = {
    **{field.name: _accepts(_HINTS[field.name]) for field in _FIELDS},
    "background_health": (bool, Mapping, HealthSettings),
}
#: Keys holding a path, resolved against the directory of the source that set them.
_PATH_KEYS: Final = tuple(key for key, accepted in _FIELD_TYPES.items() if Path in accepted)
#: Keys holding maintenance windows (a list as given, a tuple of windows once checked).
_WINDOW_KEYS: Final = ("background_windows",)
#: Keys holding health limits (a flag or mapping as given, settings once checked).
_HEALTH_KEYS: Final = ("background_health",)
#: Keys whose text form (Airflow's configuration) is JSON.
_JSON_KEYS: Final = (*_WINDOW_KEYS, *_HEALTH_KEYS)
#: Keys whose values are one of a ``Literal``'s, and those options.
_CHOICES: Final[Mapping[str, tuple[str, ...]]] = {
    field.name: choices(_HINTS[field.name])
    for field in _FIELDS
    if typing.get_origin(_HINTS[field.name]) is Literal
}
#: Numeric keys and their inclusive ranges.
_RANGES: Final[Mapping[str, tuple[float, float]]] = {
    field.name: field.metadata["between"] for field in _FIELDS if "between" in field.metadata
}


def load_config(
    overrides: Mapping[str, Any] | None = None,
    *,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    config_file: Path | str | None = None,
) -> Config:
    """Build a :class:`Config` from files, environment and ``overrides``.

    :param overrides: keyword settings; ``None`` values are ignored.
    :param cwd: where to look for ``migronaut.toml`` / ``pyproject.toml``.
    :param env: environment to read (defaults to ``os.environ``).
    :param config_file: an explicit TOML file; it must exist.
    :raises ConfigInvalidError: on any unknown key, wrong type or bad value.
    """
    base = Path(cwd) if cwd is not None else Path.cwd()
    values: dict[str, Any] = {}
    for source, settings, relative_to in _sources(base, env, config_file, overrides):
        for key, value in settings.items():
            values[key] = _checked(key, value, source)
            if key in _PATH_KEYS:
                values[key] = (relative_to / Path(value)).resolve()
            elif key == "collections":
                values[key] = dict(value)
            elif key in _WINDOW_KEYS:
                values[key] = _windows(key, value, source)
            elif key in _HEALTH_KEYS:
                values[key] = _health(key, value, source)
    if "migrations_dir" not in values:
        values["migrations_dir"] = (base / "migrations").resolve()
    config = Config(**values)
    _check_values(config)
    return config


def _sources(
    base: Path,
    env: Mapping[str, str] | None,
    config_file: Path | str | None,
    overrides: Mapping[str, Any] | None,
) -> list[tuple[str, Mapping[str, Any], Path]]:
    sources: list[tuple[str, Mapping[str, Any], Path]] = []
    file_settings = _file_settings(base, config_file)
    if file_settings is not None:
        sources.append(file_settings)
    environment = os.environ if env is None else env
    from_env = {key: environment[var] for var, key in ENV_KEYS.items() if environment.get(var)}
    sources.append(("environment", from_env, base))
    given = {key: value for key, value in (overrides or {}).items() if value is not None}
    sources.append(("arguments", given, base))
    return sources


def _file_settings(
    base: Path, config_file: Path | str | None
) -> tuple[str, Mapping[str, Any], Path] | None:
    if config_file is not None:
        path = Path(config_file)
        if not path.is_file():
            raise ConfigInvalidError(
                f"config file {path} does not exist", {"key": "config_file", "path": str(path)}
            )
        return str(path), read_toml(path, key="config_file"), path.parent.resolve()
    own = base / CONFIG_FILE
    if own.is_file():
        return str(own), read_toml(own, key="config_file"), base.resolve()
    pyproject = base / PYPROJECT_FILE
    if pyproject.is_file():
        table = read_toml(pyproject, key="config_file").get("tool", {}).get("migronaut")
        if table is not None:
            if not isinstance(table, dict):
                raise ConfigInvalidError(
                    f"[tool.migronaut] in {pyproject} must be a table", {"key": "tool.migronaut"}
                )
            return f"{pyproject} [tool.migronaut]", table, base.resolve()
    return None


def config_from_text(values: Mapping[str, str], source: str) -> dict[str, Any]:
    """Config keys given as text (an INI file, environment variables) as their types.

    For a host that keeps settings as strings, such as Airflow's configuration: a
    flag reads true/false, 1/0, yes/no or on/off, a number reads as one, a path
    or name stays text. Whatever comes back passes :func:`load_config` as it is.

    :param source: where the values came from, named in errors.
    :raises ConfigInvalidError: naming the key and the source (never the value)
        for an unknown key or text that is not of the key's type.
    """
    return {key: _parse_text(key, text, source) for key, text in values.items()}


def _parse_text(key: str, text: str, source: str) -> Any:
    types = _FIELD_TYPES.get(key)
    if key in _JSON_KEYS:
        try:
            return json.loads(text)
        except ValueError:
            shape = "list of windows" if key in _WINDOW_KEYS else "true, false or mapping"
            raise ConfigInvalidError(
                f"config key {key!r} in {source} must be JSON: a {shape}",
                {"key": key, "source": source},
            ) from None
    if types is None or Mapping in types:
        return _checked(key, text, source)  # unknown, or not expressible as text
    stripped = text.strip()
    if bool in types:
        flag = _ENV_FLAGS.get(stripped.lower())
        if flag is None:
            raise ConfigInvalidError(
                f"config key {key!r} in {source} must be true or false",
                {"key": key, "source": source},
            )
        return flag
    for number in (int, float):
        if number in types:
            try:
                return number(stripped)
            except ValueError:
                continue
    if str in types:
        return stripped
    expected = " or ".join(t.__name__ for t in types)
    raise ConfigInvalidError(
        f"config key {key!r} in {source} must be {expected}", {"key": key, "source": source}
    )


_Parsed = TypeVar("_Parsed")


def _windows(key: str, value: Any, source: str) -> tuple[Window, ...]:
    """A window list checked as a background spec's ``windows`` is, named by its key
    (windows already checked, as :func:`replace` may pass back, are kept)."""
    if isinstance(value, tuple) and all(isinstance(item, Window) for item in value):
        return value
    return _nested(key, source, parse_windows, value)


def _health(key: str, value: Any, source: str) -> HealthSettings | None:
    """Health limits checked as a background spec's ``health`` is, named by its key
    (settings already checked, as :func:`replace` may pass back, are kept)."""
    if isinstance(value, HealthSettings):
        return value
    return _nested(key, source, parse_health, value)


def _nested(key: str, source: str, parse: Callable[[Any], _Parsed], value: Any) -> _Parsed:
    """``parse(value)``, its :class:`~migronaut_core.checks.NestedSettingError` named by the
    whole key and the source, never the value."""
    try:
        return parse(value)
    except NestedSettingError as error:
        where = ".".join((key, *error.path))
        raise ConfigInvalidError(
            f"config key {where} in {source} {error.problem}", {"key": where, "source": source}
        ) from None


def _checked(key: str, value: Any, source: str) -> Any:
    types = _FIELD_TYPES.get(key)
    if types is None:
        known = ", ".join(sorted(_FIELD_TYPES))
        raise ConfigInvalidError(
            f"unknown config key {key!r} in {source} (known keys: {known})",
            {"key": key, "source": source},
        )
    if source == "environment":
        return _from_environment(key, value, types)
    # bool is an int in Python; a flag is never a number and a number never a flag.
    is_bool = isinstance(value, bool)
    if not isinstance(value, types) or (is_bool and bool not in types):
        expected = " or ".join(t.__name__ for t in types)
        raise ConfigInvalidError(
            f"config key {key!r} in {source} must be {expected}, not {type(value).__name__}",
            {"key": key, "source": source},
        )
    return value


def _from_environment(key: str, value: str, types: tuple[type, ...]) -> Any:
    """An environment variable's text as the key's type (a flag: true/false, 1/0, …)."""
    if bool not in types:
        return value
    flag = _ENV_FLAGS.get(value.strip().lower())
    if flag is None:
        variable = next(name for name, target in ENV_KEYS.items() if target == key)
        raise ConfigInvalidError(
            f"{variable} must be true or false", {"key": key, "source": "environment"}
        )
    return flag


def _check_values(config: Config) -> None:
    if not config.uri.startswith(("mongodb://", "mongodb+srv://")):
        raise ConfigInvalidError("uri must start with mongodb:// or mongodb+srv://", {"key": "uri"})
    if config.database is not None and not _DATABASE_NAME.match(config.database):
        raise ConfigInvalidError(
            "database is not a valid MongoDB database name", {"key": "database"}
        )
    for key, name, label in _collection_names(config):
        check_collection_name(key, name, database=config.database, label=label)
    names = config.bookkeeping_collections
    if len(set(names)) != len(names):
        raise ConfigInvalidError(
            "changelog_collection, lock_collection and background_collection must not overlap",
            {"key": "changelog_collection"},
        )
    for key, (low, high) in _RANGES.items():
        if getattr(config, key) is None:
            continue
        if _FIELD_TYPES[key] == (int,):
            check_int(key, getattr(config, key), int(low), int(high))
        else:
            check_number(key, getattr(config, key), low, high)
    for key, options in _CHOICES.items():
        check_choice(key, getattr(config, key), options)
    if config.collections is not None:
        check_inline(config.collections, reserved=config.bookkeeping_collections)


def _collection_names(config: Config) -> Iterator[tuple[str, str, str | None]]:
    """Every collection name the config makes: the key that makes it, and how to name it."""
    yield "changelog_collection", config.changelog_collection, None
    yield "lock_collection", config.lock_collection, None
    prefix = config.background_collection
    for name in dataclasses.astuple(config.background_collections):
        suffix = name[len(prefix) :]
        label = f"background_collection (with {suffix!r} appended)" if suffix else None
        yield "background_collection", name, label


def replace(config: Config, **changes: Any) -> Config:
    """Return ``config`` with ``changes`` applied and validated again."""
    for key, value in changes.items():
        _checked(key, value, "arguments")
        if key in _PATH_KEYS:
            changes[key] = Path(value)
        elif key in _WINDOW_KEYS:
            changes[key] = _windows(key, value, "arguments")
        elif key in _HEALTH_KEYS:
            changes[key] = _health(key, value, "arguments")
    updated = dataclasses.replace(config, **changes)
    _check_values(updated)
    return updated
