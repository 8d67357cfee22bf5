"""Connection arguments follow the provider convention: ``mongo_conn_id``, with ``conn_id``
still accepted under a deprecation warning that names the new argument.

Building reads no connection, so no metadata DB or mongod is needed.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from airflow.exceptions import AirflowProviderDeprecationWarning

from migronaut_airflow.dags.factory import build_dags
from migronaut_airflow.hooks.migronaut import MigronautHook
from migronaut_airflow.operators.background import (
    BackgroundControlOperator,
    BackgroundLaneOperator,
    ContinueBackgroundOperator,
    CoordinateBackgroundOperator,
    HealBackgroundOperator,
    MigrationsUpOperator,
    MigronautOperator,
    VerifyDriftOperator,
    requester,
)
from migronaut_airflow.sensors.lanes import BackgroundLanesSensor
from migronaut_airflow.triggers.lanes import BackgroundLanesTrigger
from tests.support.background import write_background

pytestmark = pytest.mark.airflow

CONN = "shop_mongo"
DEFAULT = "migronaut_default"
LANES = {"migration": "m", "generation": 1, "plan": "p"}

#: Build one object with the given connection keywords; return the connection it uses.
Builder = Callable[[dict[str, str]], str]

BUILDERS: dict[str, Builder] = {
    "hook": lambda kw: MigronautHook(**kw).mongo_conn_id,
    "coordinate": lambda kw: (
        CoordinateBackgroundOperator(task_id="t", migration="m", **kw).mongo_conn_id
    ),
    "lane": lambda kw: BackgroundLaneOperator(task_id="t", migration="m", **kw).mongo_conn_id,
    "continue": lambda kw: (
        ContinueBackgroundOperator(task_id="t", migration="m", **kw).mongo_conn_id
    ),
    "control": lambda kw: (
        BackgroundControlOperator(task_id="t", migration="m", action="pause", **kw).mongo_conn_id
    ),
    "up": lambda kw: MigrationsUpOperator(task_id="t", **kw).mongo_conn_id,
    "verify": lambda kw: VerifyDriftOperator(task_id="t", **kw).mongo_conn_id,
    "heal": lambda kw: HealBackgroundOperator(task_id="t", **kw).mongo_conn_id,
    "sensor": lambda kw: BackgroundLanesSensor(task_id="t", **LANES, **kw).mongo_conn_id,
    "trigger": lambda kw: BackgroundLanesTrigger(database=None, **LANES, **kw).serialize()[1][
        "mongo_conn_id"
    ],
}


@contextmanager
def no_deprecation() -> Iterator[None]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    assert not [w for w in caught if issubclass(w.category, AirflowProviderDeprecationWarning)]


@contextmanager
def deprecated_conn_id() -> Iterator[None]:
    with pytest.warns(AirflowProviderDeprecationWarning, match="pass mongo_conn_id") as caught:
        yield
    assert all(issubclass(w.category, DeprecationWarning) for w in caught)


@pytest.mark.parametrize("build", BUILDERS.values(), ids=BUILDERS.keys())
def test_mongo_conn_id_is_taken_without_a_warning(build: Builder) -> None:
    with no_deprecation():
        assert build({"mongo_conn_id": CONN}) == CONN
        assert build({}) == DEFAULT


@pytest.mark.parametrize("build", BUILDERS.values(), ids=BUILDERS.keys())
def test_conn_id_still_works_with_a_deprecation_warning(build: Builder) -> None:
    with deprecated_conn_id():
        assert build({"conn_id": CONN}) == CONN


@pytest.mark.parametrize("build", BUILDERS.values(), ids=BUILDERS.keys())
def test_both_names_for_different_connections_are_refused(build: Builder) -> None:
    with pytest.raises(TypeError, match="conn_id is the deprecated name of mongo_conn_id"):
        build({"mongo_conn_id": "a", "conn_id": "b"})


def test_the_hook_names_its_connection_attribute_as_the_provider_does() -> None:
    assert MigronautHook.conn_name_attr == "mongo_conn_id"
    assert MigronautHook.default_conn_name == DEFAULT
    with no_deprecation():
        assert MigronautHook(CONN).mongo_conn_id == CONN


def test_a_trigger_serialized_before_the_rename_still_loads() -> None:
    old_kwargs: dict[str, Any] = {
        "conn_id": CONN,
        "database": "d",
        **LANES,
        "collection_prefix": "mb",
        "poll_interval": 1.0,
        "no_lease_grace_seconds": 5.0,
    }
    with deprecated_conn_id():
        trigger = BackgroundLanesTrigger(**old_kwargs)
    _, kwargs = trigger.serialize()
    del old_kwargs["conn_id"]
    assert kwargs == {**old_kwargs, "mongo_conn_id": CONN}


def dag_connections(dags: dict[str, Any]) -> dict[str, str]:
    """The connection of each migronaut task, by ``dag_id.task_id`` (a mapped lane's partial)."""
    found = {}
    for dag in dags.values():
        for task in dag.tasks:
            if isinstance(task, ContinueBackgroundOperator):
                conn = task.hook.mongo_conn_id
            else:
                conn = getattr(task, "partial_kwargs", {}).get("mongo_conn_id")
                conn = conn or getattr(task, "mongo_conn_id", None)
            if conn is not None:
                found[f"{dag.dag_id}.{task.task_id}"] = conn
    return found


@pytest.mark.parametrize(
    ("keywords", "expect_warning"),
    [({"mongo_conn_id": CONN}, False), ({"conn_id": CONN}, True)],
    ids=["mongo_conn_id", "conn_id"],
)
def test_build_dags_passes_the_connection_to_every_task(
    tmp_path: Path, keywords: dict[str, str], expect_warning: bool
) -> None:
    write_background(tmp_path)
    with deprecated_conn_id() if expect_warning else no_deprecation():
        dags = build_dags(tmp_path, **keywords)
    background = next(dag_id for dag_id in dags if dag_id.startswith("migronaut_bg__"))
    tasks = ["coordinate", "lane", "wait_for_lanes", "continue", "resume_up", "announce_completed"]
    assert dag_connections(dags) == dict.fromkeys(
        [
            "migronaut_drift.verify",
            "migronaut_drift.heal",
            "migronaut_control.control",
            "migronaut_up.up",
            "migronaut_admin.run",
            *(f"{background}.{task}" for task in tasks),
        ],
        CONN,
    )


def test_the_continue_operator_takes_the_base_operators_connection_and_lazy_hook() -> None:
    carry_on = ContinueBackgroundOperator(
        task_id="t", migration="m", mongo_conn_id=CONN, database="shop", migronaut_config={"a": 1}
    )
    assert isinstance(carry_on, MigronautOperator)
    assert "hook" not in vars(carry_on)  # built on first use, not when the DAG file is parsed
    hook = carry_on.hook
    assert (hook.mongo_conn_id, hook.database, hook.config) == (CONN, "shop", {"a": 1})
    assert carry_on.trigger_dag_id == "migronaut_bg__m"


@pytest.mark.parametrize(
    ("given", "triggered_by", "expected"),
    [("ops", "alice", "ops"), (None, "alice", "alice"), ("", None, None), (None, "", None)],
)
def test_who_asks_is_the_argument_else_the_triggering_user(
    given: str | None, triggered_by: str | None, expected: str | None
) -> None:
    class DagRun:
        triggering_user_name = triggered_by

    assert requester(given, {"dag_run": DagRun()}) == expected  # type: ignore[typeddict-item]


def test_the_sensor_and_trigger_default_to_the_cores_collections() -> None:
    from migronaut_core.config import Config

    default = Config().background_collection
    assert BackgroundLanesSensor(task_id="t", **LANES).collection_prefix == default
    trigger = BackgroundLanesTrigger(database="shop", **LANES)
    assert trigger.serialize()[1]["collection_prefix"] == default
