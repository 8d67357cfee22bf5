"""What Airflow's provider manager reads is complete, and every provider imported is declared."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
import tomllib
from pathlib import Path

import pytest
from airflow.sdk import BaseOperator
from airflow.triggers.base import BaseTrigger

import migronaut_airflow
from migronaut_airflow import get_provider_info

pytestmark = pytest.mark.airflow

PACKAGE = Path(migronaut_airflow.__file__).parent
DISTRIBUTION = PACKAGE.parent / "distributions" / "airflow" / "pyproject.toml"


def _modules_defining(subpackage: str, base: type) -> set[str]:
    """Modules of ``subpackage`` defining a concrete ``base`` (not only a shared base class)."""
    classes = set()
    package = importlib.import_module(f"migronaut_airflow.{subpackage}")
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        classes |= {
            value
            for value in vars(module).values()
            if inspect.isclass(value) and issubclass(value, base)
            if value.__module__ == module.__name__
        }
    bases = {parent for cls in classes for parent in cls.__mro__[1:]}
    return {cls.__module__ for cls in classes - bases}


def _listed(kind: str) -> set[str]:
    return {module for entry in get_provider_info()[kind] for module in entry["python-modules"]}


@pytest.mark.parametrize(
    ("kind", "subpackage", "base"),
    [
        ("triggers", "triggers", BaseTrigger),
        ("operators", "operators", BaseOperator),
        ("sensors", "sensors", BaseOperator),
    ],
)
def test_every_module_with_a_trigger_operator_or_sensor_is_listed(
    kind: str, subpackage: str, base: type
) -> None:
    assert _modules_defining(subpackage, base) == _listed(kind)


def test_every_airflow_provider_the_package_imports_is_a_declared_dependency() -> None:
    imported = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            for name in names:
                match = re.match(r"airflow\.providers\.(\w+)", name)
                if match:
                    imported.add(f"apache-airflow-providers-{match.group(1)}")
    declared = tomllib.loads(DISTRIBUTION.read_text(encoding="utf-8"))["tool"]["hatch"]["metadata"][
        "hooks"
    ]["custom"]["dependencies"]
    names = {re.split(r"[<>=!~; \[]", requirement, maxsplit=1)[0] for requirement in declared}
    assert imported == {"apache-airflow-providers-mongo", "apache-airflow-providers-standard"}
    assert imported <= names
