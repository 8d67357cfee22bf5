"""Migration files: names, discovery, loading, checksums and templates.

A migration is a Python module named ``<UTC timestamp>_<slug>.py`` in the
migrations directory; the file name without ``.py`` is the migration's id and the
timestamp orders them. A *regular* migration defines ``up(ctx)`` and optionally
``down(ctx)``; a *background* migration defines a module-level ``background``
mapping instead (its functions are read by the background engine).
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import pendulum

from migronaut_core.clock import utc_now
from migronaut_core.errors import (
    ConfigInvalidError,
    MigrationFileNotFoundError,
    MigrationInvalidExportError,
    MigrationInvalidNameError,
)

MAX_NAME_LENGTH = 120
MAX_DESCRIPTION_LENGTH = 500
_NAME = re.compile(r"^\d{14}_[a-z0-9]+(?:_[a-z0-9]+)*$")
_SLUG_SEPARATORS = re.compile(r"[\s\-]+")
_SLUG = re.compile(r"^[a-z0-9]+(?:_[a-z0-9]+)*$")

MigrationKind = Literal["regular", "background"]
MigrationFunction = Callable[[Any], object]


@dataclass(frozen=True, slots=True)
class MigrationFile:
    """A migration file found on disk (not loaded yet)."""

    name: str
    path: Path

    def checksum(self) -> str:
        return file_checksum(self.path)


@dataclass(frozen=True, slots=True)
class LoadedMigration:
    """What a migration module exports, checked.

    ``up`` is ``None`` for a background migration, whose ``background`` mapping
    and functions the engine resolves; ``down`` is ``None`` when irreversible.
    """

    name: str
    kind: MigrationKind
    checksum: str
    module: ModuleType
    up: MigrationFunction | None
    down: MigrationFunction | None
    description: str | None
    requires: tuple[str, ...]
    use_transaction: bool | None

    @property
    def reversible(self) -> bool:
        return self.down is not None


def validate_name(name: str) -> str:
    """Return ``name`` if it is a well-formed migration id, else raise.

    Ids never contain path separators, dots or other characters that could
    reach outside the migrations directory.
    """
    if not isinstance(name, str) or len(name) > MAX_NAME_LENGTH or not _NAME.match(name):
        shown = name[:MAX_NAME_LENGTH] if isinstance(name, str) else type(name).__name__
        raise MigrationInvalidNameError(
            f"invalid migration name {shown!r}: expected <14-digit UTC timestamp>_<slug> "
            f"(lowercase letters, digits, single underscores; at most {MAX_NAME_LENGTH} "
            "characters, no dots or path separators)",
            {"name": shown},
        )
    return name


def slugify(text: str) -> str:
    """Turn a human title (``"Split user names"``) into a slug (``split_user_names``)."""
    slug = _SLUG_SEPARATORS.sub("_", text.strip().lower())
    if not _SLUG.match(slug) or len(slug) > MAX_NAME_LENGTH - 15:
        raise MigrationInvalidNameError(
            f"invalid migration slug {text[:80]!r}: use letters, digits, spaces, dashes or "
            "single underscores",
            {"name": text[:80]},
        )
    return slug


def discover(directory: Path) -> list[MigrationFile]:
    """List the migration files of ``directory``, oldest first.

    Files starting with ``_`` or ``.`` (``__init__.py``, helpers) are not
    migrations. Any other ``.py`` file with a malformed name is an error, so a
    typo never silently skips a migration.
    """
    if not directory.is_dir():
        return []
    files = []
    for path in directory.iterdir():
        if path.suffix != ".py" or path.name.startswith(("_", ".")) or not path.is_file():
            continue
        files.append(MigrationFile(name=validate_name(path.stem), path=path))
    return sorted(files, key=lambda item: item.name)


def find(directory: Path, name: str) -> MigrationFile:
    """Return the file of migration ``name``, or raise MigrationFileNotFoundError."""
    validate_name(name)
    path = directory / f"{name}.py"
    if not path.is_file():
        raise MigrationFileNotFoundError(
            f"migration file {name}.py not found in {directory}", {"name": name}
        )
    return MigrationFile(name=name, path=path)


def file_checksum(path: Path) -> str:
    """Return the sha256 of a file's bytes, hex encoded."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load(file: MigrationFile) -> LoadedMigration:
    """Import a migration module afresh and check what it exports.

    :raises MigrationInvalidExportError: the module fails to import, or its
        exports are missing or of the wrong type.
    """
    checksum = file.checksum()
    module = _import_fresh(file)
    return _read_exports(file.name, checksum, module)


def _import_fresh(file: MigrationFile) -> ModuleType:
    module_name = f"migronaut_migrations.m_{file.name}"
    spec = importlib.util.spec_from_file_location(module_name, file.path)
    if spec is None or spec.loader is None:
        raise MigrationInvalidExportError(
            f"migration {file.name} cannot be imported", {"name": file.name}
        )
    module = importlib.util.module_from_spec(spec)
    # Registered while it runs so dataclasses and pickling inside it work.
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise MigrationInvalidExportError(
            f"migration {file.name} failed to import: {type(exc).__name__}: {_short(exc)}",
            {"name": file.name, "error_type": type(exc).__name__},
        ) from exc
    finally:
        sys.modules.pop(module_name, None)
    return module


def _read_exports(name: str, checksum: str, module: ModuleType) -> LoadedMigration:
    up = getattr(module, "up", None)
    down = getattr(module, "down", None)
    background = getattr(module, "background", None)
    if background is not None and up is not None:
        _invalid(name, "defines both `up` and `background`: a migration is one or the other")
    if background is None and up is None:
        _invalid(name, "defines neither `up(ctx)` nor a `background` mapping")
    if background is not None and not isinstance(background, Mapping):
        _invalid(name, "`background` must be a mapping (dict)")
    for label, function in (("up", up), ("down", down)):
        if function is not None and not callable(function):
            _invalid(name, f"`{label}` must be a function")
    description = getattr(module, "description", None)
    if description is not None and (
        not isinstance(description, str) or len(description) > MAX_DESCRIPTION_LENGTH
    ):
        _invalid(name, f"`description` must be a string of at most {MAX_DESCRIPTION_LENGTH}")
    use_transaction = getattr(module, "use_transaction", None)
    if use_transaction is not None and not isinstance(use_transaction, bool):
        _invalid(name, "`use_transaction` must be True or False")
    return LoadedMigration(
        name=name,
        kind="background" if background is not None else "regular",
        checksum=checksum,
        module=module,
        up=up,
        down=down,
        description=description,
        requires=_requires(name, getattr(module, "requires", ())),
        use_transaction=use_transaction,
    )


def _requires(name: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
        _invalid(name, "`requires` must be a list of migration names")
    requires: tuple[str, ...] = tuple(value)  # type: ignore[arg-type]
    for required in requires:
        try:
            validate_name(required)
        except MigrationInvalidNameError as exc:
            raise MigrationInvalidExportError(
                f"migration {name}: `requires` names an invalid migration id",
                {"name": name, "requires": required[:MAX_NAME_LENGTH]},
            ) from exc
    if name in requires:
        _invalid(name, "`requires` names the migration itself")
    return requires


def _invalid(name: str, problem: str) -> None:
    raise MigrationInvalidExportError(f"migration {name} {problem}", {"name": name})


def _short(exc: BaseException, limit: int = 200) -> str:
    text = str(exc)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def new_name(slug: str, now: datetime | None = None) -> str:
    """Return a migration id for ``slug`` stamped with the UTC time ``now``."""
    moment = pendulum.instance(now) if now is not None else utc_now()
    return validate_name(f"{moment.in_timezone('UTC').format('YYYYMMDDHHmmss')}_{slug}")


def render_template(
    name: str, *, background: bool = False, update: bool = False, collection: str = "items"
) -> str:
    """Return the source of a new migration file.

    :param background: a background migration with ``migrate``/``revert`` functions.
    :param update: a background migration written as an update pipeline (implies
        ``background``); it loads and runs as it is.
    """
    if update:
        template = _UPDATE_TEMPLATE
    else:
        template = _BACKGROUND_TEMPLATE if background else _REGULAR_TEMPLATE
    return template.format(name=name, collection=collection)


def write_new(
    directory: Path,
    title: str,
    *,
    background: bool = False,
    update: bool = False,
    now: datetime | None = None,
) -> Path:
    """Create a migration file from its template and return its path.

    :param update: an update-pipeline background migration (implies ``background``).
    :raises ConfigInvalidError: the file exists already (never overwritten).
    """
    name = new_name(slugify(title), now)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.py"
    try:
        with path.open("x", encoding="utf-8") as handle:
            handle.write(render_template(name, background=background, update=update))
    except FileExistsError as exc:
        raise ConfigInvalidError(
            f"migration file {path.name} exists already", {"key": "name", "name": name}
        ) from exc
    return path


_REGULAR_TEMPLATE = '''"""{name}."""

description = ""


def up(ctx):
    """Apply the change. ``ctx.db`` is the database; ``ctx.session`` is set in a transaction."""
    ctx.db["{collection}"].create_index("created_at")


def down(ctx):
    """Undo ``up``. Delete this function if the change cannot be undone."""
    ctx.db["{collection}"].drop_index("created_at_1")
'''

_BACKGROUND_TEMPLATE = '''"""{name}: a background migration.

Registered by ``migronaut up``; its documents are rewritten later, in partitions,
by parallel lanes while the application keeps writing.
"""

description = ""
requires = []

background = {{
    "collection": "{collection}",
    "field": "_v",
    "from": 1,
    "to": 2,
    "batch_size": 500,
    "max_parallel": 4,
}}


def migrate(doc, ctx):
    """Return the document in its new shape (``doc`` is a copy; changing it is fine)."""
    return doc


def revert(doc, ctx):
    """Return the document in its old shape. Delete this function if irreversible."""
    return doc
'''

_UPDATE_TEMPLATE = '''"""{name}: a background migration written as an update pipeline.

Registered by ``migronaut up``; its documents are rewritten later, in partitions,
by parallel lanes while the application keeps writing. Each batch is one
server-side ``update_many`` over a range of ``_id``s: no document crosses the
wire, and the server applies each document's update to its current state.
"""

description = ""
requires = []

background = {{
    "collection": "{collection}",
    "field": "_v",
    "from": 1,
    "to": 2,
    "max_parallel": 4,
    # Update-pipeline stages only: $set/$addFields, $unset, $replaceWith/$replaceRoot,
    # $project. The engine appends the version stamp (and, with revision_field, the
    # revision increment): no stage may write "_v".
    "update": [
        {{"$set": {{"full_name": "$name"}}}},
        {{"$unset": "name"}},
    ],
    # The way back; delete it if the change cannot be undone.
    "revert_update": [
        {{"$set": {{"name": "$full_name"}}}},
        {{"$unset": "full_name"}},
    ],
}}
'''
