"""Dropped connections in the middle of a migration: ``failCommand`` with ``closeConnection``.

A :class:`FaultInjector` thread arms the server's ``failCommand`` fail point for
one :class:`NetworkFault` at a time: the next ``times`` matching commands of
clients whose ``appName`` is the migration's (``migronaut``, set by the kit) have
their connection closed by the server before they run. Nothing else is hit —
not the application (``chaos-app``), not the test's own client. ``times`` of 2
or more also defeats the driver's single retry of a read, a retryable write or
a commit, so the error reaches the engine.

The injector waits until the fail point fired ``times`` times (the server
counts), records it, disarms it, and goes on to the next fault. Only one
``failCommand`` is armed at a time (the server has one such fail point).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pymongo import MongoClient
from pymongo.errors import ExecutionTimeout, OperationFailure

#: The ``appName`` of every client the kit opens (``migronaut_core.kit``).
MIGRONAUT_APP_NAME = "migronaut"


@dataclass(frozen=True)
class NetworkFault:
    """Drop the connection of the next ``times`` of these commands.

    ``namespace`` (``db.collection``) narrows the fault to one collection; None
    for commands that name none (``commitTransaction``).
    """

    label: str
    commands: tuple[str, ...]
    namespace: str | None
    times: int = 2

    def data(self, app_name: str) -> dict[str, Any]:
        data: dict[str, Any] = {
            "failCommands": list(self.commands),
            "closeConnection": True,
            "appName": app_name,
        }
        if self.namespace is not None:
            data["namespace"] = self.namespace
        return data


@dataclass(frozen=True)
class FiredFault:
    """One injection: the fail point's own count of its firings while armed, and when."""

    label: str
    #: The server's count (``timesEntered``); under concurrent commands it may pass ``times``.
    dropped: int
    at: float


@dataclass
class FaultInjector:
    """Arms ``faults`` in turn, ``rounds`` times over, from a thread, until stopped.

    Each fault stays armed until it fired ``times`` times or ``fire_timeout``
    seconds passed; ``gap_seconds`` of quiet follow each, so the lanes make
    progress between faults. :meth:`stop` disarms the fail point whatever happens.
    """

    admin: MongoClient[dict[str, Any]]
    faults: Sequence[NetworkFault]
    rounds: int
    app_name: str = MIGRONAUT_APP_NAME
    gap_seconds: float = 0.3
    fire_timeout: float = 15.0
    fired: list[FiredFault] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _crash: BaseException | None = None

    def start(self) -> FaultInjector:
        self._thread = threading.Thread(target=self._run, name="fault-injector", daemon=True)
        self._thread.start()
        return self

    def finished(self) -> bool:
        """Whether every round of faults was injected (or the injector crashed)."""
        return self._thread is not None and not self._thread.is_alive()

    def stop(self) -> None:
        """Stop injecting, disarm the fail point; re-raise whatever crashed the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.fire_timeout + 10)
        self._configure("off")
        if self._crash is not None:
            raise AssertionError("the fault injector crashed") from self._crash

    def dropped(self, label: str) -> int:
        """Connections dropped by the faults labelled ``label``, over every round."""
        return sum(fault.dropped for fault in self.fired if fault.label == label)

    def _run(self) -> None:
        try:
            for _ in range(self.rounds):
                for fault in self.faults:
                    if self._stop.is_set():
                        return
                    self.fired.append(self._inject(fault))
                    self._stop.wait(self.gap_seconds)
        except BaseException as exc:
            self._crash = exc

    def _inject(self, fault: NetworkFault) -> FiredFault:
        before = self._configure({"times": fault.times}, fault.data(self.app_name))
        deadline = time.monotonic() + self.fire_timeout
        while not self._stop.is_set() and time.monotonic() < deadline:
            if self._wait_for(before + fault.times, max_ms=200):
                break
        after = self._configure("off")
        return FiredFault(fault.label, after - before, time.monotonic())

    def _wait_for(self, entered: int, *, max_ms: int) -> bool:
        try:
            self.admin.admin.command(
                "waitForFailPoint", "failCommand", timesEntered=entered, maxTimeMS=max_ms
            )
        except (ExecutionTimeout, OperationFailure):
            return False
        return True

    def _configure(self, mode: Any, data: dict[str, Any] | None = None) -> int:
        """Set the fail point's mode; how many times it had fired before (server's count)."""
        reply = self.admin.admin.command(
            "configureFailPoint", "failCommand", mode=mode, data=data or {}
        )
        return int(reply["count"])
