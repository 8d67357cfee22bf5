"""The UI serves every target: ``?target=`` picks one, each gated by its own DAGs' rights.

Two targets on two databases: ``default`` and ``orders`` (``[migronaut] targets``),
each with the same migration registered. The app is built as Airflow's API server
builds it, with real users signed in (see :mod:`tests.support.ui`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.database import Database

from migronaut_dev.endpoints import airflow_connection
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.ui import UI, Airflow, signed_in_app

pytestmark = pytest.mark.airflow

USERS = {"viewer": "viewer", "editor": "user"}
ORDERS_DAG = f"migronaut_orders__bg__{SPLIT_NAME}"


@pytest.fixture(scope="module")
def airflow(airflow_db: Path) -> Iterator[Airflow]:
    with signed_in_app(USERS) as app:
        yield app


@pytest.fixture
def two_targets(
    tmp_path: Path,
    mongo_uri: str,
    mongo_client: MongoClient[dict[str, Any]],
    db: Database[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Database[dict[str, Any]]]:
    """The same migration registered in ``db`` (default) and in the orders database."""
    from migronaut_airflow.plugins.target import kits

    orders = mongo_client[f"{db.name}_orders"]
    for name, database in (("default", db), ("orders", orders)):
        folder = tmp_path / name
        write_background(folder)
        seed_users(database, 50)
        with make_kit(mongo_uri, database, folder) as kit:
            kit.runs.up()
    monkeypatch.setenv("AIRFLOW__MIGRONAUT__TARGETS", "orders")
    monkeypatch.setenv("AIRFLOW__MIGRONAUT__MIGRATIONS_DIR", str(tmp_path / "default"))
    monkeypatch.setenv("AIRFLOW__MIGRONAUT_ORDERS__MIGRATIONS_DIR", str(tmp_path / "orders"))
    monkeypatch.setenv("AIRFLOW_CONN_MIGRONAUT_DEFAULT", airflow_connection(mongo_uri, db.name))
    monkeypatch.setenv("AIRFLOW_CONN_MIGRONAUT_ORDERS", airflow_connection(mongo_uri, orders.name))
    try:
        yield orders
    finally:
        kits.close()
        mongo_client.drop_database(orders.name)


def test_each_target_lists_its_own_migrations_and_names_the_others(
    airflow: Airflow, two_targets: Database[dict[str, Any]]
) -> None:
    default = airflow.get("/api/migrations").json()
    orders = airflow.get("/api/migrations", params={"target": "orders"}).json()
    assert (default["target"], default["targets"]) == ("default", ["default", "orders"])
    assert [(m["target"], m["dag_id"]) for m in default["migrations"]] == [
        ("default", f"migronaut_bg__{SPLIT_NAME}")
    ]
    assert [(m["target"], m["dag_id"]) for m in orders["migrations"]] == [("orders", ORDERS_DAG)]
    unknown = airflow.get("/api/migrations", params={"target": "billing"})
    assert (unknown.status_code, unknown.json()["code"]) == (404, "UNKNOWN_TARGET")


def test_a_control_reaches_only_the_named_targets_database(
    airflow: Airflow, two_targets: Database[dict[str, Any]], db: Database[dict[str, Any]]
) -> None:
    refused = airflow.act(
        SPLIT_NAME, "pause", "viewer", {"reason": "not mine"}, params={"target": "orders"}
    )
    assert refused.status_code == 403
    assert refused.json()["context"]["dag_id"] == ORDERS_DAG

    paused = airflow.act(
        SPLIT_NAME, "pause", "editor", {"reason": "orders peak"}, params={"target": "orders"}
    )
    assert paused.status_code == 200, paused.text
    state = two_targets.migronaut_background.find_one({"_id": SPLIT_NAME})
    assert state is not None and state["status"] == "paused"
    untouched = db.migronaut_background.find_one({"_id": SPLIT_NAME})
    assert untouched is not None and untouched["status"] == "pending"


def test_pages_carry_the_target(airflow: Airflow, two_targets: Database[dict[str, Any]]) -> None:
    listing = airflow.get("/", params={"target": "orders"})
    assert listing.status_code == 200
    assert 'data-target="orders"' in listing.text
    assert f'href="{UI}/?target=default"' in listing.text
    assert 'aria-current="page">orders<' in listing.text
    redirect = airflow.get(f"/dags/{ORDERS_DAG}", follow_redirects=False)
    assert redirect.status_code == 303
    assert redirect.headers["location"] == f"{UI}/migrations/{SPLIT_NAME}?target=orders"
    page = airflow.get(f"/migrations/{SPLIT_NAME}", params={"target": "orders"})
    assert page.status_code == 200 and 'data-target="orders"' in page.text
