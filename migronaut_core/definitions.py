"""Collection definitions: what the application declares about its collections.

A definition names a collection and declares its ``versioning``: the version
field background migrations over it read and stamp, and optionally the
application's revision field. Background migration specs on a declared
collection take both from the definition (a spec that says otherwise is a
:class:`~migronaut_core.errors.ConfigInvalidError`), and
:func:`~migronaut_core.background.indexes.converge` creates the version index they read
through.

Definitions come from the ``collections`` config key (inline) and from the
files of ``collections_dir``, or both::

    # migronaut.toml
    [collections.users]
    versioning = { field = "_v", revision_field = "rev" }

    # collections/orders.toml            (the file name is the collection's name)
    versioning = { field = "schema_version" }

    # collections/events.py              (a module: ``versioning`` and, optionally, ``name``)
    name = "events.2024"
    versioning = {"field": "_v"}

In a directory, files starting with ``_`` or ``.`` and files that are neither
``.toml`` nor ``.py`` are skipped. A file's ``name`` overrides its file name.
A definition without ``versioning`` declares nothing about versions.
migronaut's own bookkeeping collections can never be declared, and a name
declared twice is an error.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, cast

from migronaut_core.checks import collection_name_problem, field_name_problem, read_toml
from migronaut_core.errors import ConfigInvalidError
from migronaut_core.json_shape import to_json_dict

__all__ = [
    "DEFAULT_VERSION_FIELD",
    "CollectionDefinition",
    "Versioning",
    "check_inline",
    "load_definitions",
]

DEFAULT_VERSION_FIELD: Final = "_v"

_DEFINITION_KEYS: Final = ("name", "versioning")
_VERSIONING_KEYS: Final = ("field", "revision_field")


@dataclass(frozen=True, slots=True)
class Versioning:
    """How documents of a collection carry their schema version.

    :param field: the version field (a top-level field name, never ``_id``).
    :param revision_field: the application's revision counter, or ``None``.
    """

    field: str = DEFAULT_VERSION_FIELD
    revision_field: str | None = None

    def to_dict(self) -> dict[str, str | None]:
        """Return the ``{"field", "revision_field"}`` mapping a background spec is pinned to."""
        return cast("dict[str, str | None]", to_json_dict(self))


@dataclass(frozen=True, slots=True)
class CollectionDefinition:
    """One declared collection.

    :param name: the collection's name.
    :param versioning: its versioning, or ``None`` when it declares none.
    :param source: where it was declared (``config`` or a file path), for messages.
    """

    name: str
    versioning: Versioning | None
    source: str


def _invalid(source: str, problem: str, key: str) -> ConfigInvalidError:
    return ConfigInvalidError(f"collection definition in {source}: {problem}", {"key": key})


def _check_collection_name(name: Any, source: str) -> str:
    problem = collection_name_problem(name)
    if problem is not None:
        raise _invalid(source, f"the collection name {problem}", "name")
    return str(name)


def _check_field(value: Any, source: str, key: str) -> str:
    problem = field_name_problem(value)
    if problem is not None:
        raise _invalid(source, f"versioning.{key} {problem}", key)
    return str(value)


def _versioning(value: Any, source: str) -> Versioning | None:
    if value is None or value is False:
        return None
    if value is True:
        return Versioning()
    if not isinstance(value, Mapping):
        raise _invalid(source, "versioning must be a table (mapping)", "versioning")
    for key in value:
        if key not in _VERSIONING_KEYS:
            raise _invalid(
                source,
                f"versioning.{str(key)[:60]} is not a known key "
                f"(known: {', '.join(_VERSIONING_KEYS)})",
                "versioning",
            )
    field = _check_field(value.get("field", DEFAULT_VERSION_FIELD), source, "field")
    revision = value.get("revision_field")
    if revision is not None:
        revision = _check_field(revision, source, "revision_field")
        if revision == field:
            raise _invalid(source, "versioning.revision_field must differ from field", "field")
    return Versioning(field=field, revision_field=revision)


def _definition(
    name: Any, body: Mapping[str, Any], source: str, reserved: Collection[str]
) -> CollectionDefinition:
    for key in body:
        if key not in _DEFINITION_KEYS:
            raise _invalid(
                source,
                f"{str(key)[:60]!r} is not a known key (known: {', '.join(_DEFINITION_KEYS)})",
                str(key)[:60],
            )
    checked = _check_collection_name(body.get("name", name), source)
    if checked in reserved:
        raise _invalid(
            source,
            f"{checked} is one of migronaut's own collections and cannot be declared",
            "name",
        )
    return CollectionDefinition(checked, _versioning(body.get("versioning"), source), source)


def check_inline(collections: Any, *, reserved: Collection[str] = ()) -> list[CollectionDefinition]:
    """Validate the ``collections`` config mapping and return its definitions.

    :param collections: ``{name: {"versioning": {...}}}``.
    :param reserved: collection names that may not be declared (bookkeeping).
    :raises ConfigInvalidError: on any malformed definition.
    """
    if not isinstance(collections, Mapping):
        raise ConfigInvalidError(
            "config key 'collections' must be a table of collection definitions",
            {"key": "collections"},
        )
    definitions = []
    for name, body in collections.items():
        source = f"config [collections.{str(name)[:60]}]"
        if not isinstance(body, Mapping):
            raise _invalid(source, "a definition must be a table (mapping)", "collections")
        definitions.append(_definition(name, body, source, reserved))
    return definitions


def _read_module(path: Path) -> Mapping[str, Any]:
    module_name = f"migronaut_definitions.d_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise _invalid(str(path), "cannot be imported", "collections_dir")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise _invalid(
            str(path), f"failed to import ({type(exc).__name__})", "collections_dir"
        ) from exc
    finally:
        sys.modules.pop(module_name, None)
    return {key: getattr(module, key) for key in _DEFINITION_KEYS if hasattr(module, key)}


def _directory(directory: Path, reserved: Collection[str]) -> list[CollectionDefinition]:
    if not directory.is_dir():
        raise ConfigInvalidError(
            f"collections_dir {directory} is not a directory", {"key": "collections_dir"}
        )
    definitions = []
    for path in sorted(directory.iterdir()):
        body: Mapping[str, Any]
        if path.name.startswith(("_", ".")) or not path.is_file():
            continue
        if path.suffix == ".toml":
            body = read_toml(path, key="collections_dir")
        elif path.suffix == ".py":
            body = _read_module(path)
        else:
            continue
        definitions.append(_definition(path.stem, body, str(path), reserved))
    return definitions


def _unique(definitions: Iterable[CollectionDefinition]) -> list[CollectionDefinition]:
    seen: dict[str, CollectionDefinition] = {}
    for definition in definitions:
        first = seen.get(definition.name)
        if first is not None:
            raise ConfigInvalidError(
                f"collection {definition.name} is declared twice ({first.source} and "
                f"{definition.source})",
                {"key": "collections", "collection": definition.name},
            )
        seen[definition.name] = definition
    return list(seen.values())


def load_definitions(
    collections: Mapping[str, Any] | None,
    collections_dir: Path | None,
    *,
    reserved: Collection[str] = (),
) -> list[CollectionDefinition]:
    """Return every declared collection: inline ones first, then the directory's, by name.

    Python definition files are imported (their top-level code runs).

    :raises ConfigInvalidError: a malformed definition, a file that does not
        load, a missing directory, a bookkeeping collection, or a name declared twice.
    """
    found: list[CollectionDefinition] = []
    if collections is not None:
        found.extend(check_inline(collections, reserved=reserved))
    if collections_dir is not None:
        found.extend(_directory(collections_dir, reserved))
    return _unique(found)
