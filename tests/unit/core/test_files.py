"""Migration file names, discovery, loading and templates (no server)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from migronaut_core import files
from migronaut_core.background.spec import resolve_spec
from migronaut_core.errors import (
    ConfigInvalidError,
    MigrationFileNotFoundError,
    MigrationInvalidExportError,
    MigrationInvalidNameError,
)


@pytest.mark.parametrize(
    "name",
    ["20240101000000_add_index", "20991231235959_a", "20240101000000_v2_split_names"],
)
def test_valid_names(name: str) -> None:
    assert files.validate_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "add_index",
        "2024_add_index",
        "20240101000000-add-index",
        "20240101000000_Add",
        "20240101000000_a.b",
        "20240101000000_../etc",
        "../20240101000000_a",
        "20240101000000_a/b",
        "20240101000000_a\\b",
        "20240101000000__double",
        "20240101000000_" + "a" * 120,
        "",
    ],
)
def test_invalid_names_are_refused(name: str) -> None:
    with pytest.raises(MigrationInvalidNameError):
        files.validate_name(name)


def test_discover_sorts_and_skips_private_files(tmp_path: Path) -> None:
    for name in ("20240102000000_b.py", "20240101000000_a.py", "__init__.py", "_helpers.py"):
        (tmp_path / name).write_text("def up(ctx): pass\n")
    (tmp_path / "notes.txt").write_text("")
    assert [item.name for item in files.discover(tmp_path)] == [
        "20240101000000_a",
        "20240102000000_b",
    ]


def test_discover_refuses_a_misnamed_python_file(tmp_path: Path) -> None:
    (tmp_path / "add_index.py").write_text("def up(ctx): pass\n")
    with pytest.raises(MigrationInvalidNameError):
        files.discover(tmp_path)


def test_discover_of_a_missing_directory_is_empty(tmp_path: Path) -> None:
    assert files.discover(tmp_path / "missing") == []


def test_find_missing_file(tmp_path: Path) -> None:
    with pytest.raises(MigrationFileNotFoundError):
        files.find(tmp_path, "20240101000000_nope")


def _write(tmp_path: Path, body: str) -> files.MigrationFile:
    path = tmp_path / "20240101000000_m.py"
    path.write_text(body)
    return files.MigrationFile("20240101000000_m", path)


def test_load_regular_migration(tmp_path: Path) -> None:
    loaded = files.load(
        _write(
            tmp_path,
            'description = "d"\nuse_transaction = True\ndef up(ctx): pass\ndef down(ctx): pass\n',
        )
    )
    assert loaded.kind == "regular"
    assert loaded.reversible
    assert loaded.description == "d"
    assert loaded.use_transaction is True
    assert len(loaded.checksum) == 64


def test_load_background_migration(tmp_path: Path) -> None:
    loaded = files.load(_write(tmp_path, 'background = {"collection": "c"}\n'))
    assert loaded.kind == "background"
    assert loaded.up is None


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("def up(ctx):\n  return (\n", "failed to import: SyntaxError"),
        ("raise RuntimeError('boom')\n", "failed to import: RuntimeError"),
        ("x = 1\n", "neither"),
        ("up = 3\n", "`up` must be a function"),
        ("def up(ctx): pass\ndown = 'no'\n", "`down` must be a function"),
        ("def up(ctx): pass\nbackground = {}\n", "both"),
        ("background = [1]\n", "mapping"),
        ("def up(ctx): pass\nrequires = 'x'\n", "`requires`"),
        ("def up(ctx): pass\nrequires = ['../x']\n", "invalid migration id"),
        ("def up(ctx): pass\nrequires = ['20240101000000_m']\n", "itself"),
        ("def up(ctx): pass\ndescription = 5\n", "`description`"),
        ("def up(ctx): pass\nuse_transaction = 'yes'\n", "`use_transaction`"),
    ],
)
def test_broken_modules_get_invalid_export(tmp_path: Path, body: str, fragment: str) -> None:
    with pytest.raises(MigrationInvalidExportError) as raised:
        files.load(_write(tmp_path, body))
    assert fragment in raised.value.message
    assert raised.value.context["name"] == "20240101000000_m"


def test_load_imports_afresh_each_time(tmp_path: Path) -> None:
    migration = _write(tmp_path, "VALUE = 1\ndef up(ctx): pass\n")
    assert files.load(migration).module.VALUE == 1
    migration.path.write_text("VALUE = 2\ndef up(ctx): pass\n")
    assert files.load(migration).module.VALUE == 2


def test_write_new_from_templates(tmp_path: Path) -> None:
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    regular = files.write_new(tmp_path, "Add Index", now=now)
    assert regular.name == "20260102030405_add_index.py"
    assert files.load(files.MigrationFile(regular.stem, regular)).kind == "regular"
    background = files.write_new(tmp_path, "split-names", background=True, now=now)
    loaded = files.load(files.MigrationFile(background.stem, background))
    assert loaded.kind == "background"
    with pytest.raises(ConfigInvalidError, match="exists already"):
        files.write_new(tmp_path, "add index", now=now)


@pytest.mark.parametrize("title", ["", "a/b", "x.y", "__"])
def test_bad_titles_are_refused(tmp_path: Path, title: str) -> None:
    with pytest.raises(MigrationInvalidNameError):
        files.write_new(tmp_path, title)
    assert list(tmp_path.iterdir()) == []


def test_the_update_template_resolves_to_a_reversible_update_pipeline(tmp_path: Path) -> None:
    path = files.write_new(tmp_path, "rename name", update=True)
    loaded = files.load(files.MigrationFile(path.stem, path))
    assert loaded.kind == "background"
    spec, functions = resolve_spec(path.stem, loaded.module)
    assert spec.mode == "update"
    assert spec.reversible
    assert [next(iter(stage)) for stage in spec.update or []] == ["$set", "$unset"]
    assert [next(iter(stage)) for stage in spec.revert_update or []] == ["$set", "$unset"]
    assert functions.migrate is None and functions.migrate_batch is None
