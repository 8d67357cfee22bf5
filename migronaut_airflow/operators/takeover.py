"""Whether a stalled migration's run is stuck, or only held by Airflow itself.

The core decides a stall from MongoDB alone (no live lease, no progress, no
coordinator step for the stall time). It cannot tell *why* nothing moved. Two
reasons are Airflow's own and no takeover run can help with them:

- the migration's DAG is **paused** (the toggle): its deferred lanes are not
  scheduled again, and a new run would only sit queued;
- its run waits for Airflow: a task of the DAG is ``scheduled`` or ``queued``
  (waiting for a pool slot, the executor's parallelism, a paused DAG), or the run
  itself is ``queued``. A takeover's lanes would queue behind the same pool.

Such a migration is *held*: the heal reports it (log and XCom, names only) and
starts nothing. Anything else with a live Airflow run and no progress is
*stuck* (a frozen task, a worker gone without Airflow noticing): it is taken over.

Everything here is asked through the Task SDK's supported calls on the heal's
own task instance (:class:`airflow.sdk.execution_time.task_runner.RuntimeTaskInstance`):
``get_dag`` (``is_paused``), ``get_dr_count`` and ``get_ti_count``. A task cannot
list a DAG's runs through the SDK, so waiting task instances are counted over the
whole DAG: Airflow leaves none ``scheduled`` or ``queued`` in a finished run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypedDict

from airflow.sdk.exceptions import AirflowRuntimeError

__all__ = [
    "ACTIVE_RUN_STATES",
    "MIGRATION_TASKS",
    "WAITING_TASK_STATES",
    "Decision",
    "Hold",
    "HoldReason",
    "HoldReport",
    "RunsView",
    "Verdict",
    "decide",
    "hold_of",
    "new_holds",
]

#: What the heal does with one migration.
Verdict = Literal["start", "take_over", "held", "leave"]
#: Why a stalled migration is held rather than stuck.
HoldReason = Literal["paused", "run_queued", "waiting_for_slot"]

ACTIVE_RUN_STATES = ["queued", "running"]
#: Task states of work Airflow has not started yet (a pool slot, executor room).
WAITING_TASK_STATES = ["scheduled", "queued"]
#: The tasks of a migration's DAG (``dags.builders.background_dag``).
MIGRATION_TASKS = ("coordinate", "lane", "wait_for_lanes", "continue")
DEFAULT_POOL = "default_pool"


class RunsView(Protocol):
    """The Task SDK calls the heal makes on its own task instance."""

    def get_dr_count(self, *, dag_id: str, states: list[str]) -> int: ...

    def get_ti_count(self, *, dag_id: str, task_ids: list[str], states: list[str]) -> int: ...

    def get_dag(self, dag_id: str) -> Any: ...


class HoldReport(TypedDict):
    """A held migration as the heal's XCom ``held`` and log say it (names only)."""

    dag_id: str
    reason: HoldReason
    waiting: list[str]
    pools: list[str]


@dataclass(frozen=True)
class Hold:
    """Why a stalled migration's run is held by Airflow.

    :param waiting: the tasks with instances waiting (``waiting_for_slot``).
    :param pools: the pools those tasks run in.
    """

    reason: HoldReason
    waiting: tuple[str, ...] = ()
    pools: tuple[str, ...] = ()

    def describe(self) -> str:
        """What an operator reads: ``paused DAG``, ``waiting for pool X``, …"""
        if self.reason == "paused":
            return "paused DAG (unpause it to go on)"
        if self.reason == "run_queued":
            return "its DAG run is queued"
        return f"waiting for pool {', '.join(self.pools)} ({', '.join(self.waiting)} tasks)"


@dataclass(frozen=True)
class Decision:
    """The heal's verdict on one migration with work."""

    migration: str
    dag_id: str
    verdict: Verdict
    hold: Hold | None = None

    def report(self) -> HoldReport | None:
        """The value-free report of a held migration (None otherwise)."""
        if self.hold is None:
            return None
        return {
            "dag_id": self.dag_id,
            "reason": self.hold.reason,
            "waiting": list(self.hold.waiting),
            "pools": list(self.hold.pools),
        }


def is_paused(ti: RunsView, dag_id: str) -> bool:
    """Whether the DAG is paused; a DAG Airflow does not know is not."""
    try:
        return bool(ti.get_dag(dag_id).is_paused)
    except AirflowRuntimeError:
        return False


def waiting_tasks(ti: RunsView, dag_id: str) -> tuple[str, ...]:
    """The migration's tasks with an instance waiting to be started."""
    return tuple(
        task
        for task in MIGRATION_TASKS
        if ti.get_ti_count(dag_id=dag_id, task_ids=[task], states=WAITING_TASK_STATES)
    )


def hold_of(ti: RunsView, dag_id: str, pools: Mapping[str, str]) -> Hold | None:
    """Why the DAG's active run is held by Airflow, or None when nothing holds it."""
    if is_paused(ti, dag_id):
        return Hold("paused")
    waiting = waiting_tasks(ti, dag_id)
    if waiting:
        named = dict.fromkeys(pools.get(task, DEFAULT_POOL) for task in waiting)
        return Hold("waiting_for_slot", waiting, tuple(named))
    if ti.get_dr_count(dag_id=dag_id, states=["queued"]):
        return Hold("run_queued")
    return None


def decide(
    ti: RunsView, migration: str, dag_id: str, *, stalled: bool, pools: Mapping[str, str]
) -> Decision:
    """Start a run, take a stuck one over, report a held one, or leave it.

    No active run: start one. An active run and no stall: leave it. A stall
    Airflow itself holds: held. Else one stuck run is taken over; beside a
    takeover already there, nothing more.
    """
    active = ti.get_dr_count(dag_id=dag_id, states=ACTIVE_RUN_STATES)
    if active == 0:
        return Decision(migration, dag_id, "start")
    if not stalled:
        return Decision(migration, dag_id, "leave")
    hold = hold_of(ti, dag_id, pools)
    if hold is not None:
        return Decision(migration, dag_id, "held", hold)
    return Decision(migration, dag_id, "take_over" if active == 1 else "leave")


def new_holds(now: Mapping[str, HoldReport], before: Mapping[str, HoldReport] | None) -> list[str]:
    """The migrations held now and not, or not for the same reason, at the last heal.

    Each is warned about once per held episode; the heal's XCom ``held`` carries
    the episode from one heal to the next.
    """
    before = before or {}
    return [
        name
        for name, report in now.items()
        if (previous := before.get(name)) is None or previous["reason"] != report["reason"]
    ]
