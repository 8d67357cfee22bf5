"""``read_catalog``: a folder's migrations from their sources, cached by checksum, safely."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from migronaut_core import ConfigInvalidError, read_catalog
from migronaut_core.catalog import CACHE_VERSION, _cache_file

SOURCE = 'background = {"collection": "users", "from": 1, "to": 2}\n'
NAME = "20240101000000_split"


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "migrations"
    folder.mkdir()
    (folder / f"{NAME}.py").write_text(SOURCE)
    (folder / "20240102000000_regular.py").write_text("def up(ctx):\n    pass\n")
    (folder / "_shared.py").write_text("x = 1\n")  # a helper by the naming rule: not listed
    return folder


def _plant(folder: Path, cache: Path, collection: str) -> None:
    """A cache entry for the background file that names another collection."""
    checksum = hashlib.sha256(SOURCE.encode()).hexdigest()
    entry = {"background": True, "collection": collection, "error": None, "approval": False}
    target = _cache_file(folder, cache)
    assert target is not None
    target.write_text(json.dumps({"version": CACHE_VERSION, "entries": {checksum: entry}}))


def test_the_folder_is_read_from_sources_without_importing_them(tmp_path: Path) -> None:
    catalog = read_catalog(_folder(tmp_path))
    assert [(e.name, e.background, e.collection) for e in catalog.migrations] == [
        (NAME, True, "users"),
        ("20240102000000_regular", False, None),
    ]
    assert catalog.rejected == ()


@pytest.mark.parametrize(
    ("canary", "approval"),
    [
        ('{"fraction": 0.1, "approval": True}', True),
        ('{"fraction": 0.1, "approval": False}', False),
        ('{"fraction": 0.1}', False),
        ("CANARY", False),  # computed: not read (its DAG asks no one; approve with the CLI)
    ],
)
def test_a_literal_canary_approval_is_read(tmp_path: Path, canary: str, approval: bool) -> None:
    folder = tmp_path / "migrations"
    folder.mkdir()
    source = f'background = {{"collection": "users", "from": 1, "to": 2, "canary": {canary}}}\n'
    (folder / f"{NAME}.py").write_text(source)
    assert read_catalog(folder).background[0].approval is approval


def test_the_cache_answers_for_an_unchanged_file(tmp_path: Path) -> None:
    folder, cache = _folder(tmp_path), tmp_path / "cache"
    read_catalog(folder, cache_dir=cache)
    _plant(folder, cache, "from_cache")
    assert read_catalog(folder, cache_dir=cache).background[0].collection == "from_cache"


def test_a_cache_others_may_write_to_is_never_trusted(tmp_path: Path) -> None:
    folder, cache = _folder(tmp_path), tmp_path / "cache"
    read_catalog(folder, cache_dir=cache)
    _plant(folder, cache, "planted")
    cache.chmod(0o777)
    assert read_catalog(folder, cache_dir=cache).background[0].collection == "users"


def test_a_damaged_cache_is_ignored_and_rewritten(tmp_path: Path) -> None:
    folder, cache = _folder(tmp_path), tmp_path / "cache"
    read_catalog(folder, cache_dir=cache)
    target = _cache_file(folder, cache)
    assert target is not None
    target.write_text('{"version": 1, "entries": {"abc": {"background": "yes"}}')
    assert read_catalog(folder, cache_dir=cache).background[0].collection == "users"
    assert json.loads(target.read_text())["version"] == CACHE_VERSION


def test_unreadable_files_are_set_aside_by_name_with_a_value_free_reason(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    (folder / "helpers.py").write_text("SECRET = 'hunter2'\n")
    (folder / "20240103000000_broken.py").write_text("background = {'token': 'hunter2',\n")
    (folder / "20240104000000_binary.py").write_bytes(b"\xff\xfe\x00")
    catalog = read_catalog(folder)
    assert [(item.file, item.reason.split(" (")[0]) for item in catalog.rejected] == [
        ("20240103000000_broken.py", "invalid Python"),
        ("20240104000000_binary.py", "not UTF-8 text"),
        ("helpers.py", "not a migration name"),
    ]
    assert "hunter2" not in repr(catalog)
    assert [entry.name for entry in catalog.migrations] == [NAME, "20240102000000_regular"]


def test_a_missing_folder_is_an_error_naming_the_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigInvalidError) as refused:
        read_catalog(tmp_path / "migratoins")
    assert refused.value.context == {"key": "migrations_dir", "path": str(tmp_path / "migratoins")}
