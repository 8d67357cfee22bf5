"""A lane process for fault-injection tests: drives one background migration to its end.

Usage: python -m tests.support.chaos_lane URI DB MIGRATIONS NAME CONCURRENCY TTL

Exit 0 when the migration ends completed, 3 when it ends otherwise, 4 when it
failed, 5 when an exception escaped the driver (its type is printed as JSON).

Environment (all optional):

- ``MIGRONAUT_CHAOS_FENCE_LOG=PATH``: append one JSON line per lease-fenced
  partition write (intent note, checkpoint, settle, renew, release) saying
  whether the store accepted it. The tests read it to prove that a lane whose
  lease was taken over wrote nothing more, and to total what settles counted.
- ``MIGRONAUT_CHAOS_CHECKPOINT_PAUSE=SECONDS``: sleep between a batch's writes
  and its checkpoint, widening the window in which a ``kill -9`` leaves a batch
  written but not recorded.
- ``MIGRONAUT_CHAOS_FREEZE_AT_CHECKPOINT=N``: the process stops itself
  (SIGSTOP) just before sending its N-th checkpoint of a written batch, so a
  test can freeze a lane exactly where a takeover is most dangerous: the batch
  is on the server, its counters are not.
- ``MIGRONAUT_CHAOS_DIE_AFTER_CHECKPOINT=N``: the process kills itself
  (SIGKILL) as soon as its N-th checkpoint of a written batch is accepted: that
  checkpoint noted the next batch's ids, none of which the lane wrote.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from migronaut_core import BackgroundFailedError, Migronaut
from migronaut_core.background.store import Lease, Leases
from migronaut_core.errors import LockLostError
from tests.support import kit_json

FENCE_LOG_ENV = "MIGRONAUT_CHAOS_FENCE_LOG"
CHECKPOINT_PAUSE_ENV = "MIGRONAUT_CHAOS_CHECKPOINT_PAUSE"
FREEZE_AT_CHECKPOINT_ENV = "MIGRONAUT_CHAOS_FREEZE_AT_CHECKPOINT"
DIE_AFTER_CHECKPOINT_ENV = "MIGRONAUT_CHAOS_DIE_AFTER_CHECKPOINT"
#: Lease methods (``store.leases``) filtered on the lease token, so refusing a stale lane.
FENCED_METHODS = ("record_intent", "checkpoint", "settle_inflight", "renew", "release")


class FenceLog:
    """Appends one JSON line per fenced write; shared by the lane threads of a process."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "a", buffering=1)  # noqa: SIM115 - lives as long as the process
        self._lock = threading.Lock()

    def write(self, entry: dict[str, Any]) -> None:
        line = json.dumps({"pid": os.getpid(), "t": time.time(), **entry}, default=str)
        with self._lock:
            self._file.write(line + "\n")


def _describe(method: str, lease: Lease, kwargs: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "method": method,
        "token": lease.token,
        "partition": str(lease.partition_id),
    }
    if method == "checkpoint":
        entry["counters"] = dict(kwargs.get("counters") or {})
        entry["done"] = bool(kwargs.get("done"))
        entry["intent"] = len(kwargs.get("intent") or ())
    if method == "settle_inflight":
        entry["migrated"] = int(kwargs.get("migrated", 0))
    return entry


class BatchCheckpoints:
    """Around each checkpoint of a written batch: a pause, one self-freeze, one death."""

    def __init__(self, pause: float, freeze_at: int, die_after: int) -> None:
        self._pause = pause
        self._freeze_at = freeze_at
        self._die_after = die_after
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()
        self._local = threading.local()

    def before(self) -> None:
        if self._pause:
            time.sleep(self._pause)
        with self._lock:
            self._local.number = next(self._numbers)
        if self._local.number == self._freeze_at:
            # Aimed at this thread, the stop takes it before the call returns; aimed at
            # the process, this thread could run on and send the checkpoint first.
            signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)

    def after(self) -> None:
        if self._local.number == self._die_after:
            os.kill(os.getpid(), signal.SIGKILL)


def _instrumented(
    method: str, original: Callable[..., Any], log: FenceLog | None, batches: BatchCheckpoints
) -> Callable[..., Any]:
    @functools.wraps(original)
    def fenced(self: Leases, lease: Lease, *args: Any, **kwargs: Any) -> Any:
        entry = _describe(method, lease, kwargs)
        if method == "checkpoint" and kwargs.get("counters"):
            batches.before()
        # A write sent before a SIGSTOP may be logged only after the SIGCONT: "sent" tells.
        entry["sent"] = time.time()
        try:
            answer = original(self, lease, *args, **kwargs)
        except LockLostError:
            if log is not None:
                log.write({**entry, "ok": False})
            raise
        if log is not None:
            log.write({**entry, "ok": answer is not False})
        if method == "checkpoint" and kwargs.get("counters"):
            batches.after()
        return answer

    return fenced


def instrument(log_path: str | None, batches: BatchCheckpoints) -> None:
    """Wrap the leases' fenced writes: log their outcome, act before batch checkpoints."""
    log = FenceLog(log_path) if log_path else None
    for method in FENCED_METHODS:
        original = getattr(Leases, method)
        setattr(Leases, method, _instrumented(method, original, log, batches))


def main(argv: list[str]) -> int:
    uri, database, migrations, name, concurrency, ttl = argv
    batches = BatchCheckpoints(
        pause=float(os.environ.get(CHECKPOINT_PAUSE_ENV) or 0),
        freeze_at=int(os.environ.get(FREEZE_AT_CHECKPOINT_ENV) or 0),
        die_after=int(os.environ.get(DIE_AFTER_CHECKPOINT_ENV) or 0),
    )
    instrument(os.environ.get(FENCE_LOG_ENV), batches)
    with Migronaut(
        uri=uri, database=database, migrations_dir=migrations, lock_ttl_seconds=float(ttl)
    ) as kit:
        try:
            view = kit_json.run(kit, name, concurrency=int(concurrency))
        except BackgroundFailedError as exc:
            print(json.dumps({"failed": exc.message}), flush=True)
            return 4
        except Exception as exc:
            print(json.dumps({"escaped": type(exc).__name__, "error": str(exc)}), flush=True)
            return 5
    print(json.dumps({"status": view["status"], "totals": view["totals"]}), flush=True)
    return 0 if view["status"] == "completed" else 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
