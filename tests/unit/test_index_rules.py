"""The version-index rule as data: key equality and the index a drift probe reads through."""

from __future__ import annotations

from typing import Any

import pytest
from bson import Int64

from migronaut_core.background.indexes import probe_index, same_index_key


@pytest.mark.parametrize(
    ("live", "wanted", "same"),
    [
        ({"_v": 1, "_id": 1}, [("_v", 1), ("_id", 1)], True),
        ({"_v": 1.0, "_id": Int64(1)}, [("_v", 1), ("_id", 1)], True),
        ({"_v": 1, "n": "hashed", "_id": 1}, [("_v", 1), ("n", "hashed"), ("_id", 1)], True),
        ({"_id": 1, "_v": 1}, [("_v", 1), ("_id", 1)], False),
        ({"_v": -1, "_id": 1}, [("_v", 1), ("_id", 1)], False),
        ({"_v": 1}, [("_v", 1), ("_id", 1)], False),
        ({"_v": 1, "_id": 1, "n": 1}, [("_v", 1), ("_id", 1)], False),
        ({"_v": True, "_id": 1}, [("_v", 1), ("_id", 1)], False),
    ],
)
def test_same_index_key_means_same_fields_order_and_directions(
    live: dict[str, Any], wanted: list[tuple[str, Any]], same: bool
) -> None:
    assert same_index_key(live, wanted) is same


def test_the_probe_prefers_the_version_index() -> None:
    keys = [{"_id": 1}, {"_v": 1, "n": 1}, {"_v": 1, "_id": 1}]
    assert probe_index(keys, "_v") == [("_v", 1), ("_id", 1)]


def test_the_probe_takes_an_index_led_by_the_version_field_ascending() -> None:
    assert probe_index([{"_id": 1}, {"_v": 1, "n": 1, "_id": 1}], "_v") == [
        ("_v", 1),
        ("n", 1),
        ("_id", 1),
    ]


@pytest.mark.parametrize(
    "keys",
    [
        [],
        [{"_id": 1}],
        [{"_v": -1, "_id": 1}],
        [{"_v": "hashed"}],
        [{"n": 1, "_v": 1}],
    ],
)
def test_no_index_for_the_probe(keys: list[dict[str, Any]]) -> None:
    assert probe_index(keys, "_v") is None
