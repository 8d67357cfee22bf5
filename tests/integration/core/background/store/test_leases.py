"""The per-shard lane cap (``shard_concurrency``), enforced by the store on a real replica set.

Partitions carry a ``group`` (their shard); a lease on one takes a group slot
under a unique index, so however many lanes claim at once, no group holds more
than ``shard_concurrency`` live leases — and the migration no more than
``max_parallel``.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core.background.store import BackgroundStore, Claim
from migronaut_core.config import BackgroundCollections

NAME = "20240101000000_sharded"


@pytest.fixture
def store(db: Database[dict[str, Any]]) -> BackgroundStore:
    store = BackgroundStore(db, BackgroundCollections.from_prefix("migronaut_background"))
    store.ensure_indexes()
    store.states.register(NAME, {"status": "running", "checksum": "c1"})
    return store


def _plan(store: BackgroundStore, groups: list[str | None]) -> dict[str, Any]:
    scopes = []
    for index, group in enumerate(groups):
        scope: dict[str, Any] = {"kind": "shard-range", "min": [index], "max": [index + 1]}
        if group is not None:
            scope["group"] = group
        scopes.append(scope)
    committed = store.partitions.commit_plan(
        NAME,
        generation=0,
        previous_token=None,
        new_pass=True,
        expected={"status": "running"},
        plan={"method": "chunks", "partitioner": "shard"},
        scopes=scopes,
        fields={"pass": 1},
    )
    assert committed is not None
    return committed


def _claim(
    store: BackgroundStore, state: dict[str, Any], owner: str, *, cap: int | None, lanes: int = 8
) -> Claim:
    return store.leases.claim(
        NAME,
        generation=state["generation"],
        plan=state["plan"]["token"],
        max_parallel=lanes,
        ttl_ms=60_000,
        owner=owner,
        shard_concurrency=cap,
    )


def _live_by_group(db: Database[dict[str, Any]]) -> Counter[str | None]:
    live = db["migronaut_background_partitions"].find(
        {"migration": NAME, "lease": {"$exists": True}}, {"group": 1, "lease": 1}
    )
    return Counter(doc.get("group") for doc in live)


def test_partitions_keep_their_group(store: BackgroundStore) -> None:
    state = _plan(store, ["s0", "s0", "s1", None])
    groups = [
        p.get("group")
        for p in store.partitions.list_partitions(NAME, generation=state["generation"])
    ]
    assert groups == ["s0", "s0", "s1", None]


def test_claims_are_capped_per_group(store: BackgroundStore, db: Database[dict[str, Any]]) -> None:
    state = _plan(store, ["s0"] * 4 + ["s1"] * 4 + ["s2"] * 4)
    claims = [_claim(store, state, f"lane{n}", cap=1) for n in range(4)]
    assert [claim.lease is not None for claim in claims] == [True, True, True, False]
    assert claims[3].busy and not claims[3].exhausted
    # Lanes spread over the shards: one each.
    assert sorted(claim.lease.group for claim in claims[:3] if claim.lease) == ["s0", "s1", "s2"]
    assert _live_by_group(db) == {"s0": 1, "s1": 1, "s2": 1}
    # A released lease frees its group slot for the next lane.
    first = claims[0].lease
    assert first is not None and store.leases.release(first)
    again = _claim(store, state, "lane9", cap=1)
    assert again.lease is not None and again.lease.group == first.group


def test_ungrouped_partitions_are_capped_by_max_parallel_alone(
    store: BackgroundStore, db: Database[dict[str, Any]]
) -> None:
    state = _plan(store, ["s0", "s0", None, None, None])
    claims = [_claim(store, state, f"lane{n}", cap=1, lanes=4) for n in range(5)]
    got = [claim.lease.group if claim.lease else "busy" for claim in claims]
    assert got.count("s0") == 1
    assert got.count(None) == 3  # the ungrouped blocks take the other slots
    assert got[-1] == "busy"  # max_parallel (4) reached
    assert sum(_live_by_group(db).values()) == 4


def test_without_a_cap_groups_do_not_matter(store: BackgroundStore) -> None:
    state = _plan(store, ["s0"] * 5)
    claims = [_claim(store, state, f"lane{n}", cap=None, lanes=3) for n in range(4)]
    assert [claim.lease is not None for claim in claims] == [True, True, True, False]


def test_a_full_group_is_busy_and_a_drained_plan_exhausted(store: BackgroundStore) -> None:
    state = _plan(store, ["s0", "s0"])
    first = _claim(store, state, "lane0", cap=1)
    assert first.lease is not None
    blocked = _claim(store, state, "lane1", cap=1)
    assert blocked.busy and not blocked.exhausted
    store.leases.checkpoint(first.lease, cursor={}, counters={"batches": 1}, done=True)
    second = _claim(store, state, "lane1", cap=1)
    assert second.lease is not None
    store.leases.checkpoint(second.lease, cursor={}, counters={"batches": 1}, done=True)
    assert _claim(store, state, "lane2", cap=1).exhausted


def test_concurrent_claimants_never_exceed_the_cap(
    store: BackgroundStore, db: Database[dict[str, Any]]
) -> None:
    state = _plan(store, [f"s{n % 3}" for n in range(30)])
    peak: Counter[str | None] = Counter()
    failures: list[BaseException] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            for group, count in _live_by_group(db).items():
                peak[group] = max(peak[group], count)

    def lane(n: int) -> None:
        try:
            for _ in range(6):
                claim = _claim(store, state, f"lane{n}", cap=2, lanes=16)
                if claim.lease is None:
                    continue
                store.leases.checkpoint(claim.lease, cursor={}, counters={"batches": 1}, done=True)
        except BaseException as exc:  # surfaced below
            failures.append(exc)

    sampler = threading.Thread(target=sample)
    sampler.start()
    threads = [threading.Thread(target=lane, args=(n,)) for n in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    stop.set()
    sampler.join()
    assert not failures
    assert peak and max(peak.values()) <= 2
    done = store.partitions.partition_counts(
        NAME, generation=state["generation"], plan=state["plan"]["token"]
    )
    assert done.done > 0
