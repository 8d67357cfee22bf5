"""When waiting for one pass's lanes is over: the judgement behind Airflow's sensor.

A coordinator round (an Airflow DAG run) starts lanes on one pass, then waits.
Waiting ends, with one ``reason``:

=================  ===================================================================
``reason``         when
=================  ===================================================================
``left-running``   the state is gone or its status is not ``running`` (the verdict also
                   carries ``migration_status``: that status, or ``"unregistered"``)
``replanned``      the state's generation or plan token is not the one waited on
``drained``        no partition of that generation and plan is pending or running
``no-live-lease``  open partitions remain but no lease has been live for the whole
                   grace period (the lanes died; the coordinator's next round reaps
                   them and plans new lanes)
=================  ===================================================================

While the lanes hold on purpose (no maintenance window open, or a health
signal past its hard limit: the snapshot's ``held``), no live lease is no sign
of dead lanes: waiting goes on, and the grace starts over once the hold ends.

:class:`LanesWatch` judges :class:`~migronaut_core.background.store.lanes.LanesSnapshot`\\ s
one at a time, so the sensor's poke mode and its trigger (which read the
snapshots sync and async) decide alike. Pure: the caller passes the clock.
"""

from __future__ import annotations

from typing import Any, Final

from migronaut_core.background.store.lanes import LanesSnapshot

__all__ = ["REASONS", "UNREGISTERED", "LanesWatch"]

#: Every ``reason`` a verdict can carry.
REASONS: Final = ("left-running", "replanned", "drained", "no-live-lease")
#: ``migration_status`` of a ``left-running`` verdict whose state document is gone.
UNREGISTERED: Final = "unregistered"


class LanesWatch:
    """Judge, one snapshot at a time, whether waiting for a pass's lanes is over.

    :meth:`judge` returns ``None`` (keep waiting) or the verdict: ``{"reason": …}``,
    plus ``migration_status`` for ``left-running``. The no-live-lease grace is
    measured between calls on the monotonic clock the caller passes in; a live
    lease or a drained plan restarts it.
    """

    __slots__ = ("_no_lease_since", "generation", "grace", "plan")

    def __init__(self, *, generation: int, plan: str, no_lease_grace_seconds: float) -> None:
        self.generation = generation
        self.plan = plan
        self.grace = no_lease_grace_seconds
        self._no_lease_since: float | None = None

    def judge(self, snapshot: LanesSnapshot, *, now: float) -> dict[str, Any] | None:
        """Judge one snapshot of the pass this watch waits on, taken at ``now``."""
        if snapshot.status is None:
            return {"reason": "left-running", "migration_status": UNREGISTERED}
        if snapshot.status != "running":
            return {"reason": "left-running", "migration_status": snapshot.status}
        if not snapshot.same_pass:
            return {"reason": "replanned"}
        return self.judge_partitions(
            open_partitions=bool(snapshot.open_partitions),
            live_lease=snapshot.live_lease,
            held=snapshot.held,
            now=now,
        )

    def judge_partitions(
        self, *, open_partitions: bool, live_lease: bool, now: float, held: bool = False
    ) -> dict[str, Any] | None:
        """Judge whether the plan has open partitions and any lease is live (or the lanes
        hold on purpose), at ``now``."""
        if not open_partitions:
            self._no_lease_since = None
            return {"reason": "drained"}
        if live_lease or held:
            self._no_lease_since = None
            return None
        if self._no_lease_since is None:
            self._no_lease_since = now
        if now - self._no_lease_since >= self.grace:
            return {"reason": "no-live-lease"}
        return None
