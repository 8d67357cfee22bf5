"""Who may see and steer a migration: the signed-in Airflow user and its rights on the DAG.

A plugin's FastAPI app gets no authentication from Airflow, so every route of
this one depends on :data:`CurrentUser` — Airflow's own ``get_user`` dependency:
an ``Authorization: Bearer <JWT>`` header (a token from ``POST /auth/token``)
or, without one, the ``_token`` cookie the Airflow UI's sign-in sets (httponly,
SameSite=Lax, sent by the browser to these same-origin pages and their
``fetch`` calls). No token: 401; a bad or revoked one: 403 (as Airflow answers).

Rights are the auth manager's rights on the migration's DAG in its target,
``migronaut_bg__<name>`` (``migronaut_<target>__bg__<name>`` for a named target):
reading needs ``GET`` on it, controls need ``PUT`` (edit), starting its DAG after a
resume needs ``POST`` on its runs. The list shows only the migrations whose DAG
the user may read. Every route takes the target as ``?target=`` (default ``default``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import Depends, Query

from migronaut_airflow.targets import DEFAULT_TARGET, dag_id_for
from migronaut_core.errors import MigronautError

if TYPE_CHECKING:
    from airflow.api_fastapi.auth.managers.base_auth_manager import ResourceMethod
    from airflow.api_fastapi.auth.managers.models.base_user import BaseUser

#: The signed-in Airflow user (401 without a token, 403 with a bad one).
CurrentUser = GetUserDep


class AccessDeniedError(MigronautError):
    """The signed-in user lacks the right an operation needs on the migration's DAG."""

    code = "FORBIDDEN"

    def __init__(self, migration: str, needs: str, target: str = DEFAULT_TARGET) -> None:
        dag_id = dag_id_for(migration, target)
        super().__init__(
            f"you need {needs} access to the DAG {dag_id} for this",
            {"migration": migration, "dag_id": dag_id, "needs": needs, "target": target},
        )

    def __reduce__(self) -> tuple[Any, ...]:
        context = self.context
        return (self.__class__, (context["migration"], context["needs"], context["target"]))


@dataclass(frozen=True, slots=True)
class Grant:
    """A user allowed an operation on one migration of a target."""

    migration: str
    user: BaseUser
    target: str = DEFAULT_TARGET

    @property
    def user_name(self) -> str:
        return self.user.get_name()

    @property
    def dag_id(self) -> str:
        """The migration's DAG."""
        return dag_id_for(self.migration, self.target)


#: The target a request names (``?target=``; the default target when absent).
TargetName = Annotated[str, Query(description="the target (default: the default target)")]


def may(
    user: BaseUser, migration: str, method: ResourceMethod, target: str = DEFAULT_TARGET
) -> bool:
    """Whether ``user`` may ``method`` the migration's DAG itself."""
    return get_auth_manager().is_authorized_dag(
        method=method, details=DagDetails(id=dag_id_for(migration, target)), user=user
    )


def may_trigger(user: BaseUser, migration: str, target: str = DEFAULT_TARGET) -> bool:
    """Whether ``user`` may start runs of the migration's DAG."""
    return get_auth_manager().is_authorized_dag(
        method="POST",
        access_entity=DagAccessEntity.RUN,
        details=DagDetails(id=dag_id_for(migration, target)),
        user=user,
    )


def readable(user: BaseUser, migrations: Iterable[str], target: str = DEFAULT_TARGET) -> set[str]:
    """The migrations among ``migrations`` whose DAG ``user`` may read (one batch check)."""
    by_dag = {dag_id_for(name, target): name for name in migrations}
    allowed = get_auth_manager().filter_authorized_dag_ids(
        dag_ids=set(by_dag), user=user, method="GET"
    )
    return {by_dag[dag_id] for dag_id in allowed}


def reader(name: str, user: CurrentUser, target: TargetName = DEFAULT_TARGET) -> Grant:
    """Depend on read access to the migration ``name`` of the path."""
    if not may(user, name, "GET", target):
        raise AccessDeniedError(name, "read", target)
    return Grant(name, user, target)


def editor(name: str, user: CurrentUser, target: TargetName = DEFAULT_TARGET) -> Grant:
    """Depend on edit access to the migration ``name`` of the path."""
    if not may(user, name, "PUT", target):
        raise AccessDeniedError(name, "edit", target)
    return Grant(name, user, target)


Reader = Annotated[Grant, Depends(reader)]
Editor = Annotated[Grant, Depends(editor)]


def login_url(next_url: str | None = None) -> str:
    """Where the auth manager signs people in (then back to ``next_url``)."""
    manager = get_auth_manager()
    return manager.get_url_login(next_url=next_url) if next_url else manager.get_url_login()
