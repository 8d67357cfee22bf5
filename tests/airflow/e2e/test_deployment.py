"""A platform team's deployment, end to end on a real ``airflow standalone``.

The shipped DAG file is copied into a fresh dags folder with empty migrations
folders for two targets — ``default`` (database A) and ``orders`` (database B, listed
in ``[migronaut] targets``) — and Airflow keeps its default of creating DAGs paused.
Nobody unpauses anything: migration files are dropped into both folders, the two
``up`` DAGs are triggered through the REST API by a user with the ``user`` role, and
both migrations run at once under distinct DAG ids. Then the control DAG's
permission check: a viewer's trigger is refused by Airflow, a run triggered from
the command line (by an OS user the auth manager does not know) is refused by the
control task, and neither changes anything; the editor's pause is applied.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.database import Database

from migronaut_dev.airflow_api import AirflowHarnessError
from migronaut_dev.airflow_standalone import AirflowStandalone, overlapping
from migronaut_dev.endpoints import airflow_connection
from tests.support import kit_json
from tests.support.background import SPLIT_NAME, make_kit, seed_users, write_background
from tests.support.standalone import Ground, Standalone, running_standalone

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

DOCUMENTS = 3_000
USERS = {"admin": "admin", "editor": "user", "viewer": "viewer"}
PROBE = "20240109000000_permission_probe"
#: Short waits, as the other standalone modules use them.
DAG_OPTIONS = (
    "lane_retry_delay=timedelta(seconds=1), no_lease_grace_seconds=5.0, "
    "poll_interval=1.0, migronaut_config={'lock_ttl_seconds': 4}"
)


@dataclass
class Deployment:
    airflow: AirflowStandalone
    dags: Path
    shop: Database[dict[str, Any]]
    orders: Database[dict[str, Any]]
    mongo_uri: str

    def dag(self, dag_id: str) -> dict[str, Any]:
        return dict(self.airflow.request("GET", f"/api/v2/dags/{dag_id}"))

    def trigger_as(self, user: str, dag_id: str, conf: dict[str, Any]) -> Any:
        return self.airflow.request_as(
            user,
            "POST",
            f"/api/v2/dags/{dag_id}/dagRuns",
            json={"logical_date": None, "conf": conf},
        )


def trigger_from_the_command_line(
    airflow: AirflowStandalone, dag_id: str, conf: dict[str, Any]
) -> None:
    """``airflow dags trigger``: a run whose triggering user the auth manager does not know."""
    subprocess.run(
        [
            str(Path(sys.executable).with_name("airflow")),
            "dags",
            "trigger",
            dag_id,
            "--conf",
            json.dumps(conf),
        ],
        env=airflow.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


@pytest.fixture(scope="module")
def orders(mongo_client: MongoClient[dict[str, Any]]) -> Iterator[Database[dict[str, Any]]]:
    """Database B, the ``orders`` target's (database A is the standalone set-up's)."""
    db = mongo_client[f"t_orders_{uuid.uuid4().hex[:10]}"]
    yield db
    mongo_client.drop_database(db.name)


@pytest.fixture(scope="module")
def standalone(
    tmp_path_factory: pytest.TempPathFactory,
    mongo_uri: str,
    mongo_client: MongoClient[dict[str, Any]],
    orders: Database[dict[str, Any]],
) -> Iterator[Standalone]:
    def seed(ground: Ground) -> None:
        for db in (ground.db, orders):
            seed_users(db, DOCUMENTS)
            db.users.create_index([("_v", 1), ("_id", 1)])
        (ground.dags / "migrations").mkdir()
        (ground.dags / "migrations_orders").mkdir()

    env = {
        "AIRFLOW__MIGRONAUT__TARGETS": "orders",
        "AIRFLOW__MIGRONAUT__CACHE_DIR": str(tmp_path_factory.mktemp("deployment_cache")),
        "AIRFLOW_CONN_MIGRONAUT_ORDERS": airflow_connection(mongo_uri, orders.name),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(
            f"{name}:{role}" for name, role in USERS.items()
        ),
        # Airflow's own default, said out loud: new DAGs are born paused.
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
    }
    # The DAG file's own migrations folders (dags/migrations*): no kit and no
    # MIGRONAUT_MIGRATIONS_DIR.
    with running_standalone(
        tmp_path_factory,
        "deployment",
        mongo_uri,
        mongo_client,
        DAG_OPTIONS,
        seed=seed,
        env=env,
        migrations_env=False,
    ) as standalone:
        yield standalone


@pytest.fixture(scope="module")
def deployment(standalone: Standalone, orders: Database[dict[str, Any]]) -> Deployment:
    return Deployment(
        standalone.airflow, standalone.dags, standalone.db, orders, standalone.mongo_uri
    )


def test_two_targets_migrate_at_once_and_nobody_unpauses_anything(
    deployment: Deployment,
) -> None:
    airflow = deployment.airflow
    airflow.wait_for_dag("migronaut_up")
    airflow.wait_for_dag("migronaut_orders__up")
    # Migration files dropped into a running deployment's folders.
    write_background(
        deployment.dags / "migrations", batch_size=100, max_parallel=2, per_document_seconds=0.002
    )
    write_background(
        deployment.dags / "migrations_orders",
        batch_size=100,
        max_parallel=2,
        per_document_seconds=0.002,
    )
    shop_dag, orders_dag = f"migronaut_bg__{SPLIT_NAME}", f"migronaut_orders__bg__{SPLIT_NAME}"
    airflow.wait_for_dag(shop_dag, timeout=180)
    airflow.wait_for_dag(orders_dag, timeout=180)

    runs = {
        dag_id: deployment.trigger_as("editor", dag_id, {"reason": "release 42"}).json()
        for dag_id in ("migronaut_up", "migronaut_orders__up")
    }
    for dag_id, run in runs.items():
        assert run["triggering_user_name"] == "editor"
        assert airflow.wait_for_run(dag_id, run["dag_run_id"], timeout=180) == "success"

    def both_completed() -> bool:
        return all(
            db.users.count_documents({"_v": 2}) == DOCUMENTS
            for db in (deployment.shop, deployment.orders)
        )

    airflow.wait_until(both_completed, 240, "both targets' migrations did not complete")
    for db in (deployment.shop, deployment.orders):
        assert db.users.count_documents({"first": {"$exists": True}}) == DOCUMENTS
    lanes = []
    for dag_id in (shop_dag, orders_dag):
        for run in airflow.dag_runs(dag_id):
            lanes += [
                {**ti, "task_id": f"{dag_id}.lane"}
                for ti in airflow.task_instances(dag_id, run["dag_run_id"])
                if ti["task_id"] == "lane"
            ]
    shop_lanes = [ti for ti in lanes if ti["task_id"].startswith(shop_dag)]
    orders_lanes = [ti for ti in lanes if ti["task_id"].startswith(orders_dag)]
    assert shop_lanes and orders_lanes
    assert any(overlapping([a, b]) for a in shop_lanes for b in orders_lanes)
    migronaut_dags = airflow.request("GET", "/api/v2/dags", params={"tags": "migronaut"})
    ids = {dag["dag_id"]: dag["is_paused"] for dag in migronaut_dags["dags"]}
    assert {shop_dag, orders_dag, "migronaut_up", "migronaut_orders__control"} <= set(ids)
    assert not any(ids.values())  # created unpaused; this test never unpaused one


def test_only_a_user_who_may_edit_the_migrations_dag_controls_it(deployment: Deployment) -> None:
    airflow = deployment.airflow
    probe_folder = deployment.dags.parent / "probe"
    write_background(probe_folder, PROBE, extra='"filter": {"n": -1},')
    with make_kit(deployment.mongo_uri, deployment.orders, probe_folder) as kit:
        kit.runs.up()  # registered (pending); no Airflow run drives it
    control = "migronaut_orders__control"
    airflow.wait_for_dag(control)
    pause = {"migration": PROBE, "action": "pause", "reason": "not yours"}

    def probe_status() -> str:
        with make_kit(deployment.mongo_uri, deployment.orders, probe_folder) as kit:
            return str(kit_json.status(kit, PROBE)["status"])

    refused = deployment.trigger_as("viewer", control, pause)
    assert refused.status_code == 403
    assert airflow.dag_runs(control) == []

    trigger_from_the_command_line(airflow, control, pause)
    (from_cli,) = airflow.dag_runs(control)
    assert airflow.wait_for_run(control, from_cli["dag_run_id"]) == "failed"
    states = {
        ti["task_id"]: ti["state"] for ti in airflow.task_instances(control, from_cli["dag_run_id"])
    }
    assert states["control"] == "failed"
    assert probe_status() == "pending"

    allowed = deployment.trigger_as("editor", control, {**pause, "reason": "mine"}).json()
    assert airflow.wait_for_run(control, allowed["dag_run_id"]) == "success"
    assert probe_status() == "paused"


def test_an_admin_run_acts_only_for_a_user_who_may_edit_the_admin_dag(
    deployment: Deployment,
) -> None:
    airflow = deployment.airflow
    admin = "migronaut_orders__admin"
    airflow.wait_for_dag(admin)
    plan_up = {"operation": "up", "plan": True, "reason": "what would an up do"}

    assert deployment.trigger_as("viewer", admin, plan_up).status_code == 403
    assert airflow.dag_runs(admin) == []

    # The same form from the command line: Airflow lets it in, the task refuses it.
    trigger_from_the_command_line(airflow, admin, plan_up)
    (from_cli,) = airflow.dag_runs(admin)
    assert airflow.wait_for_run(admin, from_cli["dag_run_id"]) == "failed"
    with pytest.raises(AirflowHarnessError, match="HTTP 404"):  # refused before any result
        airflow.xcom(admin, from_cli["dag_run_id"], "run", key="result")

    allowed = deployment.trigger_as("editor", admin, plan_up).json()
    assert airflow.wait_for_run(admin, allowed["dag_run_id"]) == "success"
    plan = airflow.xcom(admin, allowed["dag_run_id"], "run", key="result")
    assert plan["direction"] == "up"
    assert plan["refused"] is None
    assert plan["migrations"] == []  # the orders folder's one migration is applied
