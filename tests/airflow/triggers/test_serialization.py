"""Every trigger serializes one way: the triggerer rebuilds it from exactly its keywords."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import pytest
from airflow.triggers.base import BaseTrigger

from migronaut_airflow import get_provider_info
from migronaut_airflow.triggers.rebuild import RebuiltFromFields

pytestmark = pytest.mark.airflow

#: Keywords kept only to rebuild triggers serialized by older releases.
DEPRECATED_KEYWORDS = {"conn_id"}

#: Values other than the defaults for each trigger's keywords (a round trip of the
#: defaults alone could hide a keyword that is dropped).
SAMPLES: dict[str, dict[str, Any]] = {
    "DelayTrigger": {"seconds": 2.5, "payload": {"round": 3}},
    "CollectionDriftTrigger": {
        "mongo_conn_id": "shop_db",
        "database": "shop",
        "collection": "orders",
        "collection_prefix": "mig_bg",
        "refire_after_seconds": 60.0,
        "refresh_seconds": 5.0,
    },
    "StalledMigrationTrigger": {
        "mongo_conn_id": "shop_db",
        "database": "shop",
        "collection_prefix": "mig_bg",
        "stall_seconds": 90.0,
        "poll_seconds": 7.0,
    },
    "MigrationMilestoneTrigger": {
        "mongo_conn_id": "shop_db",
        "database": "shop",
        "migration": "20260101000000_orders",
        "until": "completed",
        "collection_prefix": "mig_bg",
        "poll_interval": 4.5,
    },
    "BackgroundLanesTrigger": {
        "mongo_conn_id": "shop_db",
        "database": "shop",
        "migration": "20260101000000_orders",
        "generation": 4,
        "plan": "plan-a",
        "collection_prefix": "mig_bg",
        "poll_interval": 1.5,
        "no_lease_grace_seconds": 12.0,
    },
}


def _trigger_classes() -> list[type[BaseTrigger]]:
    modules = [
        importlib.import_module(module)
        for entry in get_provider_info()["triggers"]
        for module in entry["python-modules"]
    ]
    return sorted(
        {
            value
            for module in modules
            for value in vars(module).values()
            if inspect.isclass(value) and issubclass(value, BaseTrigger)
            if value.__module__ == module.__name__ and not inspect.isabstract(value)
        },
        key=lambda cls: cls.__name__,
    )


def test_every_listed_trigger_serializes_through_the_one_mixin_and_has_a_sample() -> None:
    classes = _trigger_classes()
    assert {cls.__name__ for cls in classes} == set(SAMPLES)
    assert all(issubclass(cls, RebuiltFromFields) for cls in classes)


@pytest.mark.parametrize("cls", _trigger_classes(), ids=lambda cls: cls.__name__)
def test_the_rebuild_fields_are_exactly_the_init_keywords(cls: type[RebuiltFromFields]) -> None:
    keywords = set(inspect.signature(cls.__init__).parameters) - {"self"} - DEPRECATED_KEYWORDS
    assert set(cls.rebuild_fields) == keywords
    assert len(cls.rebuild_fields) == len(set(cls.rebuild_fields))


@pytest.mark.parametrize("cls", _trigger_classes(), ids=lambda cls: cls.__name__)
def test_a_trigger_rebuilt_from_its_serialized_form_is_the_same_trigger(
    cls: type[BaseTrigger],
) -> None:
    classpath, kwargs = cls(**SAMPLES[cls.__name__]).serialize()
    module, _, name = classpath.rpartition(".")
    rebuilt_class = getattr(importlib.import_module(module), name)
    assert rebuilt_class is cls
    assert kwargs == SAMPLES[cls.__name__]
    assert rebuilt_class(**kwargs).serialize() == (classpath, kwargs)
