"""The version-index rule as data: key equality, the index a drift probe reads through,
and the indexes prune must never drop (judged on recorded ``config.collections`` shapes)."""

from __future__ import annotations

from typing import Any

import pytest
from bson import Int64

from migronaut_core.background.indexes import drop_refusal, probe_index, same_index_key
from migronaut_core.background.planning.shard import UNKNOWN, sharding_from
from tests.support.shard_shapes import (
    EVENTS_70,
    EVENTS_80,
    LOGS_80,
    ORDERS_70,
    ORDERS_70_RESHARDED,
    USERS_44,
    USERS_60,
    collection_doc,
    new_uuid,
)


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


#: A collection sharded on its version field: its plain version index backs the key.
VERSIONED_70 = collection_doc("app.items", new_uuid(), {"_v": 1})


@pytest.mark.parametrize(
    ("recorded", "index"),
    [
        (VERSIONED_70, {"_v": 1, "_id": 1}),
        (VERSIONED_70, {"_v": 1.0}),
        (USERS_60, {"userId": "hashed", "_id": 1}),
        (USERS_44, {"userId": 1, "_id": 1}),
        (ORDERS_70, {"region": 1, "customerId": 1, "_v": 1}),
        (ORDERS_70_RESHARDED, {"customerId": "hashed"}),
        (EVENTS_70, {"tenant": 1}),
        (EVENTS_80, {"_id": "hashed"}),
    ],
)
def test_prune_never_drops_an_index_the_shard_key_may_need(
    recorded: dict[str, Any], index: dict[str, Any]
) -> None:
    note = drop_refusal(index, sharding_from(recorded))
    assert note is not None and "shard key" in note


@pytest.mark.parametrize(
    ("recorded", "index"),
    [
        (USERS_60, {"_v": 1, "userId": "hashed", "_id": 1}),  # the sharded version index
        (USERS_60, {"userId": 1, "_id": 1}),  # ranged, the key is hashed
        (USERS_44, {"_v": 1, "_id": 1}),
        (ORDERS_70, {"region": 1, "_v": 1}),  # only part of the key
        (ORDERS_70, {"customerId": 1, "region": 1}),  # the key's fields out of order
        (ORDERS_70_RESHARDED, {"region": 1, "customerId": 1}),  # the key before the reshard
        (EVENTS_80, {"_id": 1, "_v": 1}),
        (LOGS_80, {"_id": 1}),  # 8.0 tracks it, but it is not sharded
    ],
)
def test_other_indexes_of_a_sharded_collection_may_go(
    recorded: dict[str, Any], index: dict[str, Any]
) -> None:
    assert drop_refusal(index, sharding_from(recorded)) is None


def test_an_unsharded_collection_refuses_nothing_and_an_unreadable_key_refuses_all() -> None:
    assert drop_refusal({"_v": 1, "_id": 1}, None) is None
    note = drop_refusal({"_v": 1, "_id": 1}, UNKNOWN)
    assert note is not None and "cannot be read" in note
