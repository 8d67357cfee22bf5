"""The document types of ``store/documents.py`` name every key the store writes.

A migration is taken through a plan, a claim, a checkpoint with a lane's note and
its throttle state, controls, an unlock and its completion; every key of every
stored state, history entry, plan, partition and lease must be one its
``TypedDict`` declares (mypy checks the reads; this checks the writes).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core import Migronaut
from migronaut_core.background.store import (
    BackgroundStore,
    ControlMark,
    CoordinatorMark,
    HistoryDocument,
    LeaseDocument,
    PartitionDocument,
    PlanDocument,
    StateDocument,
)
from migronaut_core.config import BackgroundCollections
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background


@pytest.fixture
def kit(mongo_uri: str, db: Database[dict[str, Any]], migrations: Path) -> Iterator[Migronaut]:
    with make_kit(mongo_uri, db, migrations, lock_ttl_seconds=4) as kit:
        yield kit


def _undeclared(doc: Mapping[str, Any], shape: Any) -> set[str]:
    return set(doc) - set(shape.__annotations__)


def _check_state(db: Database[dict[str, Any]]) -> None:
    state = db.migronaut_background.find_one({"_id": SPLIT_NAME})
    assert state is not None
    assert _undeclared(state, StateDocument) == set()
    assert StateDocument.__required_keys__ <= set(state)
    for entry in state.get("history") or []:
        assert _undeclared(entry, HistoryDocument) == set(), entry
    if state.get("plan") is not None:
        assert _undeclared(state["plan"], PlanDocument) == set()
    if state.get("coordinator") is not None:
        assert _undeclared(state["coordinator"], CoordinatorMark) == set()
    if state.get("control") is not None:
        assert _undeclared(state["control"], ControlMark) == set()


def _check_partitions(db: Database[dict[str, Any]]) -> int:
    leases = 0
    for partition in db.migronaut_background_partitions.find():
        assert _undeclared(partition, PartitionDocument) == set(), partition.keys()
        assert PartitionDocument.__required_keys__ <= set(partition)
        if "lease" in partition:
            leases += 1
            assert _undeclared(partition["lease"], LeaseDocument) == set()
            assert LeaseDocument.__required_keys__ <= set(partition["lease"])
    return leases


def test_every_stored_key_is_declared(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 600)
    write_background(migrations, batch_size=100, max_parallel=2)
    kit.runs.up()
    _check_state(db)
    answer = kit.background.coordinate(SPLIT_NAME)
    assert answer.next == "process" and answer.plan is not None
    _check_state(db)

    store = BackgroundStore(db, BackgroundCollections.from_prefix("migronaut_background"))
    claim = store.leases.claim(
        SPLIT_NAME,
        generation=int(answer.generation or 0),
        plan=answer.plan,
        max_parallel=2,
        ttl_ms=30_000,
        owner="test",
    )
    assert claim.lease is not None and claim.partition is not None
    store.leases.record_intent(claim.lease, [1, 2])
    store.leases.checkpoint(
        claim.lease,
        cursor={"after": 1},
        counters={"scanned": 1},
        throttle={"batch_size": 100},
        intent=[3],
    )
    assert _check_partitions(db) == 1
    store.leases.release(claim.lease)

    kit.background.control(SPLIT_NAME, "pause", requested_by="ops", reason="look")
    kit.background.control(SPLIT_NAME, "resume", requested_by="ops")
    kit.background.control(SPLIT_NAME, "unlock", requested_by="ops")
    _check_state(db)

    finished = kit.background.run(SPLIT_NAME, concurrency=2)
    assert finished is not None and finished.status == "completed"
    _check_state(db)
    _check_partitions(db)
