"""A lane frozen (SIGSTOP) past its lease TTL is fenced off when it wakes up.

One partition, so the takeover is certain: lane V works it and freezes with a
batch written but not checkpointed — the moment a takeover could count a batch
twice; its lease lapses by the server's clock; lane T reaps it, counts V's
written-but-unrecorded batch from the intent note, and goes on. Then V is
thawed (SIGCONT) and sends the checkpoint it was about to: that checkpoint —
which would count the batch a second time — is refused, because the lease
token it carries is no longer the partition's. An application writes
throughout.

V stops itself (see ``chaos_lane``) rather than being stopped from outside: a
freeze from outside lands anywhere, and when it lands before the batch's write
reaches the server, T migrates those documents itself and there is no batch
to settle — safe, but not the case this test is about.
"""

from __future__ import annotations

import signal
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from tests.support.app_writer import AppWriter
from tests.support.chaos import (
    MODES,
    TTL_SECONDS,
    Lane,
    LaneFleet,
    assert_nothing_lost,
    drive_remaining,
    migrated_count,
    owner_pattern,
    poll,
    read_fence_logs,
    register,
    seed,
    write_migration,
)

TOTAL = 5_000
#: Batches of 100: the lane freezes with 1,100 documents migrated and 100 more unrecorded.
FREEZE_AT_CHECKPOINT = 12


def partition_of(db: Database[dict[str, Any]]) -> dict[str, Any]:
    partition = db.migronaut_background_partitions.find_one({"status": {"$ne": "superseded"}})
    assert partition is not None
    return partition


def fenced_writes(lane: Lane, token: str) -> list[dict[str, Any]]:
    """The lane's fenced writes under one lease, renewals aside."""
    return [
        entry
        for entry in read_fence_logs([lane.fence_log])
        if entry["token"] == token and entry["method"] != "renew"
    ]


def refused_after(lane: Lane, token: str, since: float) -> list[dict[str, Any]]:
    return [e for e in fenced_writes(lane, token) if e["sent"] >= since and not e["ok"]]


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_a_frozen_lane_past_its_ttl_cannot_checkpoint_after_a_takeover(
    mongo_uri: str, db: Database[dict[str, Any]], tmp_path: Path, mode: str
) -> None:
    migrations = tmp_path / "migrations"
    seed(db, TOTAL)
    write_migration(
        migrations,
        batch_size=100,
        max_parallel=2,
        doc_seconds=0.0015,
        extra='"partitions": {"max_partitions": 1},',
        mode=mode,
    )
    register(mongo_uri, db.name, migrations)
    fleet = LaneFleet(mongo_uri, db.name, migrations, tmp_path)
    app = AppWriter(mongo_uri, db.name, TOTAL)
    try:
        app.start()
        frozen = fleet.spawn(freeze_at_checkpoint=FREEZE_AT_CHECKPOINT)
        assert poll(frozen.stopped, timeout=60), fleet.outputs()
        time.sleep(0.2)  # a renewal already on the wire lands now, or never
        seen = partition_of(db)
        token = seen["lease"]["token"]
        assert seen["lease"]["owner"].split(":")[1] == str(frozen.pid)
        assert "inflight" in seen, "frozen between batches, not in one"
        assert migrated_count(db) >= (FREEZE_AT_CHECKPOINT - 1) * 100

        taker = fleet.spawn()
        taken = poll(
            lambda: db.migronaut_background_partitions.find_one(
                {"_id": seen["_id"], "lease.owner": owner_pattern(taker.pid)}
            ),
            timeout=30,
        )
        assert taken is not None, fleet.outputs()
        # Reaped by the server's clock: the new lease began after the old one lapsed.
        lapsed_at = seen["lease"]["renewed_at"] + timedelta(seconds=TTL_SECONDS)
        assert taken["lease"]["claimed_at"] >= lapsed_at
        # Let the taker get past the frozen lane's batch before thawing it.
        assert poll(lambda: _checkpoints(taker, taken["lease"]["token"]) >= 2, timeout=30)

        thawed_at = time.time()
        fleet.kill(frozen, signal.SIGCONT)
        assert poll(lambda: refused_after(frozen, token, thawed_at), timeout=20), fleet.outputs()
        app.stop()
        codes = fleet.wait_all(timeout=120)
    finally:
        app.stop()
        fleet.close()
    assert set(codes.values()) == {0}, fleet.outputs()

    # Sent after the thaw: a renewal already on the wire at the freeze may have landed.
    after_thaw = [e for e in fenced_writes(frozen, token) if e["sent"] >= thawed_at]
    assert after_thaw and not any(entry["ok"] for entry in after_thaw), after_thaw
    refused_checkpoints = [e for e in after_thaw if e["method"] == "checkpoint"]
    assert refused_checkpoints, after_thaw
    # What the refused checkpoint would have added was counted once, by the taker.
    would_double_count = sum(e["counters"].get("migrated", 0) for e in refused_checkpoints)
    settled = [
        entry
        for entry in fenced_writes(taker, taken["lease"]["token"])
        if entry["method"] == "settle_inflight"
    ]
    assert len(settled) == 1 and settled[0]["ok"]
    # An update-pipeline lane has a second batch in flight behind the refused
    # checkpoint's, named by the same note: written, never to be checkpointed by the
    # frozen lane (its refused checkpoint stops it), so counted by the taker too.
    noted = len(seen["inflight"]["ids"])
    behind = noted - would_double_count if mode == "update" else 0
    assert mode != "update" or noted == 2 * 100
    assert settled[0]["migrated"] == would_double_count + behind

    reopened = drive_remaining(mongo_uri, db.name, migrations)
    view = assert_nothing_lost(db, mongo_uri, migrations, app, TOTAL)
    print(
        f"refused={[e['method'] for e in after_thaw]} would_double_count={would_double_count} "
        f"settled={settled[0]['migrated']} app_writes={app.acknowledged} "
        f"inserted={len(app.inserted)} reopened={reopened} totals={view['totals']}"
    )


def _checkpoints(lane: Lane, token: str) -> int:
    return sum(
        1 for entry in fenced_writes(lane, token) if entry["method"] == "checkpoint" and entry["ok"]
    )
