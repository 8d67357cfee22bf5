"""Each control also lands in Airflow's audit log, where operators already look.

The migration's own history (the detail page's timeline) is the record the
engine acts on. The audit log entry is for Airflow's Browse → Audit Log, under
the migration's DAG: event ``migronaut_<action>``, the signed-in user as owner,
and in ``extra`` the migration, the reason and what came of it — ``changed`` or
``unchanged``, or the error code of a refused control. Like the rest of the
plugin it carries no document values. A metadata database that fails to take
the entry is logged; it does not undo a control MongoDB already applied.
"""

from __future__ import annotations

import json
import logging

from airflow.models.log import Log
from airflow.utils.session import create_session
from sqlalchemy.exc import SQLAlchemyError

from migronaut_airflow.plugins.access import Grant
from migronaut_airflow.targets import DEFAULT_TARGET

log = logging.getLogger(__name__)

EVENT_PREFIX = "migronaut_"


def record_control(
    grant: Grant, action: str, *, reason: str, outcome: str, status: str | None = None
) -> None:
    """Add one audit log entry for a control the user asked for."""
    extra = {
        "migration": grant.migration,
        "reason": reason,
        "outcome": outcome,
        "status": status,
    }
    if grant.target != DEFAULT_TARGET:
        extra["target"] = grant.target
    entry = Log(
        event=EVENT_PREFIX + action,
        owner=grant.user_name,
        owner_display_name=grant.user_name,
        dag_id=grant.dag_id,
        extra=json.dumps(extra),
    )
    try:
        with create_session() as session:
            session.add(entry)
    except SQLAlchemyError:
        log.exception("the audit log entry for %s of %s was not written", action, grant.migration)
