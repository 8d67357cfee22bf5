"""migronaut_core must import and work where Airflow is not installed."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_every_core_module_imports_with_airflow_unimportable() -> None:
    script = textwrap.dedent(
        """
        import importlib, pkgutil, sys

        class BlockAirflow:
            def find_spec(self, name, path=None, target=None):
                if name == "airflow" or name.startswith("airflow."):
                    raise ImportError("airflow is blocked in this test")
                return None

        sys.meta_path.insert(0, BlockAirflow())
        import migronaut_core
        names = [m.name for m in pkgutil.walk_packages(migronaut_core.__path__, "migronaut_core.")]
        for name in names:
            if name.endswith("__main__"):
                continue
            importlib.import_module(name)
        loaded = [m for m in sys.modules if m == "airflow" or m.startswith("airflow.")]
        assert not loaded, loaded
        print(len(names))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.strip()) >= 8
