"""Who may act through migronaut's control and admin DAGs: the run's triggering user's rights.

Airflow checks only that a user may trigger ``migronaut_control``; the control it
asks for then reaches whichever migration the form names. So a task of those DAGs
acts only when the user who triggered its run may *edit* the DAG it acts on (the
migration's DAG for a control, the run's own DAG for a target-wide operation) —
the same right the UI page asks for — and otherwise fails before anything is
written, naming the user, the DAG and the setting that governs it.

How the right is decided is the target's ``authorize_runs`` setting:

- ``auth_manager`` (the default): Airflow's configured auth manager. The task
  runs on a worker, without the user's token, so the user is found by name:
  supported for Airflow's simple auth manager (the users of
  ``[core] simple_auth_manager_users``); any other manager needs a callable;
- ``module.path:callable``: ``callable(user_name, dag_id) -> bool``, for an auth
  manager whose users a worker cannot look up by name (FAB, Keycloak, …);
- ``off``: Airflow's own trigger permission is the only check.

A run with no triggering user (started by another DAG or a schedule) or with one
the auth manager does not know (``airflow dags trigger`` names the OS user) is
refused unless ``authorize_runs`` is ``off``: on an Airflow host, the
``migronaut`` CLI is the tool for such operators.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Final

from airflow.sdk.exceptions import AirflowFailException

from migronaut_core import ConfigInvalidError

#: The values of ``authorize_runs`` that are not a callable's path.
AUTH_MANAGER: Final = "auth_manager"
OFF: Final = "off"

RunAuthorizer = Callable[[str, str], bool]


def check_policy(policy: str) -> str:
    """Return ``policy`` when it is ``auth_manager``, ``off`` or ``module:callable``.

    :raises ConfigInvalidError: naming the key.
    """
    if policy in (AUTH_MANAGER, OFF):
        return policy
    module, _, name = policy.partition(":")
    if not module or not name or not all(part.isidentifier() for part in module.split(".")):
        raise ConfigInvalidError(
            "authorize_runs must be 'auth_manager', 'off' or 'module.path:callable'",
            {"key": "authorize_runs"},
        )
    return policy


def authorize_run(user_name: str | None, dag_id: str, policy: str, action: str) -> None:
    """Let the task go on only when ``user_name`` may edit ``dag_id`` under ``policy``.

    :raises AirflowFailException: naming the user, the DAG and why (no retries:
        retrying cannot grant a right).
    """
    if policy == OFF:
        return
    if not user_name:
        raise _refused(
            f"{action} needs a run triggered by a user who may edit {dag_id}; this run has "
            "no triggering user"
        )
    allowed = (
        _auth_manager_allows(user_name, dag_id)
        if policy == AUTH_MANAGER
        else bool(_authorizer(policy)(user_name, dag_id))
    )
    if not allowed:
        raise _refused(f"{action} refused: {user_name!r} may not edit the DAG {dag_id}")


def _refused(message: str) -> AirflowFailException:
    return AirflowFailException(
        f"FORBIDDEN: {message} (nothing was changed; see the authorize_runs setting)"
    )


def _auth_manager_allows(user_name: str, dag_id: str) -> bool:
    from airflow.api_fastapi.app import create_auth_manager  # noqa: PLC0415 - workers only
    from airflow.api_fastapi.auth.managers.models.resource_details import (  # noqa: PLC0415
        DagDetails,
    )

    manager = create_auth_manager()
    user = _user_named(manager, user_name)
    if user is None:
        raise _refused(
            f"the run's triggering user {user_name!r} is not a user of the auth manager "
            f"({type(manager).__name__})"
        )
    return bool(manager.is_authorized_dag(method="PUT", details=DagDetails(id=dag_id), user=user))


def _user_named(manager: Any, user_name: str) -> Any:
    """The auth manager's user of that name; None when it has none."""
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import (  # noqa: PLC0415
        SimpleAuthManager,
    )
    from airflow.api_fastapi.auth.managers.simple.user import (  # noqa: PLC0415
        SimpleAuthManagerUser,
    )
    from airflow.configuration import conf  # noqa: PLC0415

    if not isinstance(manager, SimpleAuthManager):
        raise _refused(
            f"the auth manager {type(manager).__name__} cannot look its users up by name on a "
            "worker; set authorize_runs to a 'module.path:callable' that decides, or 'off'"
        )
    if conf.getboolean("core", "simple_auth_manager_all_admins", fallback=False):
        return SimpleAuthManagerUser(username=user_name, role="admin")
    return next((user for user in manager.get_users() if user.username == user_name), None)


def _authorizer(policy: str) -> RunAuthorizer:
    module, _, name = policy.partition(":")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise _refused(f"the authorize_runs callable {policy} cannot be imported") from exc
    if not callable(found):
        raise _refused(f"authorize_runs names {policy}, which is not callable")
    return found  # type: ignore[no-any-return]
