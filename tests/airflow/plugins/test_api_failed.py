"""The UI's failed documents (``GET …/failed``) and its failed-only retry: Airflow's real auth.

The one answer of the API that carries ``_id``s: those of the documents a migration
could not rewrite, with why, never their values.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo.database import Database

from tests.support import kit_json
from tests.support.background import FLAKY_NAME, fix_flaky, make_kit, seed_users, write_flaky
from tests.support.ui import Airflow, signed_in_app

USERS = {"viewer": "viewer", "editor": "user"}
FAILING = [n for n in range(200) if n % 10 == 3]


@pytest.fixture(scope="module")
def airflow(airflow_db: Path) -> Iterator[Airflow]:
    with signed_in_app(USERS) as app:
        yield app


@pytest.fixture(autouse=True)
def _fresh(airflow_db: Path) -> Iterator[None]:
    """Each test's database is new: drop the kits cached for earlier ones."""
    from migronaut_airflow.plugins.target import kits

    yield
    kits.close()


@pytest.fixture
def flaky(
    dags_folder: Path, migronaut_connection: str, mongo_uri: str, db: Database[dict[str, Any]]
) -> Path:
    """The flaky split, completed with its 20 failed documents; the file's path."""
    seed_users(db, 200)
    path = write_flaky(dags_folder)
    with make_kit(mongo_uri, db, dags_folder) as kit:
        kit.runs.up()
        assert kit_json.run(kit, FLAKY_NAME)["status"] == "completed"
    return path


def test_the_failed_documents_are_listed_by_id_and_kind_without_values(
    airflow: Airflow, flaky: Path
) -> None:
    page = airflow.get(f"/api/migrations/{FLAKY_NAME}/failed?limit=4&offset=2")
    assert page.status_code == 200, page.text
    body = page.json()
    assert {key: body[key] for key in ("name", "status", "total", "offset", "limit")} == {
        "name": FLAKY_NAME,
        "status": "completed",
        "total": 20,
        "offset": 2,
        "limit": 4,
    }
    assert [row["id"] for row in body["documents"]] == FAILING[2:6]
    assert {(row["reason"], row["error"], row["code"]) for row in body["documents"]} == {
        ("transform", "ValueError", None)
    }
    assert "First" not in page.text and "cannot split" not in page.text
    assert airflow.get(f"/api/migrations/{FLAKY_NAME}/failed?limit=0").status_code == 400
    missing = airflow.get("/api/migrations/20990101000000_unknown/failed")
    assert missing.status_code in (403, 404)
    detail_page = airflow.get(f"/migrations/{FLAKY_NAME}")
    assert 'data-role="failed"' in detail_page.text
    assert 'name="failed_only"' in detail_page.text


def test_a_failed_only_retry_from_the_ui(
    airflow: Airflow, flaky: Path, mongo_uri: str, db: Database[dict[str, Any]]
) -> None:
    refused = airflow.act(FLAKY_NAME, "retry", "viewer", {"reason": "x", "failed_only": True})
    assert refused.status_code == 403
    fix_flaky(flaky)
    retried = airflow.act(
        FLAKY_NAME, "retry", "editor", {"reason": "fixed", "failed_only": True, "repin": True}
    )
    assert retried.status_code == 200, retried.text
    assert (retried.json()["status"], retried.json()["failed"]) == ("pending", 20)
    again = airflow.act(FLAKY_NAME, "retry", "editor", {"reason": "again", "failed_only": True})
    assert again.status_code == 409, again.text
    assert again.json()["context"]["reason"] == "status"

    listed = airflow.get(f"/api/migrations/{FLAKY_NAME}/failed").json()
    assert listed["retrying"] is True
    assert {row["retrying"] for row in listed["documents"]} == {True}
    with make_kit(mongo_uri, db, flaky.parent) as kit:
        assert kit_json.run(kit, FLAKY_NAME)["status"] == "completed"
    after = airflow.get(f"/api/migrations/{FLAKY_NAME}/failed").json()
    assert [(row["id"], row["error"]) for row in after["documents"]] == [(13, "KeyError")]
    history = airflow.get(f"/api/migrations/{FLAKY_NAME}").json()["history"]
    retry = next(entry for entry in history if entry["action"] == "reopen")
    assert (retry["by"], retry["details"]) == ("editor", {"failed_only": True, "failed": 20})
    assert json.dumps(after).count("Changed") == 0
