"""What a migrations folder holds, told without importing a single file.

A scheduler that builds one workflow per background migration (Airflow's DAG
processor, at every parse and every task start) must know which files are
background migrations and which collection each rewrites, fast, and without
running user code. :func:`read_catalog` answers from each file's source (a
module-level ``background = {...}``), remembers each answer by the file's
checksum in a small cache file, so an unchanged file is never parsed twice, and
lists every file it could not read by name with a value-free reason instead of
failing the whole folder: one stray helper module must not take every other
migration down with it. ``migronaut up`` still refuses such a file, loudly.
"""

from __future__ import annotations

import ast
import hashlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from migronaut_core.errors import ConfigInvalidError, MigrationInvalidNameError
from migronaut_core.files import validate_name

log = logging.getLogger(__name__)

#: Bumped whenever what a cache entry holds changes; older cache files are ignored.
CACHE_VERSION = 2


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One well-named migration file, as its source reads.

    :param collection: the collection a background migration names literally;
        None for a regular migration, or when the name is computed.
    :param approval: its spec literally sets ``"canary": {..., "approval": True}``
        (its DAG then asks a person to approve the canary).
    """

    name: str
    background: bool
    collection: str | None
    approval: bool = False


@dataclass(frozen=True, slots=True)
class RejectedFile:
    """A ``.py`` file of the folder that is no readable migration, and why (no source text)."""

    file: str
    reason: str


@dataclass(frozen=True, slots=True)
class MigrationCatalog:
    """The migrations of one folder, oldest first, and the files that were set aside."""

    directory: Path
    migrations: tuple[CatalogEntry, ...]
    rejected: tuple[RejectedFile, ...]

    @property
    def background(self) -> tuple[CatalogEntry, ...]:
        return tuple(entry for entry in self.migrations if entry.background)


class _Answer(TypedDict):
    background: bool
    collection: str | None
    error: str | None
    approval: bool


def read_catalog(directory: Path | str, *, cache_dir: Path | str | None = None) -> MigrationCatalog:
    """Read ``directory``'s migrations from their sources, reusing cached answers.

    :param cache_dir: where answers are kept between processes (one small JSON
        file per folder); None keeps nothing. A cache that cannot be read or
        written is ignored: it only saves time.
    :raises ConfigInvalidError: the folder does not exist (naming the path), so a
        misspelled setting is an error, never an empty list of migrations.
    """
    folder = Path(directory)
    if not folder.is_dir():
        raise ConfigInvalidError(
            f"the migrations folder {folder} does not exist or is not a folder",
            {"key": "migrations_dir", "path": str(folder)},
        )
    cache_file = _cache_file(folder, cache_dir)
    known = _load_cache(cache_file)
    seen: dict[str, _Answer] = {}
    migrations: list[CatalogEntry] = []
    rejected: list[RejectedFile] = []
    for path in sorted(folder.iterdir(), key=lambda item: item.name):
        if path.suffix != ".py" or path.name.startswith(("_", ".")) or not path.is_file():
            continue
        try:
            name = validate_name(path.stem)
        except MigrationInvalidNameError:
            rejected.append(
                RejectedFile(path.name, "not a migration name (<14-digit UTC timestamp>_<slug>.py)")
            )
            continue
        source = path.read_bytes()
        checksum = hashlib.sha256(source).hexdigest()
        answer = known.get(checksum) or _read_source(source)
        seen[checksum] = answer
        if answer["error"] is not None:
            rejected.append(RejectedFile(path.name, answer["error"]))
        else:
            migrations.append(
                CatalogEntry(name, answer["background"], answer["collection"], answer["approval"])
            )
    if cache_file is not None and seen != known:
        _store_cache(cache_file, seen)
    return MigrationCatalog(folder, tuple(migrations), tuple(rejected))


def _read_source(source: bytes) -> _Answer:
    try:
        tree = ast.parse(source.decode("utf-8"))
    except UnicodeDecodeError:
        return _regular("not UTF-8 text")
    except SyntaxError as exc:
        return _regular(f"invalid Python (line {exc.lineno})")
    for node in tree.body:
        value = _background_value(node)
        if value is not _NOT_ASSIGNED:
            return {
                "background": True,
                "collection": _literal_collection(value),
                "error": None,
                "approval": _literal_approval(value),
            }
    return _regular(None)


def _regular(error: str | None) -> _Answer:
    return {"background": False, "collection": None, "error": error, "approval": False}


_NOT_ASSIGNED = ast.Constant(value=None)


def _background_value(node: ast.stmt) -> ast.expr | None:
    """The value a module-level ``background = …`` assigns; ``_NOT_ASSIGNED`` for any other."""
    if isinstance(node, ast.Assign) and any(
        isinstance(target, ast.Name) and target.id == "background" for target in node.targets
    ):
        return node.value
    if (
        isinstance(node, ast.AnnAssign)
        and isinstance(node.target, ast.Name)
        and node.target.id == "background"
    ):
        return node.value
    return _NOT_ASSIGNED


def _literal_collection(value: ast.expr | None) -> str | None:
    item = _literal_item(value, "collection")
    if isinstance(item, ast.Constant) and isinstance(item.value, str):
        return item.value
    return None


def _literal_approval(value: ast.expr | None) -> bool:
    """Whether ``{"canary": {"approval": True}}`` is written literally."""
    item = _literal_item(_literal_item(value, "canary"), "approval")
    return isinstance(item, ast.Constant) and item.value is True


def _literal_item(value: ast.expr | None, name: str) -> ast.expr | None:
    """The value of key ``name`` in a literal dict, or None."""
    if not isinstance(value, ast.Dict):
        return None
    for key, item in zip(value.keys, value.values, strict=True):
        if isinstance(key, ast.Constant) and key.value == name:
            return item
    return None


def default_cache_dir() -> Path:
    """A per-user folder under the system's temporary directory."""
    return Path(tempfile.gettempdir()) / f"migronaut-cache-{os.getuid()}"


def _cache_file(folder: Path, cache_dir: Path | str | None) -> Path | None:
    if cache_dir is None:
        return None
    key = hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:24]
    return Path(cache_dir) / f"catalog-{key}.json"


def ensure_private_folder(folder: Path) -> bool:
    """Create ``folder`` for this user alone, or accept it only when it is this user's and
    nobody else may write to it: a planted cache could change which files are migrations."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        status = folder.stat()
    except OSError:
        return False
    return status.st_uid == os.getuid() and not status.st_mode & 0o022


def _load_cache(cache_file: Path | None) -> dict[str, _Answer]:
    if cache_file is None or not ensure_private_folder(cache_file.parent):
        return {}
    try:
        content = json.loads(cache_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(content, dict) or content.get("version") != CACHE_VERSION:
        return {}
    entries = content.get("entries")
    if not isinstance(entries, dict):
        return {}
    return {key: entry for key, entry in entries.items() if _is_answer(entry)}


def _is_answer(entry: object) -> bool:
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("background"), bool)
        and isinstance(entry.get("collection"), str | None)
        and isinstance(entry.get("error"), str | None)
        and isinstance(entry.get("approval"), bool)
    )


def _store_cache(cache_file: Path, entries: dict[str, _Answer]) -> None:
    """Replace the cache file atomically; racing writers each leave a whole file."""
    if not ensure_private_folder(cache_file.parent):
        log.warning(
            "migronaut: catalog cache %s is not a private folder of this user; not used",
            cache_file.parent,
        )
        return
    try:
        handle, temporary = tempfile.mkstemp(dir=cache_file.parent, suffix=".tmp")
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            json.dump({"version": CACHE_VERSION, "entries": entries}, stream)
        os.replace(temporary, cache_file)
    except OSError as exc:
        log.debug("migronaut: catalog cache %s not written (%s)", cache_file, type(exc).__name__)
