"""Migration files resolved against their target's settings (no server)."""

from __future__ import annotations

from pathlib import Path

from migronaut_core.background.loading import BackgroundFiles
from migronaut_core.background.warn_once import WarnOnce
from migronaut_core.config import load_config
from migronaut_core.health_limits import DEFAULT_HEALTH, HealthLimit

FILE = """
background = {"collection": "users", "from": 1, "to": 2, %s}


def migrate(doc, ctx):
    return doc
"""


def _files(tmp_path: Path, spec: str, **config: object) -> BackgroundFiles:
    migrations = tmp_path / "migrations"
    migrations.mkdir()
    (migrations / "20260101000000_users.py").write_text(FILE % spec)
    settings = load_config({"migrations_dir": migrations, **config}, env={})
    return BackgroundFiles(settings, warn_once=WarnOnce())


def test_a_file_without_health_takes_its_targets_limits(tmp_path: Path) -> None:
    files = _files(tmp_path, "", background_health={"majority_lag_ms": {"hard": 5_000}})
    health = files.load("20260101000000_users").spec.health
    assert health is not None
    assert health.majority_lag_ms == HealthLimit(soft=2_000, hard=5_000)
    assert health.cache_dirty == DEFAULT_HEALTH.cache_dirty


def test_a_files_own_limits_override_its_targets_signal_by_signal(tmp_path: Path) -> None:
    files = _files(
        tmp_path,
        '"health": {"cache_dirty": {"soft": 0.1}}',
        background_health={"cache_dirty": {"soft": 0.08, "hard": 0.12}, "oplog_window_s": False},
    )
    health = files.load("20260101000000_users").spec.health
    assert health is not None
    assert health.cache_dirty == HealthLimit(soft=0.1, hard=0.12)
    assert health.oplog_window_s == HealthLimit()


def test_a_target_that_switched_health_off_leaves_its_files_off(tmp_path: Path) -> None:
    files = _files(tmp_path, "", background_health=False)
    assert files.load("20260101000000_users").spec.health is None
