"""The test suite's own layout: shared helpers live in ``tests/support`` only.

No module under ``tests/`` imports a test module, a conftest or any other part of
``tests`` than :mod:`tests.support`; and nothing outside ``tests/`` imports the
tests at all.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TESTS = REPO_ROOT / "tests"


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
