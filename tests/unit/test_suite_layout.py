"""The test suite's own layout: where test modules live, and what they may import.

Shared helpers live in ``tests/support`` only: no module under ``tests/`` imports a
test module, a conftest or any other part of ``tests`` than :mod:`tests.support`;
and nothing outside ``tests/`` imports the tests at all. Inside ``tests/unit`` and
``tests/integration`` the path of a test module mirrors the package module it
exercises (under ``core/`` or ``dev/``); every folder holding tests is a package;
and no test module grows past :data:`MAX_LINES`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TESTS = REPO_ROOT / "tests"
#: Kinds whose test modules mirror the packages, under ``core/`` or ``dev/``.
MIRRORED_KINDS = ("unit", "integration")
#: Package folders a mirrored kind holds, for migronaut_core and migronaut_dev.
PACKAGE_FOLDERS = ("core", "dev")
#: Cross-cutting test modules allowed at a mirrored kind's root.
KIND_ROOT_MODULES = {
    "unit/test_core_without_airflow.py",
    "unit/test_json_shapes.py",
    "unit/test_public_api.py",
    "unit/test_suite_layout.py",
    "unit/test_bench_airflow_cluster.py",
    "integration/test_bench_update_pipeline.py",
    "integration/test_core_without_opentelemetry.py",
}
#: Kinds whose test modules must stay short enough to read.
SHORT_KINDS = ("unit", "integration", "chaos")
MAX_LINES = 600


def modules_under(folder: Path) -> list[Path]:
    """The test modules under ``folder``."""
    return sorted(folder.rglob("test_*.py"))


def imported_modules(path: Path) -> Iterator[str]:
    """Every absolute module name ``path`` imports (``from a import b`` gives a and a.b)."""
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def test_tests_import_only_the_support_package_of_the_suite() -> None:
    offending = {
        f"{path.relative_to(REPO_ROOT)}: {name}"
        for path in TESTS.rglob("*.py")
        for name in imported_modules(path)
        if name.split(".")[0] == "tests"
        and name != "tests"
        and not name.startswith("tests.support")
    }
    assert not offending


def test_nothing_outside_the_tests_imports_them() -> None:
    sources = [
        path
        for folder in ("migronaut_core", "migronaut_airflow", "migronaut_dev", "bench", "dags")
        for path in (REPO_ROOT / folder).rglob("*.py")
    ]
    offending = {
        f"{path.relative_to(REPO_ROOT)}: {name}"
        for path in sources
        for name in imported_modules(path)
        if name.split(".")[0] == "tests"
    }
    assert not offending


def test_unit_and_integration_tests_mirror_the_packages() -> None:
    offending = {
        str(path.relative_to(TESTS))
        for kind in MIRRORED_KINDS
        for path in modules_under(TESTS / kind)
        if path.relative_to(TESTS / kind).parts[0] not in PACKAGE_FOLDERS
        and str(path.relative_to(TESTS)) not in KIND_ROOT_MODULES
    }
    assert not offending, "put them under core/ or dev/, mirroring the module they test"


def test_the_cross_cutting_modules_listed_exist() -> None:
    assert {name for name in KIND_ROOT_MODULES if not (TESTS / name).is_file()} == set()


def test_every_folder_holding_tests_is_a_package() -> None:
    offending = {
        str(path.parent.relative_to(REPO_ROOT))
        for path in modules_under(TESTS)
        if not (path.parent / "__init__.py").is_file()
    }
    assert not offending


def test_no_test_module_is_too_long() -> None:
    offending = {
        f"{path.relative_to(TESTS)}: {lines} lines"
        for kind in SHORT_KINDS
        for path in modules_under(TESTS / kind)
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not offending, f"split them along what they test (at most {MAX_LINES} lines)"
