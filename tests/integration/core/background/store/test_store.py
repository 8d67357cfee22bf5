"""The store's invariants (DESIGN §3.3) under real concurrency: threads and processes."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core.background.store import BackgroundStore
from migronaut_core.background.store.leases import live_leases_filter
from migronaut_core.config import BackgroundCollections
from migronaut_core.errors import LockLostError

NAME = "20240101000000_m"


@pytest.fixture
def store(db: Database[dict[str, Any]]) -> BackgroundStore:
    store = BackgroundStore(db, BackgroundCollections.from_prefix("migronaut_background"))
    store.ensure_indexes()
    store.states.register(NAME, {"status": "running", "checksum": "c1"})
    return store


def plan(store: BackgroundStore, partitions: int = 30) -> dict[str, Any]:
    committed = store.partitions.commit_plan(
        NAME,
        generation=0,
        previous_token=None,
        new_pass=True,
        expected={"status": "running"},
        plan={"method": "test"},
        scopes=[{"kind": "all", "n": index} for index in range(partitions)],
        fields={"pass": 1},
    )
    assert committed is not None
    return committed


def test_live_leases_never_exceed_max_parallel_across_processes(
    store: BackgroundStore, db: Database[dict[str, Any]], mongo_uri: str
) -> None:
    state = plan(store)
    samples: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        # One point in time per sample: a plain count may yield mid-scan and count a
        # lease released behind it and one claimed ahead of it, both.
        partitions = db["migronaut_background_partitions"]
        while not stop.is_set():
            with db.client.start_session(snapshot=True) as session:
                samples.append(
                    partitions.count_documents(live_leases_filter(NAME), session=session)
                )

    sampler = threading.Thread(target=sample)
    sampler.start()
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.claimer_process",
                mongo_uri,
                db.name,
                NAME,
                str(state["generation"]),
                state["plan"]["token"],
                "4",
                "3",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    try:
        claims = [int(process.communicate(timeout=60)[0]) for process in processes]
    finally:
        stop.set()
        sampler.join()
    assert all(process.returncode == 0 for process in processes)
    assert sum(claims) > 50
    assert max(samples) == 3  # the slots were saturated, and never exceeded
    assert store.leases.live_leases(NAME) == 0


def test_a_reaped_lane_cannot_checkpoint(store: BackgroundStore) -> None:
    state = plan(store, partitions=1)
    token = state["plan"]["token"]
    claim = store.leases.claim(
        NAME, generation=1, plan=token, max_parallel=2, ttl_ms=300, owner="a"
    )
    assert claim.lease is not None
    store.leases.checkpoint(claim.lease, cursor={"after": 10}, counters={"migrated": 5})
    assert store.leases.reap(NAME) == 0  # renewed just now
    time.sleep(0.6)
    assert store.leases.reap(NAME) == 1  # lapsed by the server's clock
    with pytest.raises(LockLostError):
        store.leases.checkpoint(claim.lease, cursor={"after": 99}, counters={"migrated": 500})
    with pytest.raises(LockLostError):
        store.leases.record_intent(claim.lease, [1, 2])
    assert not store.leases.renew(claim.lease)
    partition = store.partitions.collection.find_one({"migration": NAME})
    assert partition is not None
    assert partition["counters"] == {"migrated": 5}
    assert partition["cursor"] == {"after": 10}
    second = store.leases.claim(
        NAME, generation=1, plan=token, max_parallel=2, ttl_ms=30_000, owner="b"
    )
    assert second.partition is not None and second.partition["_id"] == partition["_id"]


def test_a_renewed_lease_is_not_reaped(store: BackgroundStore) -> None:
    state = plan(store, partitions=1)
    claim = store.leases.claim(
        NAME, generation=1, plan=state["plan"]["token"], max_parallel=1, ttl_ms=500, owner="a"
    )
    assert claim.lease is not None
    for _ in range(4):
        time.sleep(0.25)
        assert store.leases.renew(claim.lease)
        assert store.leases.reap(NAME) == 0


def test_claims_report_busy_and_exhausted(store: BackgroundStore) -> None:
    state = plan(store, partitions=2)
    token = state["plan"]["token"]
    first = store.leases.claim(
        NAME, generation=1, plan=token, max_parallel=1, ttl_ms=30_000, owner="a"
    )
    assert first.lease is not None
    busy = store.leases.claim(
        NAME, generation=1, plan=token, max_parallel=1, ttl_ms=30_000, owner="b"
    )
    assert busy.busy
    store.leases.checkpoint(first.lease, cursor={}, counters={"migrated": 1}, done=True)
    second = store.leases.claim(
        NAME, generation=1, plan=token, max_parallel=1, ttl_ms=30_000, owner="b"
    )
    assert second.lease is not None
    exhausted = store.leases.claim(
        NAME, generation=1, plan=token, max_parallel=5, ttl_ms=30_000, owner="c"
    )
    assert exhausted.exhausted


def test_only_one_of_racing_plans_commits(store: BackgroundStore) -> None:
    results: list[dict[str, Any] | None] = []
    barrier = threading.Barrier(6)

    def commit() -> None:
        barrier.wait()
        results.append(
            store.partitions.commit_plan(
                NAME,
                generation=0,
                previous_token=None,
                new_pass=True,
                expected={"status": "running", "checksum": "c1"},
                plan={"method": "test"},
                scopes=[{"kind": "all"}] * 3,
                fields={"pass": 1},
            )
        )

    threads = [threading.Thread(target=commit) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [result for result in results if result is not None]
    assert len(winners) == 1
    token = winners[0]["plan"]["token"]
    assert {doc["plan"] for doc in store.partitions.collection.find({"migration": NAME})} == {token}
    assert store.partitions.collection.count_documents({"migration": NAME}) == 3


def test_a_plan_does_not_commit_over_a_changed_checksum(store: BackgroundStore) -> None:
    lost = store.partitions.commit_plan(
        NAME,
        generation=0,
        previous_token=None,
        new_pass=True,
        expected={"status": "running", "checksum": "stale"},
        plan={"method": "test"},
        scopes=[{"kind": "all"}],
        fields={},
    )
    assert lost is None
    assert store.partitions.collection.count_documents({"migration": NAME}) == 0


def test_a_pass_rolls_into_the_totals_exactly_once(store: BackgroundStore) -> None:
    from migronaut_core.background.coordinator import _roll_up
    from migronaut_core.background.events import Events
    from migronaut_core.background.runtime import Runtime

    state = plan(store, partitions=2)
    token = state["plan"]["token"]
    for owner in ("a", "b"):
        claim = store.leases.claim(
            NAME, generation=1, plan=token, max_parallel=2, ttl_ms=30_000, owner=owner
        )
        assert claim.lease is not None
        store.leases.checkpoint(
            claim.lease, cursor={}, counters={"migrated": 10, "batches": 1}, done=True
        )
    runtime = Runtime(
        db=store.db,
        client=store.db.client,
        store=store,
        events=Events(),
        load=lambda name: (_ for _ in ()).throw(AssertionError("not loaded")),
        lock_collection="migronaut_lock",
        ttl_seconds=5,
    )
    stale = store.states.get(NAME)
    assert stale is not None
    _roll_up(runtime, stale)
    _roll_up(runtime, stale)  # a crashed coordinator rolling the same pass again
    _roll_up(runtime, store.states.get(NAME) or {})
    totals = (store.states.get(NAME) or {})["totals"]
    assert totals == {"migrated": 20, "batches": 2}
