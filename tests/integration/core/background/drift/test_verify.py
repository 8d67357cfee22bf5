"""Drift verification (report, reopen, the indexed probe, stream mode) and audit findings.

Against the real replica set: a completed background migration, then an "old
release" writing the old shape; and each audit finding in its situation, and
not otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core import Migronaut
from migronaut_core.background.drift.verify import probe_query
from migronaut_core.background.spec import read_stored
from migronaut_core.cli import main
from migronaut_core.errors import ConfigInvalidError
from tests.support import kit_json
from tests.support.background import (
    ADD_INITIALS,
    INITIALS_NAME,
    SPLIT_NAME,
    make_kit,
    seed_users,
    wait_until,
    write_background,
)

Db = Database[dict[str, Any]]
WATCH_ROWS = "migronaut_background_watch"
STATES = "migronaut_background"
VERSION_INDEX = "_v_1__id_1"


@pytest.fixture
def kit(mongo_uri: str, db: Db, migrations: Path) -> Iterator[Migronaut]:
    """A kit whose split migration (users, ``_v`` 1 → 2) has completed."""
    write_background(migrations, batch_size=100, max_parallel=2)
    seed_users(db, 50)
    db.users.create_index([("_v", 1), ("_id", 1)])
    with make_kit(mongo_uri, db, migrations, lock_ttl_seconds=2) as kit:
        kit.runs.up()
        assert kit_json.run(kit, SPLIT_NAME, concurrency=2)["status"] == "completed"
        yield kit


def old_release_writes(db: Db, count: int = 50) -> None:
    db.users.insert_many(
        [{"_id": 1000 + i, "_v": 1, "name": f"Old{i} Release{i}"} for i in range(count)]
    )


def kinds(findings: list[Any]) -> list[tuple[str, str | None, str | None]]:
    return sorted((f.kind, f.migration, f.collection) for f in findings)


# -- config -----------------------------------------------------------------------------


def test_drift_config_keys_are_validated(mongo_uri: str, db: Db, migrations: Path) -> None:
    plain = make_kit(mongo_uri, db, migrations)
    assert (plain.config.background_drift, plain.config.background_on_drift) == ("poll", "reopen")
    chosen = make_kit(
        mongo_uri, db, migrations, background_drift="both", background_on_drift="report"
    )
    assert (chosen.config.background_drift, chosen.config.background_on_drift) == (
        "both",
        "report",
    )
    with pytest.raises(ConfigInvalidError) as raised:
        make_kit(mongo_uri, db, migrations, background_drift="live")
    assert raised.value.context["key"] == "background_drift"
    with pytest.raises(ConfigInvalidError) as raised:
        make_kit(mongo_uri, db, migrations, background_on_drift="fix")
    assert raised.value.context["key"] == "background_on_drift"
    with pytest.raises(ConfigInvalidError):
        make_kit(mongo_uri, db, migrations, background_drift=1)


# -- verify -----------------------------------------------------------------------------


def test_an_unknown_on_drift_is_refused_naming_the_key(kit: Migronaut, db: Db) -> None:
    old_release_writes(db)
    with pytest.raises(ConfigInvalidError) as raised:
        kit.drift.verify(on_drift="fix")
    assert raised.value.context["key"] == "on_drift"
    assert kit_json.status(kit, SPLIT_NAME)["status"] == "completed"


def test_report_lists_the_drift_and_changes_nothing(kit: Migronaut, db: Db) -> None:
    assert kit_json.verify(kit, on_drift="report") == {"checked": 1, "drifted": [], "skipped": 0}
    old_release_writes(db)
    before = list(db.users.find().sort("_id", 1))
    history = len(kit_json.history(kit, SPLIT_NAME))

    result = kit_json.verify(kit, on_drift="report")

    assert result == {
        "checked": 1,
        "drifted": [{"migration": SPLIT_NAME, "collection": "users", "action": "reported"}],
        "skipped": 0,
    }
    assert kit_json.status(kit, SPLIT_NAME)["status"] == "completed"
    assert list(db.users.find().sort("_id", 1)) == before
    assert len(kit_json.history(kit, SPLIT_NAME)) == history


def test_on_drift_defaults_to_the_config(
    kit: Migronaut, mongo_uri: str, db: Db, migrations: Path
) -> None:
    old_release_writes(db)
    with make_kit(mongo_uri, db, migrations, background_on_drift="report") as reporting:
        assert kit_json.verify(reporting)["drifted"][0]["action"] == "reported"
    assert kit_json.status(kit, SPLIT_NAME)["status"] == "completed"


def test_reopen_reopens_and_a_run_upgrades_all_fifty(kit: Migronaut, db: Db) -> None:
    old_release_writes(db)

    result = kit_json.verify(kit)  # background_on_drift defaults to reopen

    assert result["drifted"] == [
        {"migration": SPLIT_NAME, "collection": "users", "action": "reopened"}
    ]
    assert kit_json.status(kit, SPLIT_NAME)["status"] != "completed"
    assert kit_json.run(kit, SPLIT_NAME, concurrency=2)["status"] == "completed"
    assert db.users.count_documents({"_v": 1}) == 0
    upgraded = list(db.users.find({"_id": {"$gte": 1000}}).sort("_id", 1))
    assert len(upgraded) == 50
    assert all(doc["_v"] == 2 and "name" not in doc for doc in upgraded)
    assert upgraded[7] == {"_id": 1007, "_v": 2, "first": "Old7", "last": "Release7"}
    # Nothing left: the next pass finds no drift.
    assert kit_json.verify(kit)["drifted"] == []


def _stages(plan: Any) -> Iterator[dict[str, Any]]:
    if isinstance(plan, dict):
        if "stage" in plan:
            yield plan
        for value in plan.values():
            yield from _stages(value)
    elif isinstance(plan, list):
        for item in plan:
            yield from _stages(item)


@pytest.mark.parametrize("drifted", [False, True])
def test_the_probe_reads_the_version_index_and_at_most_one_document(
    kit: Migronaut, db: Db, drifted: bool
) -> None:
    if drifted:
        old_release_writes(db)
    state = db[STATES].find_one({"_id": SPLIT_NAME})
    assert state is not None
    spec = read_stored(state["spec"])
    match, hint = probe_query(kit._runtime, spec, state.get("bad_ids") or [])
    assert hint == [("_v", 1), ("_id", 1)]

    explained = db.users.find(match, {"_id": 1}).hint(hint).limit(1).explain()

    stages = list(_stages(explained["queryPlanner"]["winningPlan"]))
    assert [s["indexName"] for s in stages if s["stage"] == "IXSCAN"] == [VERSION_INDEX]
    assert not [s for s in stages if s["stage"] == "COLLSCAN"]
    stats = explained["executionStats"]
    assert stats["totalDocsExamined"] <= 1
    assert stats["nReturned"] == (1 if drifted else 0)


def test_stream_mode_skips_a_collection_a_fresh_watcher_streams(
    kit: Migronaut, mongo_uri: str, db: Db, migrations: Path
) -> None:
    with make_kit(mongo_uri, db, migrations, background_drift="stream") as streaming:
        # No watcher yet: polled as usual.
        assert kit_json.verify(streaming, on_drift="report")["checked"] == 1
        watcher = kit.drift.watch(refresh_seconds=1.0)
        try:
            wait_until(
                lambda: [row["state"] for row in watcher.status()] == ["streaming"],
                what="the stream",
            )
            assert kit_json.verify(streaming, on_drift="report") == {
                "checked": 0,
                "drifted": [],
                "skipped": 1,
            }
            # Mode poll (the default) probes whatever the watcher does.
            assert kit_json.verify(kit, on_drift="report")["checked"] == 1
        finally:
            watcher.stop()


def test_both_mode_polls_what_a_watcher_streams_too(
    kit: Migronaut, mongo_uri: str, db: Db, migrations: Path
) -> None:
    # ``both`` polls and streams: the poll is not the safety net of ``stream`` but a
    # full probe of its own, so a streamed collection's old-shape documents are found.
    old_release_writes(db, 5)
    with kit.drift.watch(on_drift="report", refresh_seconds=1.0) as watcher:
        wait_until(
            lambda: [row["state"] for row in watcher.status()] == ["streaming"],
            what="the stream",
        )
        with make_kit(mongo_uri, db, migrations, background_drift="both") as both:
            assert kit_json.verify(both, on_drift="report") == {
                "checked": 1,
                "drifted": [{"migration": SPLIT_NAME, "collection": "users", "action": "reported"}],
                "skipped": 0,
            }


# -- audit ------------------------------------------------------------------------------


def test_a_healthy_setup_has_no_findings(
    kit: Migronaut, mongo_uri: str, db: Db, migrations: Path
) -> None:
    assert kit.background.audit() == []
    with make_kit(mongo_uri, db, migrations, background_drift="both") as both:
        assert both.background.audit() == []


def test_a_changed_or_missing_file_is_found(kit: Migronaut, migrations: Path) -> None:
    path = migrations / f"{SPLIT_NAME}.py"
    path.write_text(path.read_text() + "\n# edited after registration\n")
    assert kinds(kit.background.audit()) == [("checksum_changed", SPLIT_NAME, "users")]
    path.unlink()
    findings = kit.background.audit()
    assert kinds(findings) == [("file_missing", SPLIT_NAME, "users")]
    assert findings[0].severity == "error"


def test_a_stalled_running_migration_is_found(kit: Migronaut, db: Db, migrations: Path) -> None:
    write_background(migrations, INITIALS_NAME, body=ADD_INITIALS)
    kit.runs.up()
    kit.background.coordinate(INITIALS_NAME)
    assert kit_json.status(kit, INITIALS_NAME)["status"] == "running"
    assert kit.background.audit() == []  # it just made progress

    long_ago = datetime.now(UTC) - timedelta(hours=1)
    db[STATES].update_one(
        {"_id": INITIALS_NAME},
        {"$set": {"last_progress_at": long_ago, "coordinator.at": long_ago}},
    )
    # Its partitions were written when planned: a partition write is movement too.
    assert kit.background.audit() == []
    db[f"{STATES}_partitions"].update_many(
        {"migration": INITIALS_NAME}, {"$set": {"updated_at": long_ago}}
    )
    findings = kit.background.audit()
    assert kinds(findings) == [("stalled", INITIALS_NAME, "users")]
    assert "60 minutes" in findings[0].message
    # The threshold is an argument.
    assert kit.background.audit(stale_after_seconds=2 * 3600) == []
    # A live lease means a lane is at work: not stalled.
    partition = db[f"{STATES}_partitions"].find_one({"migration": INITIALS_NAME})
    assert partition is not None
    db[f"{STATES}_partitions"].update_one(
        {"_id": partition["_id"]},
        [
            {
                "$set": {
                    "lease": {
                        "token": "t",
                        "owner": "test",
                        "slot": 0,
                        "ttl_ms": 60_000,
                        "renewed_at": "$$NOW",
                    }
                }
            }
        ],
    )
    assert kit.background.audit() == []


def test_a_missing_version_index_is_found(kit: Migronaut, db: Db) -> None:
    db.users.drop_index(VERSION_INDEX)
    findings = kit.background.audit()
    assert kinds(findings) == [("missing_version_index", SPLIT_NAME, "users")]
    assert "_v" in findings[0].message
    # Any index led by the version field will do.
    db.users.create_index([("_v", 1), ("n", 1)])
    assert kit.background.audit() == []


def test_a_dead_watcher_is_found_in_stream_modes(
    kit: Migronaut, mongo_uri: str, db: Db, migrations: Path
) -> None:
    stale = datetime.now(UTC) - timedelta(minutes=5)
    db[WATCH_ROWS].insert_one(
        {
            "_id": "users",
            "state": "streaming",
            "leader": {"owner": "gone", "host": "old-host", "pid": 4242},
            "updated_at": stale,
        }
    )
    assert kit.background.audit() == []  # mode poll: no watcher expected
    with make_kit(mongo_uri, db, migrations, background_drift="stream") as streaming:
        findings = streaming.background.audit()
        assert kinds(findings) == [("dead_watcher", None, "users")]
        assert "old-host" in findings[0].message
        # A row its leader keeps writing is alive; a stopped one is not a dead one.
        db[WATCH_ROWS].update_one({"_id": "users"}, {"$currentDate": {"updated_at": True}})
        assert streaming.background.audit() == []
        db[WATCH_ROWS].update_one(
            {"_id": "users"}, {"$set": {"state": "stopped", "updated_at": stale}}
        )
        assert streaming.background.audit() == []


def test_cli_background_audit(
    kit: Migronaut,
    db: Db,
    mongo_uri: str,
    migrations: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    where = ["--uri", mongo_uri, "--database", db.name, "--migrations-dir", str(migrations)]
    assert main([*where, "background", "audit"]) == 0
    assert "no findings" in capsys.readouterr().out

    db.users.drop_index(VERSION_INDEX)
    assert main([*where, "background", "audit", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [(f["kind"], f["migration"], f["severity"]) for f in payload] == [
        ("missing_version_index", SPLIT_NAME, "warning")
    ]
    assert main([*where, "background", "audit"]) == 0
    assert "missing_version_index" in capsys.readouterr().out
