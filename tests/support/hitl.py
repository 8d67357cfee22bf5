"""Answer an Airflow human-in-the-loop task as a person would, through the metadata DB.

:func:`answer_when_asked` waits for the task's question (its ``hitl_detail`` row) and
records the answer exactly as the Core API's ``PATCH .../hitl-details`` does: the
response columns, then, on Airflow 3.3+ where the task is parked ``awaiting_input``,
``handle_event_submit`` with the row's resume payload (on 3.2 the deferred task's
``HITLTrigger`` reads the row itself).
"""

from __future__ import annotations

import threading
from typing import Any


class Responder:
    """A thread that answers ``option`` as ``user`` once ``task_id`` asks; :meth:`stop` it
    when the run is over (it answers at most once)."""

    def __init__(self, dag_id: str, task_id: str, option: str, user: str) -> None:
        self._stopped = threading.Event()
        self.answered = False
        self._thread = threading.Thread(
            target=self._run, args=(dag_id, task_id, option, user), daemon=True
        )
        self._thread.start()

    def _run(self, dag_id: str, task_id: str, option: str, user: str) -> None:
        while not self._stopped.is_set():
            if _try_answer(dag_id, task_id, option, user):
                self.answered = True
                return
            self._stopped.wait(0.3)

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(10)


def answer_when_asked(dag_id: str, task_id: str, option: str, user: str) -> Responder:
    """Start a :class:`Responder`."""
    return Responder(dag_id, task_id, option, user)


def _try_answer(dag_id: str, task_id: str, option: str, user: str) -> bool:
    from airflow._shared.timezones import timezone
    from airflow.models.hitl import HITLDetail, HITLUser
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import select

    with create_session() as session:
        row: Any = session.scalars(
            select(HITLDetail)
            .join(TaskInstance, HITLDetail.ti_id == TaskInstance.id)
            .where(TaskInstance.dag_id == dag_id, TaskInstance.task_id == task_id)
            .where(HITLDetail.responded_at.is_(None))
        ).first()
        if row is None:
            return False
        ti = session.get(TaskInstance, row.ti_id)
        awaiting = getattr(TaskInstanceState, "AWAITING_INPUT", None)
        if ti is None or ti.state not in (awaiting, TaskInstanceState.DEFERRED):
            return False
        row.responded_by = HITLUser(id=user, name=user)
        row.responded_at = timezone.utcnow()
        row.chosen_options = [option]
        row.params_input = {}
        session.add(row)
        if awaiting is not None and ti.state == awaiting:
            from airflow.models.trigger import handle_event_submit
            from airflow.triggers.base import TriggerEvent

            handle_event_submit(
                TriggerEvent(row.as_resume_event_payload()), task_instance=ti, session=session
            )
        return True
