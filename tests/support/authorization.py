"""A run authorizer of the kind ``authorize_runs = module.path:callable`` names."""

from __future__ import annotations

#: The users :func:`only_release_managers` lets act.
RELEASE_MANAGERS = frozenset({"release_bot"})


def only_release_managers(user_name: str, dag_id: str) -> bool:
    """Allow the release managers, on the default target's migration DAGs only."""
    return user_name in RELEASE_MANAGERS and dag_id.startswith("migronaut_bg__")
