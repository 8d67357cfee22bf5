"""migronaut_core imports and runs background migrations where opentelemetry is not installed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from pymongo.database import Database

from tests.support.background import SPLIT_NAME, seed_users, write_background

SCRIPT = textwrap.dedent(
    """
    import importlib, os, pkgutil, sys

    class BlockOpenTelemetry:
        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                raise ImportError("opentelemetry is blocked in this test")
            return None

    sys.meta_path.insert(0, BlockOpenTelemetry())
    import migronaut_core
    for module in pkgutil.walk_packages(migronaut_core.__path__, "migronaut_core."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)

    from migronaut_core import Migronaut
    from migronaut_core.background import telemetry

    assert not telemetry.AVAILABLE and not telemetry.Telemetry().enabled
    with Migronaut(
        uri=os.environ["TEST_URI"],
        database=os.environ["TEST_DB"],
        migrations_dir=os.environ["TEST_MIGRATIONS"],
    ) as kit:
        kit.runs.up()
        assert not kit._runtime.telemetry.enabled
        view = kit.background.run(os.environ["TEST_NAME"], concurrency=2).to_dict()
    loaded = [m for m in sys.modules if m.split(".")[0] == "opentelemetry"]
    assert not loaded, loaded
    print(view["status"], view["totals"]["migrated"])
    """
)


def test_a_background_run_without_opentelemetry(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    seed_users(db, 1_000)
    migrations = tmp_path / "migrations"
    write_background(migrations, batch_size=100, max_parallel=2)
    env = {
        **os.environ,
        "TEST_URI": mongo_uri,
        "TEST_DB": db.name,
        "TEST_MIGRATIONS": str(migrations),
        "TEST_NAME": SPLIT_NAME,
    }
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["completed", "1000"]
    assert db.users.count_documents({"_v": 2}) == 1_000
