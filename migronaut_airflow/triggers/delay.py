"""A trigger that fires after a delay with the payload it was given.

Operators defer on it between steps (a lane between slices, a coordinator
waiting for a deploy). ``dag.test()`` drops the ``kwargs=`` of ``defer()``, so
state that must survive the deferral rides in the event payload instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from migronaut_airflow.triggers.rebuild import RebuiltFromFields


class DelayTrigger(RebuiltFromFields, BaseTrigger):
    """Fire once after ``seconds`` with ``{"status": "success", **payload}``.

    :param seconds: how long to wait (at least 0).
    :param payload: JSON-safe values handed back to the operator.
    """

    rebuild_fields = ("seconds", "payload")

    def __init__(self, *, seconds: float, payload: dict[str, Any] | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Airflow leaves it unannotated
        self.seconds = max(0.0, float(seconds))
        self.payload = dict(payload or {})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        await asyncio.sleep(self.seconds)
        event = {"status": "success", **self.payload}
        yield TriggerEvent(event)  # type: ignore[no-untyped-call]  # Airflow leaves it unannotated
