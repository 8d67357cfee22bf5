"""Helpers for CLI tests: run ``migronaut`` in a child process from a configured folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def migronaut(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m migronaut_core.cli ARGS`` in ``cwd``; never raises on its exit code."""
    return subprocess.run(
        [sys.executable, "-m", "migronaut_core.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def configure(tmp_path: Path, mongo_uri: str, database: str) -> None:
    """Write ``migronaut.toml`` into ``tmp_path``: this server and database, ``migrations/``."""
    (tmp_path / "migronaut.toml").write_text(
        f'uri = "{mongo_uri}"\ndatabase = "{database}"\nmigrations_dir = "migrations"\n'
    )
