"""Targets and their settings: one resolution for DAGs, operators, triggers, hook and UI.

Settings come from ``build_dags`` arguments, then Airflow's configuration (set here
as ``AIRFLOW__MIGRONAUT__*`` variables, which Airflow reads at each lookup), then
the default target's ``MIGRONAUT_*`` variables, then ``migronaut.toml`` beside the
migrations folder. Building reads no database: no mongod is needed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import Asset

from migronaut_airflow.dags.factory import build_all_dags, build_dags
from migronaut_airflow.operators.background import MigronautOperator
from migronaut_airflow.plugins.target import current_kit, kits
from migronaut_airflow.targets import resolve_target, target_names
from migronaut_core import ConfigInvalidError
from tests.support.background import SPLIT_NAME, write_background

pytestmark = pytest.mark.airflow


@pytest.fixture(autouse=True)
def clean_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No migronaut setting from the session leaks in; a known host for the assets."""
    for name in list(os.environ):
        if (
            name.startswith(("AIRFLOW__MIGRONAUT", "MIGRONAUT_"))
            and name != "MIGRONAUT_TEST_MONGODB_URI"
        ):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AIRFLOW__MIGRONAUT__ASSET_HOST", "mongo.internal")
    monkeypatch.setenv("AIRFLOW__MIGRONAUT__DATABASE", "shop")
    yield


def _migrations(root: Path, toml: str = "") -> Path:
    folder = root / "migrations"
    write_background(folder)
    if toml:
        (root / "migronaut.toml").write_text(toml)
    return folder


def _watched_prefixes(dags: dict[str, Any]) -> set[str]:
    """The collection prefix every watcher trigger and every operator of the DAGs uses."""
    prefixes = set()
    for dag in dags.values():
        condition = dag.timetable.asset_condition if dag.timetable else None
        assets = getattr(condition, "objects", [condition] if condition is not None else [])
        for asset in assets:
            if isinstance(asset, Asset):
                for watcher in asset.watchers:
                    prefixes.add(watcher.trigger.serialize()[1]["collection_prefix"])
    return prefixes


def test_a_prefix_set_only_in_migronaut_toml_is_the_one_the_triggers_watch(
    tmp_path: Path,
) -> None:
    migrations = _migrations(tmp_path, 'background_collection = "acme_bg"\n')
    dags = build_dags(migrations)
    assert _watched_prefixes(dags) == {"acme_bg"}
    stalls = dags["migronaut_stalls"].timetable.asset_condition
    assert stalls.uri == "mongodb://mongo.internal:27017/shop/acme_bg"
    # The tasks' hook loads its config beside the same folder.
    coordinate = dags[f"migronaut_bg__{SPLIT_NAME}"].get_task("coordinate")
    assert coordinate.hook.migrations_dir == str(migrations.resolve())
    assert resolve_target(arguments={"migrations_dir": migrations}).collection_prefix == "acme_bg"


def test_precedence_arguments_then_airflow_config_then_variables_then_toml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    migrations = _migrations(tmp_path, 'background_collection = "from_toml"\n')
    monkeypatch.setenv("MIGRONAUT_MIGRATIONS_DIR", str(migrations))

    def prefix_and_conn(**arguments: Any) -> tuple[str, str]:
        settings = resolve_target(arguments=arguments)
        return settings.collection_prefix, settings.mongo_conn_id

    assert prefix_and_conn() == ("from_toml", "migronaut_default")
    monkeypatch.setenv("MIGRONAUT_CONN_ID", "from_variable")
    assert prefix_and_conn() == ("from_toml", "from_variable")
    monkeypatch.setenv("AIRFLOW__MIGRONAUT__BACKGROUND_COLLECTION", "from_airflow")
    monkeypatch.setenv("AIRFLOW__MIGRONAUT__CONN_ID", "airflow_conn")
    assert prefix_and_conn() == ("from_airflow", "airflow_conn")
    assert prefix_and_conn(
        conn_id="argument_conn", migronaut_config={"background_collection": "from_argument"}
    ) == ("from_argument", "argument_conn")


def test_airflow_config_values_are_typed_and_checked_by_key_never_echoing_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    migrations = _migrations(tmp_path)
    monkeypatch.setenv("AIRFLOW__MIGRONAUT__LOCK_TTL_SECONDS", "4.5")
    monkeypatch.setenv("AIRFLOW__MIGRONAUT__USE_TRANSACTION", "yes")
    settings = resolve_target(arguments={"migrations_dir": migrations})
    assert settings.config.lock_ttl_seconds == 4.5
    assert settings.config.use_transaction is True

    monkeypatch.setenv("AIRFLOW__MIGRONAUT__USE_TRANSACTION", "sometimes-secret")
    with pytest.raises(ConfigInvalidError) as refused:
        resolve_target(arguments={"migrations_dir": migrations})
    assert refused.value.context["key"] == "use_transaction"
    assert "sometimes-secret" not in str(refused.value)

    monkeypatch.delenv("AIRFLOW__MIGRONAUT__USE_TRANSACTION")
    monkeypatch.setenv("AIRFLOW__MIGRONAUT__LOCK_TTL", "4")
    with pytest.raises(ConfigInvalidError, match="unknown config key 'lock_ttl'"):
        resolve_target(arguments={"migrations_dir": migrations})


def test_two_targets_get_distinct_dag_ids_assets_watchers_and_operator_targets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shop = _migrations(tmp_path / "shop")
    orders = _migrations(tmp_path / "orders")
    monkeypatch.setenv("AIRFLOW__MIGRONAUT__MIGRATIONS_DIR", str(shop))
    monkeypatch.setenv("AIRFLOW__MIGRONAUT__TARGETS", "orders")
    monkeypatch.setenv("AIRFLOW__MIGRONAUT_ORDERS__MIGRATIONS_DIR", str(orders))
    monkeypatch.setenv("AIRFLOW__MIGRONAUT_ORDERS__DATABASE", "orders")
    monkeypatch.setenv("AIRFLOW__MIGRONAUT_ORDERS__ASSET_HOST", "mongo.internal")
    assert target_names() == ["default", "orders"]

    dags = build_all_dags()
    kinds = ["up", "control", "admin", "drift", "drift_events", "stalls", f"bg__{SPLIT_NAME}"]
    assert set(dags) == {f"migronaut_{kind}" for kind in kinds} | {
        f"migronaut_orders__{kind}" for kind in kinds
    }
    assert "migronaut:orders" in dags["migronaut_orders__up"].tags
    up = dags["migronaut_orders__up"].get_task("up")
    assert isinstance(up, MigronautOperator)
    assert (up.target, up.mongo_conn_id, up.database) == ("orders", "migronaut_orders", "orders")
    # The DAGs an orders task starts are the orders target's.
    assert up.dag_id_for(SPLIT_NAME) == f"migronaut_orders__bg__{SPLIT_NAME}"
    # The admin DAG's dry runs ask for the orders target's migration DAG.
    run = dags["migronaut_orders__admin"].get_task("run")
    assert run.dag_id_for(SPLIT_NAME) == f"migronaut_orders__bg__{SPLIT_NAME}"
    assert (run.target, run.database) == ("orders", "orders")
    carry_on = dags[f"migronaut_orders__bg__{SPLIT_NAME}"].get_task("continue")
    assert carry_on.trigger_dag_id == f"migronaut_orders__bg__{SPLIT_NAME}"
    uris = {dag_id: dags[dag_id].timetable.asset_condition for dag_id in dags if "stalls" in dag_id}
    assert {asset.uri for asset in uris.values()} == {
        "mongodb://mongo.internal:27017/shop/migronaut_background",
        "mongodb://mongo.internal:27017/orders/migronaut_background",
    }
    assert {asset.watchers[0].name for asset in uris.values()} == {
        "migronaut_stalls",
        "migronaut_orders__stalls",
    }


@pytest.mark.parametrize("name", ["Orders", "a-b", "x__y", "1st", "a" * 41, "default_x__"])
def test_a_bad_target_name_is_refused_by_rule(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__MIGRONAUT__TARGETS", f"shop, {name}")
    with pytest.raises(ConfigInvalidError, match="a target name is lower-case letters"):
        target_names()


def test_a_named_target_has_its_own_defaults_and_a_missing_folder_names_the_path(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigInvalidError) as refused:
        build_dags(target="billing")
    assert refused.value.context["key"] == "migrations_dir"
    assert "migrations_billing" in str(refused.value)
    assert resolve_target("billing").mongo_conn_id == "migronaut_billing"


def test_dags_are_created_unpaused_with_the_callers_arguments(tmp_path: Path) -> None:
    def notify(context: Any) -> None:
        """An on-failure callback."""

    migrations = _migrations(tmp_path)
    dags = build_dags(
        migrations,
        default_args={"owner": "data-platform", "on_failure_callback": notify},
        tags=["team:data"],
        dag_args={"max_active_tasks": 32},
        background_dag_args={"dagrun_timeout": timedelta(hours=6)},
        task_args={
            "lane": {"queue": "migrations", "pool": "mongo_writes", "pool_slots": 2},
            "sensor": {"queue": "light"},
            "admin": {"executor_config": {"cpu": 1}},
        },
    )
    background = dags[f"migronaut_bg__{SPLIT_NAME}"]
    for dag in dags.values():
        assert dag.is_paused_upon_creation is False
        assert {"migronaut", "team:data"} <= set(dag.tags)
        assert dag.max_active_tasks == 32
        assert all(task.owner == "data-platform" for task in dag.tasks)
    assert background.dagrun_timeout == timedelta(hours=6)
    assert dags["migronaut_up"].dagrun_timeout is None
    lane = background.get_task("lane")
    assert (lane.partial_kwargs["queue"], lane.partial_kwargs["pool"]) == (
        "migrations",
        "mongo_writes",
    )
    assert lane.partial_kwargs["pool_slots"] == 2
    assert background.get_task("wait_for_lanes").queue == "light"
    assert dags["migronaut_up"].get_task("up").executor_config == {"cpu": 1}
    coordinate = background.get_task("coordinate")
    assert coordinate.on_failure_callback == [notify]
    assert coordinate.retries == 2  # a coordinator's safe retries stay migronaut's
    assert (
        build_dags(migrations, paused_upon_creation=None)["migronaut_up"].is_paused_upon_creation
        is None
    )


@pytest.mark.parametrize(
    ("keywords", "key"),
    [
        ({"dag_args": {"schedule": "@daily"}}, "dag_args.schedule"),
        ({"background_dag_args": {"max_active_runs": 9}}, "background_dag_args.max_active_runs"),
        ({"task_args": {"lanes": {"queue": "q"}}}, "task_args.lanes"),
        ({"task_args": {"lane": {"retries": 9}}}, "task_args.lane.retries"),
    ],
)
def test_arguments_migronaut_decides_are_refused_by_name(
    tmp_path: Path, keywords: dict[str, Any], key: str
) -> None:
    with pytest.raises(ConfigInvalidError) as refused:
        build_dags(_migrations(tmp_path), **keywords)
    assert refused.value.context == {"key": key}


def test_the_ui_resolves_the_default_target_as_the_dags_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mongo_uri: str
) -> None:
    from migronaut_dev.endpoints import airflow_connection

    migrations = _migrations(tmp_path, 'background_collection = "ui_bg"\n')
    monkeypatch.setenv("AIRFLOW__MIGRONAUT__MIGRATIONS_DIR", str(migrations))
    monkeypatch.setenv("AIRFLOW__MIGRONAUT__CONN_ID", "ui_mongo")
    monkeypatch.setenv("AIRFLOW_CONN_UI_MONGO", airflow_connection(mongo_uri, "ui_db"))
    try:
        kit = current_kit()
        assert kit.config.background_collection == "ui_bg"
        assert kit.config.database == "shop"  # [migronaut] database over the schema
    finally:
        kits.close()


def test_a_targets_health_limits_come_from_airflows_configuration_as_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    migrations = _migrations(tmp_path)
    monkeypatch.setenv(
        "AIRFLOW__MIGRONAUT__BACKGROUND_HEALTH", '{"majority_lag_ms": {"soft": 500, "hard": 5000}}'
    )
    settings = resolve_target(arguments={"migrations_dir": migrations})
    health = settings.config.background_health
    assert health is not None
    assert (health.majority_lag_ms.soft, health.majority_lag_ms.hard) == (500, 5000)
    # The operators get the same mapping, so every task's kit resolves files alike.
    passed = settings.operator_args()["migronaut_config"]["background_health"]
    assert passed == {"majority_lag_ms": {"soft": 500, "hard": 5000}}

    monkeypatch.setenv("AIRFLOW__MIGRONAUT__BACKGROUND_HEALTH", "false")
    assert resolve_target(arguments={"migrations_dir": migrations}).config.background_health is None
    monkeypatch.setenv("AIRFLOW__MIGRONAUT__BACKGROUND_HEALTH", '{"cache_dirty": {"soft": 0.93}}')
    with pytest.raises(ConfigInvalidError) as refused:
        resolve_target(arguments={"migrations_dir": migrations}).config  # noqa: B018
    assert refused.value.context["key"] == "background_health.cache_dirty.soft"
    assert "0.93" not in str(refused.value)


def test_a_targets_maintenance_windows_come_from_airflows_configuration_as_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    migrations = _migrations(tmp_path)
    nights = '[{"days": ["sat", "sun"], "from": "22:00", "to": "06:00", "rate": "500/s"}]'
    monkeypatch.setenv("AIRFLOW__MIGRONAUT__BACKGROUND_WINDOWS", nights)
    settings = resolve_target(arguments={"migrations_dir": migrations})
    windows = settings.config.background_windows
    assert windows is not None
    assert [(w.days, w.start, w.end, w.docs_per_s) for w in windows] == [((5, 6), 1320, 360, 500)]
    # The operators get the same list, so every task's kit keeps the same windows.
    assert settings.operator_args()["migronaut_config"]["background_windows"][0]["rate"] == "500/s"

    monkeypatch.setenv(
        "AIRFLOW__MIGRONAUT__BACKGROUND_WINDOWS",
        '[{"days": ["someday-secret"], "from": "22:00", "to": "06:00"}]',
    )
    with pytest.raises(ConfigInvalidError) as refused:
        resolve_target(arguments={"migrations_dir": migrations}).config  # noqa: B018
    assert refused.value.context["key"] == "background_windows.0.days"
    assert "someday-secret" not in str(refused.value)
