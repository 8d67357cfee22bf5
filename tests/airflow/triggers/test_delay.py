"""DelayTrigger: its serialized form (what the triggerer stores) and its one event."""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

import pytest

from migronaut_airflow import get_provider_info
from migronaut_airflow.triggers.delay import DelayTrigger

pytestmark = pytest.mark.airflow

CLASSPATH = "migronaut_airflow.triggers.delay.DelayTrigger"


def test_serialize_pins_classpath_and_kwargs() -> None:
    trigger = DelayTrigger(seconds=2.5, payload={"round": 3, "counters": {"migrated": 7}})
    classpath, kwargs = trigger.serialize()
    assert classpath == CLASSPATH
    assert kwargs == {"seconds": 2.5, "payload": {"round": 3, "counters": {"migrated": 7}}}
    assert DelayTrigger(**kwargs).serialize() == (classpath, kwargs)


def test_serialize_keeps_defaults_and_clamps_a_negative_delay() -> None:
    assert DelayTrigger(seconds=-1).serialize() == (CLASSPATH, {"seconds": 0.0, "payload": {}})


def test_classpath_names_the_class() -> None:
    module, _, name = CLASSPATH.rpartition(".")
    assert getattr(importlib.import_module(module), name) is DelayTrigger


def test_fires_once_with_its_payload() -> None:
    trigger = DelayTrigger(seconds=0, payload={"round": 2})

    async def events() -> list[Any]:
        return [event.payload async for event in trigger.run()]

    assert asyncio.run(events()) == [{"status": "success", "round": 2}]


def test_the_provider_lists_every_trigger() -> None:
    (triggers,) = get_provider_info()["triggers"]
    assert triggers == {
        "integration-name": "migronaut",
        "python-modules": [
            "migronaut_airflow.triggers.lanes",
            "migronaut_airflow.triggers.delay",
            "migronaut_airflow.triggers.drift",
            "migronaut_airflow.triggers.stall",
            "migronaut_airflow.triggers.gate",
        ],
    }
    for module in triggers["python-modules"]:
        importlib.import_module(module)
