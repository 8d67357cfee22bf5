"""A stand-in for the heal's task instance: the Task SDK calls it makes, answered from a table."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from airflow.sdk.exceptions import AirflowRuntimeError, ErrorType
from airflow.sdk.execution_time.comms import ErrorResponse


@dataclass
class FakeRuns:
    """What Airflow says of one migration DAG's runs, and the XComs a heal leaves.

    :param active: its queued and running DAG runs.
    :param queued: of which queued.
    :param paused: whether the DAG is paused (None: Airflow does not know the DAG).
    :param waiting: task id → instances ``scheduled`` or ``queued``.
    """

    active: int = 1
    queued: int = 0
    paused: bool | None = False
    waiting: dict[str, int] = field(default_factory=dict)
    xcoms: list[dict[str, Any]] = field(default_factory=list)

    def get_dr_count(self, *, dag_id: str, states: list[str]) -> int:
        if states == ["queued"]:
            return self.queued
        assert states == ["queued", "running"], states
        return self.active

    def get_ti_count(self, *, dag_id: str, task_ids: list[str], states: list[str]) -> int:
        assert states == ["scheduled", "queued"], states
        return sum(self.waiting.get(task, 0) for task in task_ids)

    def get_dag(self, dag_id: str) -> Any:
        if self.paused is None:
            raise AirflowRuntimeError(ErrorResponse(error=ErrorType.GENERIC_ERROR))
        return SimpleNamespace(dag_id=dag_id, is_paused=self.paused)

    def xcom_pull(
        self, *, task_ids: str, key: str, include_prior_dates: bool, map_indexes: int
    ) -> Any:
        assert include_prior_dates and map_indexes == -1
        return self.xcoms[-1] if self.xcoms else None

    def xcom_push(self, *, key: str, value: Any) -> None:
        assert key == "held"
        self.xcoms.append(value)
