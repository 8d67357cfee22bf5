"""OpenTelemetry spans and metrics of real background runs, read from in-memory exporters.

The names and attributes asserted here are the ones docs/background.md lists:
dashboards and alerts rely on them. Every document carries a marker string in its
``_id`` and its fields; no span or data point may carry it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.database import Database

from migronaut_core.background import metric_names
from migronaut_core.errors import MigronautError
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, write_background
from tests.support.servers import fail_point
from tests.support.telemetry import Captured

MARKER = "Zq7Marker"
NAME = "migronaut.background.name"
OUTCOME = "migronaut.background.outcome"
REASON = "migronaut.background.reason"
#: Every OpenTelemetry name, from the one table.
METRICS = {metric.otel for metric in metric_names.METRICS}


def seed_marked(db: Database[dict[str, Any]], count: int) -> None:
    db.users.insert_many(
        [
            {"_id": f"{MARKER}-{i:05d}", "name": f"{MARKER}{i} Last{i}", "_v": 1, "rev": 0}
            for i in range(count)
        ]
    )


def assert_no_document_value(captured: Captured) -> None:
    texts = list(captured.every_attribute_text())
    assert texts  # something was reported
    leaked = [text for text in texts if MARKER in text]
    assert not leaked, leaked


def overlapping(spans: list[Any]) -> bool:
    return any(
        a is not b and a.start_time < b.end_time and b.start_time < a.end_time
        for a in spans
        for b in spans
    )


def test_two_lanes_report_coordinator_steps_leases_and_batches(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    count = 3_000
    seed_marked(db, count)
    migrations = tmp_path / "migrations"
    write_background(migrations, batch_size=200, max_parallel=2)
    captured = Captured()
    with make_kit(mongo_uri, db, migrations, **captured.providers()) as kit:
        kit.runs.up()
        view = kit_json.run(kit, SPLIT_NAME, concurrency=2)
    assert view["status"] == "completed"
    assert db.users.count_documents({"_v": 2, "first": {"$regex": f"^{MARKER}"}}) == count

    steps = captured.spans("migronaut.background.coordinate")
    assert steps
    assert all(s.attributes[NAME] == SPLIT_NAME for s in steps)
    assert all(s.attributes["migronaut.background.driver"] == "local" for s in steps)
    processing = [s for s in steps if s.attributes[OUTCOME] == "process"]
    assert processing and processing[0].attributes["migronaut.background.lanes"] >= 1
    last = steps[-1].attributes
    assert (last[OUTCOME], last["migronaut.background.status"]) == ("done", "completed")

    leases = captured.spans("migronaut.background.slice")
    assert len({s.attributes["migronaut.background.partition"] for s in leases}) >= 2
    assert overlapping(leases)  # two lanes held leases at once
    for lease in leases:
        assert lease.attributes[NAME] == SPLIT_NAME
        assert isinstance(lease.attributes["migronaut.background.slot"], int)
        assert isinstance(lease.attributes["migronaut.background.generation"], int)
        assert lease.attributes[OUTCOME] in ("exhausted", "yielded")
    migrated = sum(s.attributes.get("migronaut.background.counters.migrated", 0) for s in leases)
    assert migrated == count

    slice_duration = "migronaut.background.slice.duration"
    assert captured.count(slice_duration, **{NAME: SPLIT_NAME, OUTCOME: "exhausted"}) >= 2
    assert captured.count(slice_duration) == len(leases)
    assert captured.total("migronaut.background.batch.size", **{NAME: SPLIT_NAME}) == count
    batches = captured.count("migronaut.background.batch.duration", **{NAME: SPLIT_NAME})
    assert batches >= count // 200
    assert captured.count("migronaut.background.batch.size") == batches
    assert captured.metric_names() <= METRICS
    # One claim per lease held (every slice span is one claimed partition).
    assert captured.total("migronaut.background.leases.claimed", **{NAME: SPLIT_NAME}) == len(
        leases
    )
    assert not captured.points("migronaut.background.leases.reclaimed")
    assert_no_document_value(captured)


TRANSACTIONAL = """
background = {"collection": "users", "from": 1, "to": 2, "batch_size": 100,
              "max_parallel": 1, "transaction": {"timeout_ms": 10000, "max_retries": 8}}

def migrate(doc, ctx):
    first, _, last = doc.pop("name").partition(" ")
    return {**doc, "first": first, "last": last}
"""


def test_a_transient_commit_error_counts_a_transaction_retry(
    mongo_uri: str,
    mongo_client: MongoClient[dict[str, Any]],
    db: Database[dict[str, Any]],
    tmp_path: Path,
) -> None:
    seed_marked(db, 500)
    migrations = tmp_path / "migrations"
    write_background(migrations, body=TRANSACTIONAL)
    captured = Captured()
    transient = {
        "failCommands": ["commitTransaction"],
        "errorCode": 251,
        "errorLabels": ["TransientTransactionError"],
        "appName": "migronaut",
    }
    with make_kit(mongo_uri, db, migrations, **captured.providers()) as kit:
        kit.runs.up()
        with fail_point(mongo_client, transient, {"times": 2}):
            view = kit_json.run(kit, SPLIT_NAME)
    assert view["status"] == "completed"
    retries = captured.total(
        "migronaut.background.transaction.retries", **{NAME: SPLIT_NAME, REASON: "transient"}
    )
    assert retries == view["totals"]["txn_retries"] >= 1
    assert captured.total("migronaut.background.transaction.retries") == retries
    assert_no_document_value(captured)


ADAPTIVE = """
background = {"collection": "users", "from": 1, "to": 2, "batch_size": 100, "max_parallel": 1,
              "adaptive": {"min_batch_size": 10, "max_batch_size": 100, "increase": 10,
                           "decrease": 0.5, "target_latency_ms": 10, "max_pause_ms": 100}}

def migrate(doc, ctx):
    return {**doc, "ok": True}
"""


def test_slow_writes_count_a_throttle_change_by_reason(
    mongo_uri: str,
    mongo_client: MongoClient[dict[str, Any]],
    db: Database[dict[str, Any]],
    tmp_path: Path,
) -> None:
    seed_marked(db, 1_000)
    migrations = tmp_path / "migrations"
    write_background(migrations, body=ADAPTIVE)
    captured = Captured()
    slow = {
        "failCommands": ["update"],
        "blockConnection": True,
        "blockTimeMS": 60,
        "appName": "migronaut",
        "namespace": f"{db.name}.users",
    }
    changes: list[dict[str, Any]] = []
    with make_kit(mongo_uri, db, migrations, **captured.providers()) as kit:
        kit.runs.up()
        kit.background.on("background:throttle", lambda event, payload: changes.append(payload))
        kit.background.coordinate(SPLIT_NAME)
        with fail_point(mongo_client, slow, "alwaysOn"):
            kit.background.run_slice(SPLIT_NAME, slice_ms=1_000)
        view = kit_json.run(kit, SPLIT_NAME)
    assert view["status"] == "completed"
    throttled = "migronaut.background.throttled"
    assert captured.total(throttled, **{NAME: SPLIT_NAME, REASON: "latency"}) >= 1
    # One count per change the lanes were told of, each with its reason.
    assert captured.total(throttled) == len(changes)
    for change in {change["reason"] for change in changes}:
        assert captured.total(throttled, **{REASON: change}) >= 1
    assert_no_document_value(captured)


@pytest.mark.parametrize("reaper", ["lane", "coordinator"])
def test_a_dead_lanes_lapsed_lease_is_counted_once_when_reaped(
    reaper: str, mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    seed_marked(db, 600)
    migrations = tmp_path / "migrations"
    write_background(migrations, batch_size=100, max_parallel=2)
    captured = Captured()
    with make_kit(mongo_uri, db, migrations, **captured.providers()) as kit:
        kit.runs.up()
        assert kit.background.coordinate(SPLIT_NAME).next == "process"
        state = kit._runtime.store.states.get(SPLIT_NAME)
        assert state is not None
        # A lane that claimed a partition and died: its lease is never renewed.
        dead = kit._runtime.store.leases.claim(
            SPLIT_NAME,
            generation=state["generation"],
            plan=state["plan"]["token"],
            max_parallel=2,
            ttl_ms=1,
            owner="dead-lane",
        )
        assert dead.lease is not None
        time.sleep(0.1)
        if reaper == "lane":  # its claim reaps first
            outcome = kit.background.run_slice(SPLIT_NAME, slice_ms=100).outcome
            assert outcome in ("yielded", "exhausted")
        view = kit_json.run(kit, SPLIT_NAME, concurrency=2)
    assert view["status"] == "completed"
    assert db.users.count_documents({"_v": 2}) == 600
    reclaimed = captured.points("migronaut.background.leases.reclaimed")
    assert [(p.attributes, p.value) for p in reclaimed] == [({NAME: SPLIT_NAME}, 1)]
    assert_no_document_value(captured)


def test_a_busy_coordinator_makes_no_span(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    seed_marked(db, 10)
    migrations = tmp_path / "migrations"
    write_background(migrations)
    captured = Captured()
    with make_kit(mongo_uri, db, migrations, **captured.providers()) as kit:
        kit.runs.up()
        with kit._runtime.lock_for(SPLIT_NAME):
            assert kit.background.coordinate(SPLIT_NAME).next == "busy"
        assert captured.spans("migronaut.background.coordinate") == []
        assert kit.background.coordinate(SPLIT_NAME).next == "process"
    assert len(captured.spans("migronaut.background.coordinate")) == 1


FAILING = """
background = {"collection": "users", "from": 1, "to": 2, "batch_size": 50, "max_parallel": 1,
              "max_slice_failures": 5}

def migrate_batch(docs, ctx):
    raise ValueError("cannot migrate " + docs[0]["name"])
"""


def test_a_failed_slice_reports_its_error_type_and_never_its_message(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    seed_marked(db, 100)
    migrations = tmp_path / "migrations"
    write_background(migrations, body=FAILING)
    captured = Captured()
    with make_kit(mongo_uri, db, migrations, **captured.providers()) as kit:
        kit.runs.up()
        kit.background.coordinate(SPLIT_NAME)
        with pytest.raises(MigronautError) as raised:
            kit.background.run_slice(SPLIT_NAME)
    (lease,) = captured.spans("migronaut.background.slice")
    assert lease.attributes[OUTCOME] == "error"
    assert lease.attributes["error.type"] == type(raised.value).__name__
    assert lease.status.status_code.name == "ERROR"
    (point,) = captured.points("migronaut.background.slice.duration")
    assert point.attributes == {
        NAME: SPLIT_NAME,
        OUTCOME: "error",
        "error.type": type(raised.value).__name__,
    }
    assert_no_document_value(captured)


def test_a_slice_that_fails_before_its_claim_is_measured_as_an_error(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path
) -> None:
    seed_marked(db, 10)
    migrations = tmp_path / "migrations"
    path = write_background(migrations)
    captured = Captured()
    with make_kit(mongo_uri, db, migrations, **captured.providers()) as kit:
        kit.runs.up()
        kit.background.coordinate(SPLIT_NAME)
        path.write_text("def migrate(:\n")  # the file no longer imports: no job to build
        with pytest.raises(MigronautError) as raised:
            kit.background.run_slice(SPLIT_NAME)
        path.unlink()  # a deploy removed the file: the slice defers, measured as such
        assert kit.background.run_slice(SPLIT_NAME).outcome == "deferred"
    assert captured.spans("migronaut.background.slice") == []
    durations = captured.points("migronaut.background.slice.duration")
    points = {point.attributes[OUTCOME]: point for point in durations}
    assert set(points) == {"error", "deferred"}
    error, deferred = points["error"], points["deferred"]
    assert (error.count, error.value) == (1, 0)
    assert error.attributes == {
        NAME: SPLIT_NAME,
        OUTCOME: "error",
        "error.type": type(raised.value).__name__,
    }
    assert (deferred.count, deferred.value) == (1, 0)
    assert deferred.attributes == {NAME: SPLIT_NAME, OUTCOME: "deferred"}
