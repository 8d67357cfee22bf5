"""After a resume, retry or repin, start the migration's DAG — as the control DAG does.

A paused or failed migration's DAG has no run left (its last round ended), so a
control that lets it run again also queues a run of ``migronaut_bg__<name>``,
unless one is queued or running already (that run picks the change up), the
user may not start runs of it, or Airflow does not know the DAG. The control
itself is applied either way; the answer says why no run was started.
"""

from __future__ import annotations

import logging

from airflow.api.common.trigger_dag import trigger_dag
from airflow.exceptions import DagNotFound, DagRunAlreadyExists
from airflow.models.dag import DagModel
from airflow.models.dagrun import DagRun
from airflow.utils.session import create_session
from airflow.utils.state import DagRunState
from airflow.utils.types import DagRunTriggeredByType
from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError

from migronaut_airflow.plugins.access import Grant, may_trigger
from migronaut_airflow.plugins.models import DagRunStarted

log = logging.getLogger(__name__)

_ACTIVE = (DagRunState.QUEUED, DagRunState.RUNNING)


def start_migration_dag(grant: Grant, action: str) -> tuple[DagRunStarted | None, str | None]:
    """Queue a run of the migration's DAG; returns the run, or None and why not."""
    dag_id = grant.dag_id
    if not may_trigger(grant.user, grant.migration, grant.target):
        return None, f"you may not start runs of {dag_id}; the drift DAG's heal will"
    try:
        return _start(dag_id, grant.user_name, action)
    except (DagNotFound, DagRunAlreadyExists, ValueError) as exc:
        return None, f"{dag_id} was not started: {type(exc).__name__}"
    except SQLAlchemyError:
        log.exception("starting %s after %s failed", dag_id, action)
        return None, f"{dag_id} was not started: the metadata database failed"


def _start(dag_id: str, user_name: str, action: str) -> tuple[DagRunStarted | None, str | None]:
    with create_session() as session:
        dag = DagModel.get_current(dag_id, session=session)
        if dag is None:
            return None, f"Airflow does not know the DAG {dag_id}; is the DAG file deployed?"
        paused = bool(dag.is_paused)
        active = session.scalar(
            select(func.count())
            .select_from(DagRun)
            .where(DagRun.dag_id == dag_id, DagRun.state.in_(_ACTIVE))
        )
    if active:
        return None, f"{dag_id} has a queued or running run already; it carries on"
    run = trigger_dag(
        dag_id,
        triggered_by=DagRunTriggeredByType.REST_API,
        triggering_user_name=user_name,
        conf={"reason": action},
        note=f"started by the migronaut UI after {action}",
    )
    if run is None:
        return None, f"{dag_id} was not started"
    log.info("started %s (%s) after %s by %s", dag_id, run.run_id, action, user_name)
    return DagRunStarted(dag_id=dag_id, run_id=run.run_id, dag_paused=paused), None
