"""The ``airflow standalone`` harness of the end-to-end tests.

The harness lives in ``scripts/demo_airflow.py``, which ``scripts/demo.sh`` runs
too (the demo must not import the tests); this module loads it by path and
re-exports it, so tests write ``from tests.airflow.standalone import …``.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

_PATH = Path(__file__).resolve().parents[2] / "scripts" / "demo_airflow.py"
_NAME = "migronaut_demo_airflow"


def _load() -> ModuleType:
    if _NAME in sys.modules:
        return sys.modules[_NAME]
    spec = importlib.util.spec_from_file_location(_NAME, _PATH)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the standalone harness from {_PATH}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_NAME] = module  # dataclasses and pickling look modules up here
    spec.loader.exec_module(module)
    return module


_harness = _load()
AirflowStandalone = _harness.AirflowStandalone
AirflowStandaloneError = _harness.AirflowStandaloneError
install_dag_file = _harness.install_dag_file
overlapping = _harness.overlapping
parse_time = _harness.parse_time


def log_tail_on_failure(
    airflow: Any,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
    extra: str = "",
) -> Iterator[None]:
    """For an autouse fixture: print the end of Airflow's log after a test that failed."""
    failed = request.session.testsfailed
    yield
    if request.session.testsfailed > failed:
        with capsys.disabled():
            print(f"\n{airflow.log_tail(150)}{extra}")


__all__ = [
    "AirflowStandalone",
    "AirflowStandaloneError",
    "install_dag_file",
    "log_tail_on_failure",
    "overlapping",
    "parse_time",
]
