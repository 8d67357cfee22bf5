"""The UI plugin's app as Airflow's API server builds it, with users signed in for real."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

#: Where Airflow mounts the plugin's app.
UI = "/migronaut"


@dataclass
class Airflow:
    """A test client of the app and a JWT per signed-in user."""

    client: Any
    tokens: dict[str, str]

    def headers(self, user: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[user]}"} if user else {}

    def get(self, path: str, user: str | None = "viewer", **kwargs: Any) -> Any:
        return self.client.get(UI + path, headers=self.headers(user), **kwargs)

    def act(self, name: str, action: str, user: str | None, body: Any, **kwargs: Any) -> Any:
        url = f"{UI}/api/migrations/{name}/actions/{action}"
        return self.client.post(url, headers=self.headers(user), json=body, **kwargs)


@contextmanager
def signed_in_app(users: Mapping[str, str]) -> Iterator[Airflow]:
    """The plugin's app and the simple auth manager's ``/auth``, without Airflow's REST views.

    ``users`` (name: role) sign in through the real ``POST /auth/token`` with the
    passwords the auth manager generated; nothing of Airflow's auth is mocked.
    """
    from airflow.api_fastapi.app import init_auth_manager, init_plugins, purge_cached_app
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
    from airflow.api_fastapi.core_api.app import init_middlewares
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    listed = ",".join(f"{name}:{role}" for name, role in users.items())
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", listed)
        patch.setenv(
            "AIRFLOW__CORE__AUTH_MANAGER",
            "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        )
        purge_cached_app()
        app = FastAPI()
        init_plugins(app)  # mounts the plugin's app at /migronaut, as the API server does
        init_auth_manager(app)  # generates the passwords, mounts /auth
        init_middlewares(app)  # the token refresh
        client = TestClient(app)
        passwords = SimpleAuthManager.get_passwords()
        tokens = {}
        for name in users:
            answer = client.post(
                "/auth/token", json={"username": name, "password": passwords[name]}
            )
            assert answer.status_code == 201, answer.text
            tokens[name] = answer.json()["access_token"]
        try:
            yield Airflow(client, tokens)
        finally:
            purge_cached_app()
