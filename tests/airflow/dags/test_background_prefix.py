"""A generated background-migration DAG on collections of a configured prefix (``dag.test()``).

Its own module so that a run on several workers (``scripts/test.sh``, ``scripts/compat.sh``)
runs it beside ``test_background.py``'s, not after it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core.config import CONFIG_FILE, BackgroundCollections
from tests.support.background import SPLIT_NAME, make_kit, seed_users
from tests.support.background_dag import DOCUMENTS, run_until_completed, write_migration

#: A ``background_collection`` other than the default, set in ``migronaut.toml``.
CUSTOM_PREFIX = "ops_bg"


def test_generated_dag_waits_on_a_configured_collection_prefix(
    dags_folder: Path,
    migronaut_connection: str,
    mongo_uri: str,
    db: Database[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The hook reads migronaut.toml beside the migrations; the DAG file sets no prefix.
    (dags_folder.parent / CONFIG_FILE).write_text(f'background_collection = "{CUSTOM_PREFIX}"\n')
    monkeypatch.setenv("MIGRONAUT_TEST_LANE_MAX_SLICES", "1")
    seed_users(db, DOCUMENTS)
    db.users.create_index([("_v", 1), ("_id", 1)])
    write_migration(dags_folder)
    with make_kit(mongo_uri, db, dags_folder, background_collection=CUSTOM_PREFIX) as kit:
        kit.runs.up()
    status, reasons = run_until_completed(
        mongo_uri, db, dags_folder, background_collection=CUSTOM_PREFIX
    )
    assert status["status"] == "completed"
    assert status["totals"]["migrated"] == DOCUMENTS
    assert db.users.count_documents({"_v": 2}) == DOCUMENTS
    custom = BackgroundCollections.from_prefix(CUSTOM_PREFIX)
    assert db[custom.state].count_documents({"_id": SPLIT_NAME}) == 1
    assert BackgroundCollections.from_prefix("migronaut_background").state not in (
        db.list_collection_names()
    )
    # Reading the default collections, the sensor saw no state and stopped at once
    # ("left-running"); on the configured ones it waited for the lanes.
    assert "left-running" not in reasons
    assert "no-live-lease" in reasons
