"""``ResumeUpOperator`` starts its target's ``migronaut_up`` (no database needed to build it)."""

from __future__ import annotations

import pytest

from migronaut_airflow.operators.background import ResumeUpOperator

pytestmark = pytest.mark.airflow


@pytest.mark.parametrize(
    ("target", "up_dag"), [("default", "migronaut_up"), ("orders", "migronaut_orders__up")]
)
def test_it_starts_the_up_dag_of_its_target(target: str, up_dag: str) -> None:
    task = ResumeUpOperator(task_id="resume_up", migration="m", target=target)
    assert task.trigger_dag_id == up_dag
    assert task.conf == {"reason": "m completed"}
