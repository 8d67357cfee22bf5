"""The UI's FastAPI app: the JSON API, the pages and the schema, all behind Airflow's sign-in.

Airflow mounts it at ``/migronaut`` (see :mod:`.plugin`). FastAPI's own
``/openapi.json`` and ``/docs`` routes cannot require a user, so they are off
and replaced: ``/openapi.json`` needs a signed-in user like every other route,
and ``/docs`` is a reference page rendered from the schema with no CDN.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from migronaut_airflow import __version__
from migronaut_airflow.plugins import api, brake, errors, pages
from migronaut_airflow.plugins.access import CurrentUser

DESCRIPTION = """\
Background migrations of [migronaut](https://pypi.org/project/migronaut-airflow/): live
progress, partitions, history and controls.

Authenticate as with Airflow's own API: `Authorization: Bearer <token>` (from `POST
/auth/token`), or the Airflow UI's sign-in cookie. Reading a migration needs read access to
its DAG `migronaut_bg__<name>`; controlling it needs edit access. Errors are
`{"code", "message", "context"}`.
"""

#: Pages load scripts, styles and images from this app only, and only Airflow may frame them.
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "frame-ancestors 'self'",
        "base-uri 'none'",
        "form-action 'self'",
    )
)


def create_app() -> FastAPI:
    """A new instance of the UI's app (Airflow mounts the plugin's; tests make their own)."""
    app = FastAPI(
        title="migronaut background migrations",
        version=__version__,
        description=DESCRIPTION,
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )
    app.include_router(api.router)
    app.include_router(brake.router)
    app.include_router(pages.router)
    app.add_api_route(
        "/openapi.json", _openapi_route(app), methods=["GET"], include_in_schema=False
    )
    errors.install(app, errors.ErrorRenderer(pages.error_page))
    app.middleware("http")(security_headers)
    return app


def _openapi_route(app: FastAPI) -> Callable[..., JSONResponse]:
    def openapi(request: Request, user: CurrentUser) -> JSONResponse:
        """The OpenAPI schema, with this mount as its server."""
        schema: dict[str, Any] = dict(app.openapi())
        schema["servers"] = [{"url": pages.prefix_of(request) or "/"}]
        return JSONResponse(schema)

    return openapi


async def security_headers(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    """No sniffing, no foreign scripts or framing, and no caching of data answers."""
    response = await call_next(request)
    response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    response.headers.setdefault("Cache-Control", "no-store")
    return response
