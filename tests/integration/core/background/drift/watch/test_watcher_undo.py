"""The drift watcher's upgrades of a journaled migration are journaled too: an undo puts
an old release's writes back as that release wrote them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pymongo.database import Database

from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, seed_users, wait_until, write_background

JOURNALED = '"revision_field": "rev", "undo": "journal",'


def test_an_old_release_write_the_watcher_upgraded_is_undone_to_that_write(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    migrations = tmp_path / "migrations"
    write_background(migrations, batch_size=100, max_parallel=2, extra=JOURNALED)
    seed_users(db, 50)
    db.users.create_index([("_v", 1), ("_id", 1)])
    with make_kit(mongo_uri, db, migrations, lock_ttl_seconds=2) as kit:
        kit.runs.up()
        assert kit_json.run(kit, SPLIT_NAME, concurrency=2)["status"] == "completed"
        watcher = kit.drift.watch(refresh_seconds=1.0)
        try:
            wait_until(
                lambda: [row["state"] for row in watcher.status()] == ["streaming"],
                what="the stream",
            )
            old_write = {"_id": 900, "_v": 1, "name": "Old Release", "rev": 5}
            db.users.insert_one(dict(old_write))
            wait_until(lambda: db.users.count_documents({"_v": 1}) == 0, what="the upgrade")
        finally:
            watcher.stop()
        entry = db.migronaut_background_undo.find_one({"_id": {"m": SPLIT_NAME, "d": 900}})
        assert entry is not None
        assert (entry["before"], entry["written"]) == (old_write, 6)

        kit.background.control(SPLIT_NAME, "undo")
        assert kit_json.run(kit, SPLIT_NAME)["status"] == "completed"

    assert db.users.find_one({"_id": 900}) == {**old_write, "rev": 7}
    assert db.users.count_documents({"_v": 1}) == 51
