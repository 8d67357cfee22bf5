"""The target's brake in the JSON API: read it, set it, release it.

``GET /api/brake`` answers the brake and its log; ``POST /api/brake`` sets it
(``reason`` required, ``until`` optional) and ``POST /api/brake/release`` lifts
it, with the signed-in user as ``requested_by``. The brake acts on every
migration of the target, so the right it needs is the one the control DAG's
``brake`` asks for: reading or editing the target's control DAG
(``migronaut_control``, ``migronaut_<target>__control``). Each setting and
release also lands in Airflow's audit log under that DAG (``migronaut_brake``,
``migronaut_release``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails
from airflow.models.log import Log
from airflow.utils.session import create_session
from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.exc import SQLAlchemyError

from migronaut_airflow.plugins import actions
from migronaut_airflow.plugins.access import AccessDeniedError, CurrentUser, TargetName
from migronaut_airflow.plugins.audit import EVENT_PREFIX
from migronaut_airflow.plugins.models import ErrorBody
from migronaut_airflow.plugins.target import current_kit
from migronaut_airflow.targets import DEFAULT_TARGET, dag_prefix
from migronaut_core import Migronaut
from migronaut_core.errors import MigronautError

if TYPE_CHECKING:
    from airflow.api_fastapi.auth.managers.base_auth_manager import ResourceMethod
    from airflow.api_fastapi.auth.managers.models.base_user import BaseUser

log = logging.getLogger(__name__)

Kit = Annotated[Migronaut, Depends(current_kit)]


def control_dag_id(target: str = DEFAULT_TARGET) -> str:
    """The target's control DAG, whose rights the brake needs."""
    return f"{dag_prefix(target)}control"


class TargetAccessDeniedError(AccessDeniedError):
    """The signed-in user lacks the right the brake needs on the target's control DAG."""

    def __init__(self, needs: str, target: str = DEFAULT_TARGET) -> None:
        dag_id = control_dag_id(target)
        MigronautError.__init__(
            self,
            f"you need {needs} access to the DAG {dag_id} for the target's brake",
            {"dag_id": dag_id, "needs": needs, "target": target},
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.__class__, (self.context["needs"], self.context["target"]))


@dataclass(frozen=True, slots=True)
class TargetGrant:
    """A user allowed the brake of a target (``can_edit``: set and release it too)."""

    user_name: str
    target: str
    can_edit: bool = False


def _may(user: BaseUser, method: ResourceMethod, target: str) -> bool:
    return get_auth_manager().is_authorized_dag(
        method=method, details=DagDetails(id=control_dag_id(target)), user=user
    )


def brake_reader(user: CurrentUser, target: TargetName = DEFAULT_TARGET) -> TargetGrant:
    """Depend on read access to the target's control DAG."""
    if not _may(user, "GET", target):
        raise TargetAccessDeniedError("read", target)
    return TargetGrant(user.get_name(), target, can_edit=_may(user, "PUT", target))


def brake_editor(user: CurrentUser, target: TargetName = DEFAULT_TARGET) -> TargetGrant:
    """Depend on edit access to the target's control DAG."""
    if not _may(user, "PUT", target):
        raise TargetAccessDeniedError("edit", target)
    return TargetGrant(user.get_name(), target, can_edit=True)


BrakeReader = Annotated[TargetGrant, Depends(brake_reader)]
BrakeEditor = Annotated[TargetGrant, Depends(brake_editor)]


class BrakeRequest(BaseModel):
    """Why, and optionally until when; logged with the signed-in user."""

    model_config = ConfigDict(extra="forbid")

    reason: str = Field(description="required", examples=["INC-4711: primary under pressure"])
    until: datetime | None = Field(
        None, description="when it ends by itself (ISO 8601 with a time zone)"
    )


class ReleaseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(description="required", examples=["resolved"])


class BrakeState(BaseModel):
    """The brake (``on``; as set: reason, who, since, until; ``changed`` by this request),
    its log, oldest first, and whether the signed-in user may set and release it."""

    brake: dict[str, Any]
    log: list[dict[str, Any]]
    target: str
    can_edit: bool


router = APIRouter(
    prefix="/api/brake",
    tags=["the target's brake"],
    responses={
        status: {"model": ErrorBody, "description": description}
        for status, description in (
            (400, "bad input"),
            (401, "not signed in (no token)"),
            (403, "a bad token, or no access to the target's control DAG"),
            (503, "MongoDB or the UI's connection is not available"),
        )
    },
)


def _state(kit: Migronaut, brake: dict[str, Any], grant: TargetGrant) -> BrakeState:
    entries = [entry.to_dict() for entry in kit.background.brake_log()]
    return BrakeState(brake=brake, log=entries, target=grant.target, can_edit=grant.can_edit)


@router.get("", summary="The target's brake and its log")
def get_brake(grant: BrakeReader, kit: Kit) -> BrakeState:
    """Needs read access to the target's control DAG."""
    return _state(kit, kit.background.brake_status().to_dict(), grant)


@router.post("", summary="Brake every background migration of the target")
def set_brake(grant: BrakeEditor, body: BrakeRequest, kit: Kit) -> BrakeState:
    """Every lane holds within one batch until released or ``until``; needs edit access."""
    reason = actions.clean_reason(body.reason)
    try:
        view = kit.background.brake(reason, until=body.until, requested_by=grant.user_name)
    except MigronautError as refused:
        _record(grant, "brake", reason=reason, outcome=refused.code)
        raise
    _record(grant, "brake", reason=reason, outcome="changed" if view.changed else "unchanged")
    return _state(kit, view.to_dict(), grant)


@router.post("/release", summary="Release the target's brake")
def release_brake(grant: BrakeEditor, body: ReleaseRequest, kit: Kit) -> BrakeState:
    """Lanes resume within a second or two; needs edit access."""
    reason = actions.clean_reason(body.reason)
    view = kit.background.release(requested_by=grant.user_name, reason=reason)
    _record(grant, "release", reason=reason, outcome="changed" if view.changed else "unchanged")
    return _state(kit, view.to_dict(), grant)


def _record(grant: TargetGrant, action: str, *, reason: str, outcome: str) -> None:
    """One Airflow audit log entry under the target's control DAG."""
    extra = {"reason": reason, "outcome": outcome, "target": grant.target}
    entry = Log(
        event=EVENT_PREFIX + action,
        owner=grant.user_name,
        owner_display_name=grant.user_name,
        dag_id=control_dag_id(grant.target),
        extra=json.dumps(extra),
    )
    try:
        with create_session() as session:
            session.add(entry)
    except SQLAlchemyError:
        log.exception("the audit log entry for the target's %s was not written", action)
