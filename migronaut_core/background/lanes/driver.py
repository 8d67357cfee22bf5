"""Drive a background migration from one process: the coordinator and N lane threads.

Other drivers (Airflow DAG runs, other processes running this one) may work the
same migration at the same time; the store's leases and the coordinator lock
keep them from stepping on each other.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from typing import Any

from pymongo.errors import PyMongoError

from migronaut_core.background.backoff import Backoff
from migronaut_core.background.canary import AWAITING_APPROVAL
from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.coordinator import Answer, Driver, coordinate
from migronaut_core.background.lanes.lane import SliceResult, run_slice
from migronaut_core.background.runtime import Runtime
from migronaut_core.background.store import StateDocument
from migronaut_core.background.views import status_json
from migronaut_core.errors import (
    BackgroundFailedError,
    ChecksumMismatchError,
    MigrationFileError,
    MigronautError,
    RunAbortedError,
)
from migronaut_core.server_errors import is_retryable_write

log = logging.getLogger("migronaut_core.background")

#: Outcomes after which a lane thread stops and hands back to the coordinator (which
#: waits out a deploy itself: a ``deferred`` lane has nothing to do until it is over).
LANE_DONE = frozenset(
    {
        "exhausted",
        "paused",
        "cancelled",
        "failed",
        "stale",
        "superseded",
        "stopped",
        "lost",
        "deferred",
    }
)
#: A driver looks again this soon when other drivers' lanes hold every open partition.
IDLE_POLL_SECONDS = 0.5
#: Back-off after a failed slice or coordinator step, doubled per failure in a row, capped.
FAILED_SLICE_BACKOFF = Backoff(first=0.2, cap=5.0)
#: Coordinator steps tried in a row before a transient error ends :func:`drive`.
COORDINATE_ATTEMPTS = 6


def lane_owner() -> str:
    """An id for one lane: host, process and a random part (for status views)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def run_lane(
    rt: Runtime,
    name: str,
    *,
    slice_ms: int | None,
    cancel: CancelToken,
    on_slice: Callable[[SliceResult], None] | None = None,
) -> str:
    """Run slices until the lane has nothing more to do here; return the last outcome."""
    owner = lane_owner()
    failures = 0
    while not cancel.cancelled:
        try:
            result = run_slice(rt, name, slice_ms=slice_ms, owner=owner, cancel=cancel)
        except (ChecksumMismatchError, MigrationFileError) as exc:
            log.warning("%s: lane %s stops: %s", name, owner, exc.message)
            return "stale"
        except Exception as exc:
            failures += 1
            log.warning("%s: lane %s: slice failed (%s); retrying", name, owner, type(exc).__name__)
            if cancel.sleep(FAILED_SLICE_BACKOFF.seconds(failures)):
                return "stopped"
            continue
        failures = 0
        if on_slice is not None:
            on_slice(result)
        if result.outcome in LANE_DONE:
            return result.outcome
        # Busy (every slot taken) or held (a health signal past its hard limit): look again.
        waits = result.outcome in ("busy", "held")
        if waits and cancel.sleep((result.retry_after_ms or 500) / 1000):
            return "stopped"
    return "stopped"


def run_lanes(
    rt: Runtime,
    name: str,
    count: int,
    *,
    slice_ms: int | None,
    cancel: CancelToken,
    on_slice: Callable[[SliceResult], None] | None = None,
) -> list[str]:
    """Run ``count`` lanes in threads until each has nothing more to do; their last outcomes."""
    outcomes: list[str] = []
    lock = threading.Lock()

    def lane() -> None:
        outcome = run_lane(rt, name, slice_ms=slice_ms, cancel=cancel, on_slice=on_slice)
        with lock:
            outcomes.append(outcome)

    threads = [
        threading.Thread(target=lane, name=f"migronaut-lane-{index}", daemon=True)
        for index in range(count)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def drive(
    rt: Runtime,
    name: str,
    *,
    concurrency: int = 1,
    slice_ms: int | None = None,
    until_done: bool = True,
    cancel: CancelToken | None = None,
    on_slice: Callable[[SliceResult], None] | None = None,
) -> dict[str, Any]:
    """Coordinate and run lanes until the migration is done (or for one round).

    :returns: the status view when it completed, paused, was cancelled, is blocked,
        or (``until_done=False``) after one round, or when its canary awaits approval
        (a full run waits for the ``approve``, or the ``reject`` that pauses it).
    :raises BackgroundFailedError: it failed.
    :raises RunAbortedError: ``cancel`` fired; the migration goes on from where it
        was the next time anyone drives it.
    """
    token = cancel or CancelToken()
    while True:
        if token.cancelled:
            raise RunAbortedError(
                f"driving {name} was stopped; it resumes from its last checkpoint",
                {"migration": name},
            )
        answer = _coordinate(rt, name, token)
        if answer is None:
            continue  # cancelled while backing off
        if answer.next in ("done", "superseded"):
            return _finished(rt, name, answer.status)
        if not until_done and answer.reason == AWAITING_APPROVAL:
            return _view(rt, name)  # one round does not wait for a person
        if answer.next in ("wait", "busy") or answer.lanes == 0:
            pause = IDLE_POLL_SECONDS if answer.next == "process" else answer.retry_after_ms / 1000
            token.sleep(min(pause, 2.0))
            continue
        lanes = max(1, min(concurrency, answer.lanes))
        run_lanes(rt, name, lanes, slice_ms=slice_ms, cancel=token, on_slice=on_slice)
        if not until_done:
            return _view(rt, name)


def _view(rt: Runtime, name: str) -> dict[str, Any]:
    state = rt.store.states.get(name)
    if state is None:
        return {"name": name, "status": None}
    return status_json(rt.store, state, windows=rt.windows, now=rt.wall_clock())


def _coordinate(rt: Runtime, name: str, token: CancelToken) -> Answer | None:
    """One coordinator step, retried while the server is unreachable or the error says so.

    A failover or a restarting ``mongod`` must not end a run whose lanes would ride
    it out: the step backs off like a failed slice, :data:`COORDINATE_ATTEMPTS`
    times in a row at most. ``None``: ``token`` fired while backing off.
    """
    failures = 0
    while True:
        try:
            return coordinate(rt, name, driver=Driver("local"), cancel=token)
        except (PyMongoError, MigronautError) as exc:
            if not _transient(exc) or failures + 1 >= COORDINATE_ATTEMPTS:
                raise
            failures += 1
            log.warning("%s: coordinator step failed (%s); retrying", name, type(exc).__name__)
            if token.sleep(FAILED_SLICE_BACKOFF.seconds(failures)):
                return None


def _transient(error: Exception) -> bool:
    if isinstance(error, MigronautError):
        return error.retryable
    return is_retryable_write(error)


def _finished(rt: Runtime, name: str, status: str | None) -> dict[str, Any]:
    state = rt.store.states.get(name)
    if state is None:
        return {"name": name, "status": status or "unregistered"}
    if state["status"] == "failed":
        raise failed_error(state)
    return status_json(rt.store, state, windows=rt.windows, now=rt.wall_clock())


def failed_error(state: StateDocument) -> BackgroundFailedError:
    """The error a failed migration raises to whoever drove it, with its value-free reason."""
    reason = state.get("last_error")
    return BackgroundFailedError(
        f"background migration {state['_id']} failed" + (f": {reason}" if reason else ""),
        {"migration": state["_id"], "last_error": reason},
    )
