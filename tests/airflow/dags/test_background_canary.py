"""A canary's approval in the generated DAG: the ``approve_canary`` human-in-the-loop task
asks, the answer goes through the core's approve, and the rest's round follows; a canary
decided elsewhere is noticed when the question times out."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from airflow import __version__ as airflow_version
from packaging.version import Version
from pymongo.database import Database

from migronaut_airflow.operators.approval import CanaryApprovalOperator
from migronaut_airflow.operators.background import dag_id_for
from migronaut_core import Migronaut
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.dags import load_dags, task_states
from tests.support.hitl import answer_when_asked
from tests.support.validator import step

APPROVAL = '"canary": {"filter": {"n": {"$lt": 30}}, "approval": True},'
#: Airflow 3.3 parks a HITL task in ``awaiting_input``, which ``dag.test()`` waits out; 3.2
#: defers it to ``HITLTrigger``, which ``dag.test()`` runs inline, and whose detail request
#: the in-process supervisor does not answer ("Unhandled request GetHITLDetailResponse"), so
#: no HITL task completes under ``dag.test()`` there (a triggerer serves it in a deployment).
PARKS_AWAITING_INPUT = Version(airflow_version) >= Version("3.3")


@pytest.fixture
def awaiting(
    dags_folder: Path, migronaut_connection: str, mongo_uri: str, db: Database[dict[str, Any]]
) -> Iterator[Migronaut]:
    """A registered migration whose canary approval is asked for by its DAG."""
    seed_users(db, 120)
    write_background(dags_folder, batch_size=50, max_parallel=2, extra=APPROVAL)
    with make_kit(mongo_uri, db, dags_folder) as kit:
        kit.runs.up()
        yield kit


@pytest.mark.skipif(not PARKS_AWAITING_INPUT, reason="dag.test() runs no HITL task on Airflow 3.2")
def test_an_approval_in_airflow_promotes_the_canary_and_the_rest_follows(
    awaiting: Migronaut, db: Database[dict[str, Any]]
) -> None:
    dag = load_dags()[dag_id_for(SPLIT_NAME)]
    assert {"approve_canary", "continue_after_approval"} <= set(dag.task_ids)
    asked: dict[tuple[str, int], str] | None = None
    for _ in range(8):
        responder = answer_when_asked(dag.dag_id, "approve_canary", "Approve", "ana")
        try:
            run = dag.test()
        finally:
            responder.stop()
        assert run.state == "success", task_states(run)
        states = task_states(run)
        if responder.answered:
            asked = states
        if kit_json.status(awaiting, SPLIT_NAME)["status"] == "completed":
            break
    assert asked is not None, "approve_canary never asked"
    assert asked[("coordinate", -1)] == "skipped"  # handed over, not waiting in a deferral
    assert asked[("approve_canary", -1)] == "success"
    assert asked[("continue_after_approval", -1)] == "success"
    shown = kit_json.status(awaiting, SPLIT_NAME)
    assert shown["status"] == "completed", shown
    assert shown["canary"]["approved"]["requested_by"] == "ana"
    approve = next(e for e in kit_json.history(awaiting, SPLIT_NAME) if e["action"] == "approve")
    assert approve["reason"] == "approved in Airflow by ana"
    assert db.users.count_documents({"_v": 2}) == 120


def _operator() -> CanaryApprovalOperator:
    return CanaryApprovalOperator(task_id="approve_canary", migration=SPLIT_NAME)


def test_a_canary_approved_elsewhere_is_noticed_when_the_question_times_out(
    awaiting: Migronaut,
) -> None:
    assert step(awaiting, SPLIT_NAME).reason == "canary-approval"
    awaiting.background.control(SPLIT_NAME, "approve", requested_by="cli-user")  # the CLI

    timed_out = {"error": "no response in time", "error_type": "timeout"}
    assert _operator().execute_complete({}, timed_out) == {
        "action": None,
        "applied": "elsewhere",
        "canary": "promoted",
    }
    # The next round's own question skips: nothing awaits approval any more.
    from airflow.sdk.exceptions import AirflowSkipException

    with pytest.raises(AirflowSkipException, match="its canary is promoted"):
        _operator().execute({})


def test_a_reject_in_airflow_pauses_it_with_the_responders_name(awaiting: Migronaut) -> None:
    assert step(awaiting, SPLIT_NAME).reason == "canary-approval"
    event = {
        "chosen_options": ["Reject"],
        "params_input": {},
        "responded_at": datetime.now(UTC),
        "responded_by_user": {"id": "bo", "name": "bo"},
    }
    assert _operator().execute_complete({}, event) == {
        "action": "reject",
        "applied": "changed",
        "status": "paused",
        "by": "bo",
    }
    last = kit_json.history(awaiting, SPLIT_NAME)[-1]
    assert (last["action"], last["by"], last["reason"]) == (
        "reject",
        "bo",
        "rejected in Airflow by bo",
    )
    # An answer arriving after it was decided elsewhere changes nothing and fails nothing.
    approve = {**event, "chosen_options": ["Approve"]}
    assert _operator().execute_complete({}, approve)["applied"] == "elsewhere"
    assert kit_json.status(awaiting, SPLIT_NAME)["status"] == "paused"
