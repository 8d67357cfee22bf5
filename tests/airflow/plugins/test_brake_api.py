"""The brake in the UI plugin's API: read, set, release, rights on the control DAG, audit.

As ``test_api.py``: FastAPI's test client, Airflow's real auth (users ``viewer`` and
``editor`` signed in through ``POST /auth/token``), a real mongod.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from migronaut_airflow.plugins.brake import control_dag_id
from tests.support.ui import UI, Airflow, signed_in_app

USERS = {"viewer": "viewer", "editor": "user"}
BRAKE = f"{UI}/api/brake"


@pytest.fixture(scope="module")
def airflow(airflow_db: Path) -> Iterator[Airflow]:
    with signed_in_app(USERS) as app:
        yield app


def audit_entries() -> list[tuple[str, str, dict[str, Any]]]:
    from airflow.models.log import Log
    from airflow.utils.session import create_session

    with create_session() as session:
        query = session.query(Log).filter(
            Log.dag_id == control_dag_id(), Log.event.like("migronaut_%")
        )
        found = [(row.event, row.owner, json.loads(row.extra)) for row in query.order_by(Log.id)]
        query.delete(synchronize_session=False)
    return found


@pytest.fixture(autouse=True)
def _fresh(airflow_db: Path) -> Iterator[None]:
    from migronaut_airflow.plugins.target import kits

    audit_entries()
    yield
    kits.close()


def post(airflow: Airflow, path: str, user: str | None, body: Any) -> Any:
    return airflow.client.post(BRAKE + path, headers=airflow.headers(user), json=body)


def test_an_editor_brakes_and_releases_and_both_are_audited(
    airflow: Airflow, migronaut_connection: str
) -> None:
    assert airflow.get("/api/brake").json()["brake"] == {"on": False, "changed": False}
    braked = post(
        airflow, "", "editor", {"reason": "INC 1\n  primary", "until": "2099-01-01T00:00:00Z"}
    )
    assert braked.status_code == 200, braked.text
    body = braked.json()
    assert body["brake"]["on"] and body["brake"]["changed"]
    assert body["brake"]["requested_by"] == "editor"
    assert body["brake"]["reason"] == "INC 1 primary"
    assert body["brake"]["until"].startswith("2099-01-01T00:00:00")
    read = airflow.get("/api/brake", "viewer").json()
    assert read["brake"]["on"] and read["brake"]["reason"] == body["brake"]["reason"]
    assert (read["can_edit"], body["can_edit"]) == (False, True)  # the page's form follows it
    assert airflow.get("/api/brake", "editor").json()["can_edit"] is True
    released = post(airflow, "/release", "editor", {"reason": "resolved"})
    assert released.status_code == 200 and released.json()["brake"]["changed"]
    logged = airflow.get("/api/brake").json()["log"]
    assert [(e["action"], e["requested_by"]) for e in logged] == [
        ("brake", "editor"),
        ("release", "editor"),
    ]
    events = audit_entries()
    assert [(event, owner, extra["outcome"]) for event, owner, extra in events] == [
        ("migronaut_brake", "editor", "changed"),
        ("migronaut_release", "editor", "changed"),
    ]


def test_a_viewer_may_read_but_not_brake(airflow: Airflow, migronaut_connection: str) -> None:
    refused = post(airflow, "", "viewer", {"reason": "I should not"})
    assert refused.status_code == 403
    assert refused.json()["code"] == "FORBIDDEN"
    assert refused.json()["context"]["dag_id"] == control_dag_id()
    assert post(airflow, "/release", "viewer", {"reason": "no"}).status_code == 403
    assert post(airflow, "", None, {"reason": "anonymous"}).status_code == 401
    assert airflow.get("/api/brake", "viewer").json()["brake"]["on"] is False
    assert audit_entries() == []


@pytest.mark.parametrize(
    "body",
    [{"reason": "   "}, {"reason": "r", "until": "2001-01-01T00:00:00Z"}, {"reason": "r", "x": 1}],
    ids=["blank reason", "past until", "unknown key"],
)
def test_a_bad_brake_is_refused_and_changes_nothing(
    airflow: Airflow, migronaut_connection: str, body: dict[str, Any]
) -> None:
    refused = post(airflow, "", "editor", body)
    assert refused.status_code in (400, 422), refused.text
    assert airflow.get("/api/brake").json()["brake"]["on"] is False
