"""The deploy gate's judgement and its wait loop, on statuses handed in."""

from __future__ import annotations

import threading

import pytest

from migronaut_core import CancelToken, GateSnapshot, judge_gate
from migronaut_core.background.gate import GateVerdict, wait_for_milestone
from migronaut_core.background.states import STATUSES

SOAKING = {"phase": "finalize", "validator_phase": "warn"}


@pytest.mark.parametrize(
    ("status", "verdict"),
    [
        ("completed", GateVerdict("reached", "completed")),
        ("failed", GateVerdict("ended", "failed")),
        ("cancelled", GateVerdict("ended", "cancelled")),
        (None, GateVerdict("ended", "unregistered")),
        ("pending", None),
        ("blocked", None),
        ("running", None),
        ("paused", None),
    ],
)
def test_each_status_opens_closes_or_keeps_the_gate(
    status: str | None, verdict: GateVerdict | None
) -> None:
    assert judge_gate(GateSnapshot(status), "completed") == verdict


def test_every_status_has_a_verdict_or_keeps_waiting_deliberately() -> None:
    for until in ("migrated", "completed", "finalized"):
        waiting = {s for s in STATUSES if judge_gate(GateSnapshot(s), until) is None}
        assert waiting == {"pending", "blocked", "running", "paused"}, until


@pytest.mark.parametrize(
    ("snapshot", "reached"),
    [
        # A validator soaking at warn: every document migrated, not yet completed.
        (GateSnapshot("running", **SOAKING), {"migrated"}),
        (GateSnapshot("paused", **SOAKING), set()),  # a person paused it: keep waiting
        (GateSnapshot("running", phase="finalize", validator_phase="recorded"), set()),
        (GateSnapshot("running", phase="partition", validator_phase="warn"), set()),
        (
            GateSnapshot("completed", validator_phase="error"),
            {"migrated", "completed", "finalized"},
        ),
        (GateSnapshot("completed"), {"migrated", "completed", "finalized"}),  # no validator
        (GateSnapshot("completed", validator_phase="warn"), {"migrated", "completed"}),
    ],
)
def test_each_milestone_is_reached_where_it_says(snapshot: GateSnapshot, reached: set[str]) -> None:
    found = {
        until
        for until in ("migrated", "completed", "finalized")
        if judge_gate(snapshot, until) == GateVerdict("reached", str(snapshot.status))
    }
    assert found == reached


@pytest.mark.parametrize("status", ["pending", "running", "completed"])
def test_a_reverted_migration_ends_the_wait_whatever_its_revert_s_status(status: str) -> None:
    # down or an undo registered it as a revert: its completion is not the forward one.
    for until in ("migrated", "completed", "finalized"):
        verdict = judge_gate(GateSnapshot(status, direction="revert"), until)
        assert verdict == GateVerdict("ended", "reverted")


def test_waiting_reports_each_change_once_and_ends_on_the_milestone() -> None:
    statuses = iter(
        GateSnapshot(status)
        for status in ["pending", "pending", "running", "paused", "running", "completed"]
    )
    seen: list[str] = []
    result = wait_for_milestone(
        "m",
        lambda: next(statuses),
        until="completed",
        timeout=None,
        poll_interval=0.001,
        on_status=seen.append,
    )
    assert (result.outcome, result.status, result.reached) == ("reached", "completed", True)
    assert seen == ["pending", "running", "paused", "running", "completed"]
    assert result.to_dict() == {
        "name": "m",
        "until": "completed",
        "outcome": "reached",
        "status": "completed",
        "waited_s": result.waited_seconds,
    }


def test_a_failed_migration_ends_the_wait_at_once() -> None:
    result = wait_for_milestone(
        "m", lambda: GateSnapshot("failed"), until="completed", timeout=None, poll_interval=60
    )
    assert (result.outcome, result.status) == ("ended", "failed")


def test_the_timeout_ends_a_wait_on_a_paused_migration() -> None:
    result = wait_for_milestone(
        "m", lambda: GateSnapshot("paused"), until="completed", timeout=0.05, poll_interval=10
    )
    assert (result.outcome, result.status, result.reached) == ("timed-out", "paused", False)
    assert result.waited_seconds < 5  # the poll interval was cut to the time left


def test_cancelling_ends_a_wait_as_timed_out() -> None:
    token = CancelToken()
    threading.Timer(0.05, token.cancel).start()
    result = wait_for_milestone(
        "m",
        lambda: GateSnapshot("running"),
        until="completed",
        timeout=None,
        poll_interval=30,
        cancel=token,
    )
    assert result.outcome == "timed-out"
