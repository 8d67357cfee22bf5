"""The pages: server-rendered shells that a little vanilla JavaScript fills from the JSON API.

Every page and static file needs a signed-in Airflow user, like the API. Links
are built from the request's ``root_path``, so the pages work at ``/migronaut/``
on their own, inside the Airflow UI's iframe (same origin, so the browser sends
the ``_token`` cookie to the page and to its ``fetch`` calls) and under an
``[api] base_url`` with a path. Assets ship in the package (``static/``): no
CDN, no build step.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from migronaut_airflow.plugins.access import CurrentUser, Reader, TargetName, login_url
from migronaut_airflow.plugins.api import Kit, wanted_statuses
from migronaut_airflow.plugins.models import ErrorBody
from migronaut_airflow.plugins.target import UnknownTargetError
from migronaut_airflow.targets import DEFAULT_TARGET, migration_of_dag, target_names
from migronaut_core import (
    BACKGROUND_STATUSES,
    CONTROL_GUIDES,
    MAX_REASON_LENGTH,
    ControlAction,
)
from migronaut_core.errors import NotAppliedError

HERE: Final = Path(__file__).resolve().parent
STATIC_DIR: Final = HERE / "static"
TEMPLATES_DIR: Final = HERE / "templates"

#: The files ``/static/`` serves, by name (nothing else under the folder is reachable).
STATIC_FILES: Final = {path.name: path for path in STATIC_DIR.iterdir() if path.is_file()}

_templates = Environment(
    loader=FileSystemLoader(TEMPLATES_DIR),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)


@dataclass(frozen=True, slots=True)
class Control:
    """A control button: its action, label, what it does, and whether to warn first."""

    name: ControlAction
    label: str
    help: str
    destructive: bool


#: The buttons, one per core action, in the core's order, worded by the core.
CONTROLS: Final = tuple(
    Control(guide.action, guide.label, guide.explanation, destructive=guide.destructive)
    for guide in CONTROL_GUIDES
)

router = APIRouter(include_in_schema=False)


def prefix_of(request: Request) -> str:
    """Where this app is mounted (Airflow's base path + ``/migronaut``), without a trailing /."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def render(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    html = _templates.get_template(template).render(prefix=prefix_of(request), **context)
    return HTMLResponse(html, status_code=status)


@router.get("/", response_class=HTMLResponse)
def list_page(
    request: Request,
    user: CurrentUser,
    status: str | None = None,
    target: TargetName = DEFAULT_TARGET,
) -> HTMLResponse:
    """Every migration of the target the user may read, refreshed every two seconds;
    links to the other targets when there are several."""
    selected = sorted(wanted_statuses([status]) or []) if status else []
    targets = target_names()
    if target not in targets:
        raise UnknownTargetError(
            f"no target {target!r}: [migronaut] targets lists the others", {"target": target}
        )
    return render(
        request,
        "list.html",
        page="list",
        title="Background migrations",
        user_name=user.get_name(),
        statuses=BACKGROUND_STATUSES,
        selected=selected[0] if len(selected) == 1 else "",
        target=target,
        targets=targets,
    )


@router.get("/migrations/{name}", response_class=HTMLResponse)
def detail_page(request: Request, grant: Reader, kit: Kit) -> HTMLResponse:
    """One migration: progress, partitions, history, throttle, drift and the controls."""
    if kit.background.status(grant.migration) is None:
        raise NotAppliedError(
            f"background migration {grant.migration} is not registered",
            {"migration": grant.migration},
        )
    return render(
        request,
        "detail.html",
        page="detail",
        target=grant.target,
        title=grant.migration,
        name=grant.migration,
        user_name=grant.user_name,
        controls=CONTROLS,
        max_reason=MAX_REASON_LENGTH,
    )


@router.get("/dags/{dag_id}", response_class=HTMLResponse)
def dag_page(request: Request, dag_id: str, user: CurrentUser) -> Response:
    """The per-DAG view: a migration's DAG opens its detail page; any other DAG says so."""
    found = migration_of_dag(dag_id)
    if found is not None:
        target, migration = found
        page = f"{prefix_of(request)}/migrations/{quote(migration)}"
        if target != DEFAULT_TARGET:
            page += f"?target={quote(target)}"
        return RedirectResponse(page, status_code=303)
    return render(
        request,
        "not_migration.html",
        page="none",
        title="Not a background migration",
        user_name=user.get_name(),
        dag_id=dag_id,
    )


@router.get("/docs", response_class=HTMLResponse)
def docs_page(request: Request, user: CurrentUser) -> HTMLResponse:
    """A reference of the JSON API, rendered from its OpenAPI schema (no CDN needed)."""
    schema = request.app.openapi()
    return render(
        request,
        "docs.html",
        page="docs",
        title="API",
        user_name=user.get_name(),
        operations=_operations(schema),
    )


def _operations(schema: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for path, methods in schema.get("paths", {}).items():
        for method, operation in methods.items():
            rows.append(
                {
                    "method": method.upper(),
                    "path": path,
                    "summary": operation.get("summary", ""),
                    "description": operation.get("description", ""),
                    "parameters": [p.get("name") for p in operation.get("parameters", [])],
                    "responses": sorted(operation.get("responses", {})),
                }
            )
    return rows


@router.get("/static/{filename}")
def static_file(filename: str, user: CurrentUser) -> FileResponse:
    """A shipped asset (signed-in users only, like everything here)."""
    path = STATIC_FILES.get(filename)
    if path is None:
        raise HTTPException(404, "no such file")
    return FileResponse(path, headers={"Cache-Control": "private, max-age=300"})


def error_page(
    request: Request, status: int, body: ErrorBody, headers: dict[str, str] | None
) -> HTMLResponse:
    """An error as a page; a sign-in link when the user is not (or no longer) signed in."""
    sign_in = body.context.get("login_url")
    if status == 401:
        sign_in = login_url(next_url=str(request.url))
    response = render(
        request,
        "error.html",
        status=status,
        page="error",
        title=f"{status} {body.code}",
        http_status=status,
        error=body,
        sign_in=sign_in,
    )
    if headers:
        response.headers.update(headers)
    return response
