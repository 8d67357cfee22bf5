"""A lane bound to a coordinator step's registration, generation and round bows out when
the migration moved on (the seeds' ``BackgroundLaneJobData``): ``superseded``, no claim."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from migronaut_core import Answer, Driver, LaneBinding, Migronaut
from tests.support.background import SPLIT_NAME, seed_users, write_background

AIRFLOW = "airflow"


def _binding(answer: Answer) -> LaneBinding:
    assert answer.next == "process", answer
    return LaneBinding(answer.registration, answer.generation, answer.round)


def _step(kit: Migronaut, ref: str, round_: int | None = None) -> Answer:
    return kit.background.coordinate(
        SPLIT_NAME, driver=Driver(AIRFLOW, ref, round=round_, rounds=True)
    )


def _claimed(db: Database[dict[str, Any]]) -> int:
    """Partitions a lane ever claimed (a claim sets a lease or moves the cursor)."""
    return db.migronaut_background_partitions.count_documents(
        {"$or": [{"lease": {"$exists": True}}, {"status": {"$ne": "pending"}}]}
    )


def test_a_process_answer_carries_the_registration(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 50)
    write_background(migrations)
    kit.runs.up()
    answer = _step(kit, "run-1")
    state = db.migronaut_background.find_one({"_id": SPLIT_NAME})
    assert state is not None
    assert (answer.registration, answer.generation, answer.round) == (
        state["registration"],
        state["generation"],
        1,
    )
    assert answer.to_dict()["registration"] == state["registration"]


def test_a_lane_of_a_taken_over_round_claims_nothing(
    kit: Migronaut,
    db: Database[dict[str, Any]],
    migrations: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    seed_users(db, 200)
    write_background(migrations, batch_size=50, max_parallel=2)
    kit.runs.up()
    old = _binding(_step(kit, "run-1"))
    new = _binding(_step(kit, "run-2"))  # a takeover: a new round
    assert (new.round, old.round) == (2, 1)

    with caplog.at_level(logging.INFO, logger="migronaut_core.background"):
        result = kit.background.run_slice(SPLIT_NAME, binding=old)

    assert (result.outcome, result.reason, result.counters) == ("superseded", "round", {})
    assert result.to_dict() == {"outcome": "superseded", "counters": {}, "reason": "round"}
    assert _claimed(db) == 0
    assert db.users.count_documents({"_v": 2}) == 0
    assert "bows out: the migration's round changed" in caplog.text
    assert kit.background.run_slice(SPLIT_NAME, binding=new).outcome in ("yielded", "exhausted")
    assert db.users.count_documents({"_v": 2}) > 0


def test_a_lane_of_an_earlier_registration_claims_nothing(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 200)
    write_background(migrations, batch_size=50)
    kit.runs.up()
    old = _binding(_step(kit, "run-1"))
    kit.runs.down()  # the revert is a new registration, and so is the next up
    kit.runs.up()
    new = _binding(_step(kit, "run-2"))
    assert new.registration != old.registration
    assert (new.generation, new.round) == (old.generation, old.round)

    result = kit.background.run_slice(SPLIT_NAME, binding=old)

    assert (result.outcome, result.reason) == ("superseded", "registration")
    assert _claimed(db) == 0
    assert db.users.count_documents({"_v": 2}) == 0


def test_a_lane_of_an_earlier_pass_claims_nothing(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 100)
    write_background(migrations, batch_size=50)
    kit.runs.up()
    first = _binding(_step(kit, "run-1"))
    while kit.background.run_slice(SPLIT_NAME, binding=first).outcome != "exhausted":
        pass
    seed_users(db, 100, start=100)  # old-shape documents written during the pass
    second = _step(kit, "run-1", 1)  # closes the pass; another one begins
    assert first.generation is not None and second.generation == first.generation + 1
    before = db.users.count_documents({"_v": 2})

    result = kit.background.run_slice(SPLIT_NAME, binding=first)

    assert (result.outcome, result.reason) == ("superseded", "generation")
    assert db.users.count_documents({"_v": 2}) == before == 100
    assert kit.background.run_slice(SPLIT_NAME, binding=_binding(second)).outcome in (
        "yielded",
        "exhausted",
    )


def test_a_lane_without_a_binding_and_a_binding_without_fields_go_on(
    kit: Migronaut, db: Database[dict[str, Any]], migrations: Path
) -> None:
    seed_users(db, 100)
    write_background(migrations, batch_size=50)
    kit.runs.up()
    _step(kit, "run-1")
    _step(kit, "run-2")
    assert kit.background.run_slice(SPLIT_NAME, binding=LaneBinding()).outcome != "superseded"
    assert kit.background.run_slice(SPLIT_NAME).outcome != "superseded"
