"""The Airflow plugin: migronaut's pages and API inside the Airflow UI.

The provider registers it (``get_provider_info()["plugins"]`` and the
``airflow.plugins`` entry point), so installing ``migronaut-airflow`` is enough:
the API server mounts the app at ``/migronaut``, the navigation gets a
"Migrations" entry, and every DAG gets a "Migration" tab (a migration's DAG
opens its detail page; any other DAG says it is not one).

Airflow imports plugins in every process — scheduler, DAG processor, each task
— while only the API server serves the app. So this module stays light: the
FastAPI app and its imports (Airflow's security module among them) are built
on the first request, by :class:`LazyApp`.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from airflow.plugins_manager import AirflowPlugin

#: Where the API server mounts the app.
URL_PREFIX = "/migronaut"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class LazyApp:
    """An ASGI app that builds the real one (``module:factory``) on its first request.

    :param target: e.g. ``"migronaut_airflow.plugins.app:create_app"``.
    """

    def __init__(self, target: str) -> None:
        self.target = target
        self._app: Callable[[Scope, Receive, Send], Awaitable[None]] | None = None
        self._lock = threading.Lock()

    def build(self) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
        """The real app, built once."""
        with self._lock:
            if self._app is None:
                module, _, factory = self.target.partition(":")
                self._app = getattr(importlib.import_module(module), factory)()
            return self._app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await (self._app or self.build())(scope, receive, send)


class MigronautPlugin(AirflowPlugin):
    """Background migrations in the Airflow UI: list, detail, controls, JSON API."""

    name = "migronaut"
    fastapi_apps = [
        {
            "app": LazyApp("migronaut_airflow.plugins.app:create_app"),
            "url_prefix": URL_PREFIX,
            "name": "migronaut",
        }
    ]
    # Relative hrefs: the UI resolves them against its <base href>, so an
    # [api] base_url with a path works too.
    external_views = [
        {
            "name": "Migrations",
            "href": "migronaut/",
            "icon": "migronaut/static/icon.svg",
            "url_route": "migronaut",
            "destination": "nav",
        },
        {
            "name": "Migration",
            "href": "migronaut/dags/{DAG_ID}",
            "icon": "migronaut/static/icon.svg",
            "url_route": "migronaut-dag",
            "destination": "dag",
        },
    ]
