"""The JSON API behind the pages, usable from scripts with an Airflow token.

``GET /api/migrations`` lists the migrations the user may read, ``GET
/api/migrations/{name}`` details one, ``GET /api/migrations/{name}/failed`` pages
through the documents it could not rewrite (``_id`` and why, never values),
``POST /api/migrations/{name}/actions/{action}`` applies a control with the
signed-in user as ``requested_by``. Every route depends on the signed-in user
first, so nothing is read or changed for a request that fails authentication or
authorization.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from migronaut_airflow.plugins import actions, audit
from migronaut_airflow.plugins.access import (
    CurrentUser,
    Editor,
    Reader,
    TargetName,
    may,
    may_trigger,
    readable,
)
from migronaut_airflow.plugins.models import (
    ActionRequest,
    ActionResult,
    ErrorBody,
    FailedDocumentPage,
    MigrationDetail,
    MigrationList,
    Permissions,
)
from migronaut_airflow.plugins.readings import (
    detail,
    failed_documents,
    migration_names,
    summaries,
)
from migronaut_airflow.plugins.runs import start_migration_dag
from migronaut_airflow.plugins.target import current_kit
from migronaut_airflow.plugins.throughput import ThroughputSampler
from migronaut_airflow.targets import DEFAULT_TARGET, target_names
from migronaut_core import BACKGROUND_STATUSES, ControlAction, Migronaut
from migronaut_core.errors import ConfigInvalidError, MigronautError

log = logging.getLogger(__name__)

#: The process's throughput samples (see :mod:`.throughput`).
SAMPLER = ThroughputSampler()

Kit = Annotated[Migronaut, Depends(current_kit)]

_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": description}
    for status, description in (
        (400, "bad input"),
        (401, "not signed in (no token)"),
        (403, "a bad token, or no access to the migration's DAG"),
        (503, "MongoDB or the UI's connection is not available"),
    )
}
_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "no such background migration"}
}
_CONFLICT: dict[int | str, dict[str, Any]] = {
    409: {"model": ErrorBody, "description": "the action does not fit the migration's status"}
}

router = APIRouter(prefix="/api", tags=["background migrations"], responses=_ERRORS)


def wanted_statuses(status: list[str] | None) -> set[str] | None:
    """The statuses asked for (repeated or comma-separated); None for all.

    :raises ConfigInvalidError: an unknown status.
    """
    if not status:
        return None
    wanted = {part.strip() for value in status for part in value.split(",") if part.strip()}
    unknown = wanted.difference(BACKGROUND_STATUSES)
    if unknown:
        raise ConfigInvalidError(
            f"unknown status {sorted(unknown)[0]!r}; "
            f"expected one of {', '.join(BACKGROUND_STATUSES)}",
            {"key": "status"},
        )
    return wanted or None


@router.get("/migrations", summary="List background migrations")
def list_migrations(
    user: CurrentUser,
    kit: Kit,
    status: Annotated[
        list[str] | None,
        Query(description="only these statuses (repeat it, or separate with commas)"),
    ] = None,
    target: TargetName = DEFAULT_TARGET,
) -> MigrationList:
    """The target's migrations whose DAG the user may read, oldest first, with live progress."""
    statuses = wanted_statuses(status)
    names = readable(user, migration_names(kit), target)
    rows = summaries(kit, names, statuses, SAMPLER, target) if names else []
    return MigrationList(
        migrations=rows,
        total=len(rows),
        statuses=list(BACKGROUND_STATUSES),
        target=target,
        targets=target_names(),
    )


@router.get("/migrations/{name}", summary="Detail one background migration", responses=_NOT_FOUND)
def get_migration(grant: Reader, kit: Kit) -> MigrationDetail:
    """Partitions, history, throttle and drift; needs read access to its DAG."""
    permissions = Permissions(
        can_control=may(grant.user, grant.migration, "PUT", grant.target),
        can_trigger=may_trigger(grant.user, grant.migration, grant.target),
    )
    return detail(kit, grant.migration, SAMPLER, permissions, grant.target)


@router.get(
    "/migrations/{name}/failed",
    summary="List the documents a background migration could not rewrite",
    responses=_NOT_FOUND,
)
def get_failed(
    grant: Reader,
    kit: Kit,
    limit: Annotated[int, Query(ge=1, le=10_000, description="at most this many")] = 100,
    offset: Annotated[int, Query(ge=0, description="skip this many")] = 0,
) -> FailedDocumentPage:
    """Their ``_id``s, oldest first, with the error's kind, code, value-free text and
    generation, never a document's values; needs read access to its DAG. ``retry``
    with ``failed_only`` retries exactly these."""
    return failed_documents(kit, grant.migration, limit=limit, offset=offset)


@router.post(
    "/migrations/{name}/actions/{action}",
    summary="Control a background migration",
    responses={**_NOT_FOUND, **_CONFLICT},
)
def act(grant: Editor, action: ControlAction, body: ActionRequest, kit: Kit) -> ActionResult:
    """Pause, resume, cancel, retry, retry from start, repin or unlock; needs edit access.

    ``failed_only`` (retry): just the documents it could not rewrite (``failed``:
    how many); refused (409) unless it is completed, failed or cancelled with some.

    The signed-in user is recorded as ``requested_by`` with the reason, in the
    migration's history and in Airflow's audit log (:mod:`.audit`). When the core
    says the migration may run now (a resume, retry or repin that left it pending
    or running), its DAG is started unless a run is active already (``dag_run`` /
    ``dag_run_note``).
    """
    reason = actions.clean_reason(body.reason)
    try:
        applied = kit.background.control(
            grant.migration,
            action,
            requested_by=grant.user_name,
            reason=reason,
            repin=body.repin,
            failed_only=body.failed_only,
        )
    except MigronautError as refused:
        audit.record_control(grant, action, reason=reason, outcome=refused.code)
        raise
    result = applied.to_dict()
    audit.record_control(
        grant, action, reason=reason, outcome=result["applied"], status=result["status"]
    )
    log.info("%s: %s by %s (%s)", grant.migration, action, grant.user_name, result["applied"])
    dag_run, note = None, None
    if applied.may_run:
        dag_run, note = start_migration_dag(grant, action)
    return ActionResult(
        migration=grant.migration,
        action=action,
        requested_by=grant.user_name,
        dag_run=dag_run,
        dag_run_note=note,
        **result,
    )
