"""Errors as answers: ``{code, message, context}`` with a fitting HTTP status.

migronaut's own errors keep their stable codes (the CLI's ``--json`` shape);
the status says how a client should react::

    400  bad input: CONFIG_INVALID (a blank reason too), MIGRATION_INVALID_NAME, BAD_REQUEST
    401  NOT_AUTHENTICATED: no token (pages answer with a sign-in link)
    403  FORBIDDEN: a bad token, or no right on the migration's DAG
    404  NOT_APPLIED: no such background migration; UNKNOWN_TARGET: no such target;
         NOT_FOUND: no such route
    409  BACKGROUND_CONFLICT and the like: the action does not fit the state now
    503  STORE_ERROR, CONNECTION_FAILED, NOT_CONFIGURED: MongoDB or the UI's target

Messages and contexts come from the engine, which never puts document values in
them; pymongo's own texts (which may quote values) are replaced by their type.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pymongo.errors import PyMongoError
from starlette.exceptions import HTTPException as StarletteHTTPException

from migronaut_airflow.plugins.access import AccessDeniedError, login_url
from migronaut_airflow.plugins.models import ErrorBody
from migronaut_airflow.plugins.target import TargetNotConfiguredError, UnknownTargetError
from migronaut_core.errors import (
    BackgroundError,
    ChecksumMismatchError,
    ConfigInvalidError,
    LockError,
    MigrationFileError,
    MigrationInvalidNameError,
    MigronautError,
    NotAppliedError,
    StoreError,
)

log = logging.getLogger(__name__)

#: migronaut's errors by HTTP status, most specific class first.
_STATUS_OF: tuple[tuple[type[MigronautError], int], ...] = (
    (AccessDeniedError, 403),
    (UnknownTargetError, 404),
    (TargetNotConfiguredError, 503),
    (ConfigInvalidError, 400),
    (MigrationInvalidNameError, 400),
    (NotAppliedError, 404),
    (MigrationFileError, 409),
    (ChecksumMismatchError, 409),
    (LockError, 409),
    (BackgroundError, 409),
    (StoreError, 503),
)

_CODE_OF_STATUS = {
    400: "BAD_REQUEST",
    401: "NOT_AUTHENTICATED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
}


def status_of(error: MigronautError) -> int:
    """The HTTP status of a migronaut error (500 for one no client can fix)."""
    for kind, status in _STATUS_OF:
        if isinstance(error, kind):
            return status
    return 500


#: Renders an error page: (request, status, body, headers) -> response.
PageRenderer = Callable[[Request, int, ErrorBody, dict[str, str] | None], Response]


class ErrorRenderer:
    """Renders an error as JSON for the API, or as a page for a browser on a page route."""

    def __init__(self, page_renderer: PageRenderer | None = None) -> None:
        self.page_renderer = page_renderer

    def __call__(
        self,
        request: Request,
        status: int,
        body: ErrorBody,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        sent = dict(headers or {})
        if status == 401:
            sent["WWW-Authenticate"] = "Bearer"
        if self.page_renderer is not None and is_page(request):
            return self.page_renderer(request, status, body, sent or None)
        return JSONResponse(body.model_dump(), status_code=status, headers=sent or None)


def is_page(request: Request) -> bool:
    """A request for an HTML page (not the API, the schema or a static file)."""
    path = request.scope["path"].removeprefix(request.scope.get("root_path", "").rstrip("/"))
    return not path.startswith(("/api/", "/static/", "/openapi.json"))


def install(app: FastAPI, render: ErrorRenderer) -> None:
    """Answer every error of ``app`` with :class:`~.models.ErrorBody`."""

    async def migronaut_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, MigronautError)
        status = status_of(exc)
        if status == 500:
            log.error("%s failed: %s", request.scope["path"], exc.code)
        return render(request, status, ErrorBody(**exc.to_dict()))

    async def store_failed(request: Request, exc: Exception) -> Response:
        log.warning("%s: MongoDB failed (%s)", request.scope["path"], type(exc).__name__)
        body = ErrorBody(
            code="STORE_ERROR", message=f"MongoDB failed: {type(exc).__name__}", context={}
        )
        return render(request, 503, body)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        detail = str(exc.detail)
        context: dict[str, Any] = {}
        if exc.status_code == 401 or "token" in detail.lower():
            context["login_url"] = login_url()
        code = _CODE_OF_STATUS.get(exc.status_code, "HTTP_ERROR")
        body = ErrorBody(code=code, message=detail, context=context)
        return render(request, exc.status_code, body, exc.headers)

    async def bad_input(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        problems = [
            {
                "where": ".".join(str(part) for part in error.get("loc", ())),
                "problem": error.get("msg"),
            }
            for error in exc.errors()
        ]
        body = ErrorBody(
            code="BAD_REQUEST", message="the request is not valid", context={"errors": problems}
        )
        return render(request, 400, body)

    app.add_exception_handler(MigronautError, migronaut_error)
    app.add_exception_handler(PyMongoError, store_failed)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, bad_input)
