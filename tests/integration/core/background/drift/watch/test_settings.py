"""The live watcher's deployment check names the config key to change (L-10b)."""

from __future__ import annotations

from pathlib import Path

import pytest

from migronaut_core import ConfigInvalidError, Migronaut
from tests.support.background import write_background


def test_a_standalone_refusal_names_the_background_drift_key(
    standalone_uri: str, tmp_path: Path
) -> None:
    migrations = tmp_path / "migrations"
    write_background(migrations)
    kit = Migronaut(uri=standalone_uri, database="t", migrations_dir=str(migrations))
    with kit, pytest.raises(ConfigInvalidError) as raised:
        kit.drift.watch()
    assert raised.value.context == {"key": "background_drift", "mode": "poll"}
    assert "background_drift = 'poll'" in raised.value.message
