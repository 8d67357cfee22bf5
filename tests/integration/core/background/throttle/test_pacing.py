"""Pacing against a real replica set: the lag probe, a missing privilege, injected latency."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from pymongo import MongoClient, UpdateOne
from pymongo.database import Database

from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.job import Job
from migronaut_core.background.planning.partition import IdRangePartitioner
from migronaut_core.background.spec import (
    AdaptiveSettings,
    BackgroundFunctions,
    BackgroundSpec,
    ThrottleSettings,
)
from migronaut_core.background.throttle import (
    AdaptiveController,
    LagProbe,
    Throttle,
    ThrottleContext,
    ThrottleRegistry,
)
from tests.support.throttle import Warnings

Client = MongoClient[dict[str, Any]]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def own_client(mongo_uri: str) -> Iterator[tuple[Client, str]]:
    """A client of its own, with an appName no other test uses (for fail points)."""
    app_name = f"throttle-{uuid.uuid4().hex[:8]}"
    client: Client = MongoClient(mongo_uri, appname=app_name, tz_aware=True)
    yield client, app_name
    client.close()


@contextmanager
def fail_point(admin_client: Client, data: dict[str, Any]) -> Iterator[None]:
    """Switch ``failCommand`` on with ``data``; always switch it off again."""
    admin_client.admin.command("configureFailPoint", "failCommand", mode="alwaysOn", data=data)
    try:
        yield
    finally:
        admin_client.admin.command("configureFailPoint", "failCommand", mode="off")


@pytest.fixture
def registry() -> ThrottleRegistry:
    return ThrottleRegistry()


# ─── Lag probe ────────────────────────────────────────────────────────────────


def test_lag_on_a_single_node_replica_set_is_zero_and_cached(
    own_client: tuple[Client, str],
) -> None:
    client, _ = own_client
    clock = Clock()
    probe = LagProbe(client, clock=clock)
    assert probe.lag_ms() == 0
    assert probe.lag_ms() == 0
    assert probe.reads == 1
    clock.now += 0.5
    probe.lag_ms()
    assert probe.reads == 1
    clock.now += 0.6
    assert probe.lag_ms() == 0
    assert probe.reads == 2
    assert probe.disabled is None


def test_one_probe_per_client_shared_by_lanes(
    own_client: tuple[Client, str], mongo_client: Client, registry: ThrottleRegistry
) -> None:
    client, _ = own_client
    probe = registry.lag_probe(client)
    assert registry.lag_probe(client) is probe
    assert registry.lag_probe(mongo_client) is not probe
    assert ThrottleRegistry().lag_probe(client) is not probe  # another kit
    first = Throttle("m1", max_lag_ms=1_000, lag_probe=probe)
    second = Throttle("m1", max_lag_ms=1_000, lag_probe=registry.lag_probe(client))
    reads = probe.reads
    assert first.before_batch(CancelToken()) is False
    assert second.before_batch(CancelToken()) is False
    assert probe.reads - reads <= 1
    assert first.take_lagged() is False


@pytest.mark.parametrize(
    ("code", "reason"), [(13, "unauthorized"), (76, "no-replica-set")], ids=["13", "76"]
)
def test_unreadable_lag_is_warned_once_and_checks_stop(
    own_client: tuple[Client, str], mongo_client: Client, code: int, reason: str
) -> None:
    client, app_name = own_client
    warnings = Warnings()
    probe = LagProbe(client, interval_s=0)
    throttles = [Throttle(f"m{i}", max_lag_ms=0, lag_probe=probe, warn=warnings) for i in (1, 2)]
    data = {"failCommands": ["replSetGetStatus"], "errorCode": code, "appName": app_name}
    with fail_point(mongo_client, data):
        for throttle in throttles * 3:
            started = time.monotonic()
            assert throttle.before_batch(CancelToken()) is False
            assert time.monotonic() - started < 1.0
    assert probe.disabled == reason
    assert warnings.said == [f"lag:{reason}"]
    reads = probe.reads
    assert throttles[0].before_batch(CancelToken()) is False  # fail point off: still no checks
    assert probe.reads == reads
    assert probe.lag_ms() is None


def test_a_passing_failure_skips_one_reading_only(
    own_client: tuple[Client, str], mongo_client: Client
) -> None:
    client, app_name = own_client
    probe = LagProbe(client, interval_s=0)
    data = {"failCommands": ["replSetGetStatus"], "errorCode": 91, "appName": app_name}
    with fail_point(mongo_client, data):
        assert probe.lag_ms() is None
    assert probe.disabled is None
    assert probe.lag_ms() == 0


def test_warning_without_a_warn_callable_goes_to_the_log_once(
    own_client: tuple[Client, str],
    mongo_client: Client,
    caplog: pytest.LogCaptureFixture,
    registry: ThrottleRegistry,
) -> None:
    client, app_name = own_client
    probe = registry.lag_probe(client)
    data = {"failCommands": ["replSetGetStatus"], "errorCode": 13, "appName": app_name}
    with fail_point(mongo_client, data), caplog.at_level(logging.DEBUG):
        for _ in range(3):
            Throttle("m1", max_lag_ms=10, lag_probe=probe).before_batch(CancelToken())
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1
    assert "clusterMonitor" in warned[0].getMessage()
    assert probe.disabled == "unauthorized"


# ─── Adaptive controller under injected latency ───────────────────────────────

SETTINGS = AdaptiveSettings(
    min_batch_size=10,
    max_batch_size=200,
    increase=40,
    decrease=0.5,
    target_latency_ms=150,
    max_pause_ms=2_000,
)


def timed_batch(db: Database[dict[str, Any]], size: int, round_: int) -> float:
    """Update ``size`` documents in one unordered bulk write; return its latency in ms."""
    ops = [UpdateOne({"_id": i}, {"$set": {"round": round_}}) for i in range(size)]
    started = time.monotonic()
    db.docs.bulk_write(ops, ordered=False)
    return (time.monotonic() - started) * 1000


def test_latency_shrinks_the_batch_and_recovery_grows_it_back(
    own_client: tuple[Client, str], mongo_client: Client, db: Database[dict[str, Any]]
) -> None:
    client, app_name = own_client
    db.docs.insert_many([{"_id": i} for i in range(SETTINGS.max_batch_size)])
    lane_db = client[db.name]
    registry = ThrottleRegistry()
    adaptive = registry.adaptive_for("m1", None, SETTINGS, None)
    sizes = [adaptive.batch_size()]
    slow = {"failCommands": ["update"], "blockConnection": True, "blockTimeMS": 300}
    with fail_point(mongo_client, {**slow, "appName": app_name}):
        for round_ in range(4):  # the first batch warms up
            latency = timed_batch(lane_db, adaptive.batch_size(), round_)
            assert latency >= 290
            change = adaptive.record(latency, overloaded=False)
            sizes.append(adaptive.batch_size())
            assert change is None or change.reason == "latency"
    assert sizes == [200, 200, 100, 50, 25]
    shrunk = adaptive.state()

    for round_ in range(4, 20):
        adaptive.record(timed_batch(lane_db, adaptive.batch_size(), round_))
        if adaptive.batch_size() == SETTINGS.max_batch_size:
            break
    assert adaptive.batch_size() == SETTINGS.max_batch_size
    assert adaptive.pause_ms() == 0

    # A lane restart: the process forgets, the partition remembers.
    partitions = db.partitions
    partitions.insert_one({"_id": "p1", "throttle": shrunk})
    assert registry.forget() == 1
    stored = partitions.find_one({"_id": "p1"})
    assert stored is not None
    resumed = registry.adaptive_for("m1", None, SETTINGS, stored["throttle"])
    assert resumed is not adaptive
    assert resumed.state() == shrunk == {"batch_size": 25, "pause_ms": 0}
    with fail_point(mongo_client, {**slow, "appName": app_name}):
        resumed.record(timed_batch(lane_db, resumed.batch_size(), 99))
    assert resumed.batch_size() == 12  # no warm-up after a restart: judged at once


def test_only_the_lane_client_is_slowed(
    own_client: tuple[Client, str], mongo_client: Client, db: Database[dict[str, Any]]
) -> None:
    _, app_name = own_client
    db.docs.insert_many([{"_id": i} for i in range(10)])
    slow = {"failCommands": ["update"], "blockConnection": True, "blockTimeMS": 300}
    with fail_point(mongo_client, {**slow, "appName": app_name}):
        assert timed_batch(db, 10, 1) < 250


# ─── A lane's throttle, wired from a job ──────────────────────────────────────


def job_with(spec: BackgroundSpec, fns: BackgroundFunctions) -> Job:
    return Job(
        name="m-job",
        spec=spec,
        fns=fns,
        direction="forward",
        match={},
        partitioner=IdRangePartitioner(),
        hint=None,
        log=logging.getLogger("tests.throttle"),
        generation=4,
    )


def test_for_job_wires_lag_adaptive_and_the_user_function(
    own_client: tuple[Client, str], registry: ThrottleRegistry
) -> None:
    client, _ = own_client
    warnings = Warnings()
    seen: list[ThrottleContext] = []

    def user(ctx: ThrottleContext) -> int:
        seen.append(ctx)
        return 0

    spec = BackgroundSpec(
        collection="docs",
        from_version=1,
        to_version=2,
        batch_size=300,
        adaptive=AdaptiveSettings(min_batch_size=30, max_batch_size=300, increase=30),
        throttle=ThrottleSettings(pause_ms=0, max_lag_ms=5_000),
    )
    assert spec.adaptive is not None
    job = job_with(spec, BackgroundFunctions(throttle=user))
    partition = {"_id": "p7", "group": "shard-a", "throttle": {"batch_size": 60, "pause_ms": 0}}
    throttle = Throttle.for_job(job, partition, registry=registry, client=client, warn=warnings)
    assert throttle.lag_probe is registry.lag_probe(client)
    assert isinstance(throttle.adaptive, AdaptiveController)
    assert throttle.adaptive is registry.adaptive_for("m-job", "shard-a", spec.adaptive)
    assert throttle.warn is warnings
    assert throttle.next_batch_size() == 60
    assert throttle.before_batch(CancelToken()) is False
    assert seen == [ThrottleContext("m-job", 4, "p7", 60, "docs")]
    assert throttle.after_batch(5) is not None  # resumed state: judged at once, grows
    assert throttle.state() == {"batch_size": 90, "pause_ms": 0}

    bare = job_with(BackgroundSpec(from_version=1, to_version=2), BackgroundFunctions())
    plain = Throttle.for_job(bare, {"_id": "p1"}, registry=registry, client=client, warn=warnings)
    assert plain.lag_probe is None
    assert plain.adaptive is None
    assert plain.next_batch_size() == 500
