"""The spec model stored and read back: the state document's round trip."""

from __future__ import annotations

import datetime
import re
import uuid

import bson
import pytest
from bson import Int64, ObjectId

from migronaut_core.background.spec import (
    AdaptiveSettings,
    BackgroundSpec,
    PartitionSettings,
    match_hash,
    read_stored,
    resolve_spec,
)
from tests.support.spec import BASE, NAME, migrate, module, refused, resolve, revert, step

# ─── Storage round trip ───────────────────────────────────────────────────────


def _full_spec() -> BackgroundSpec:
    return resolve_spec(
        NAME,
        module(
            {
                **BASE,
                "field": "schema",
                "revision_field": "rev",
                "filter": {
                    "owner": ObjectId("64b7f0c2a1b2c3d4e5f60718"),
                    "since": datetime.datetime(2024, 1, 1),
                    "big": Int64(5),
                    "key": uuid.UUID(int=9),
                    "$or": [{"a": {"$exists": True}}, {"b": re.compile("x")}],
                },
                "transaction": {"timeout_ms": 1_000},
                "write_concern": {"w": "majority", "j": False},
                "partitions": {"sample_size": 10},
                "shard_concurrency": 3,
                "adaptive": {"decrease": 0.75},
                "throttle": {"max_lag_ms": 0},
            },
            migrate=migrate,
            revert=revert,
        ),
    )[0]


@pytest.mark.parametrize(
    "spec",
    [
        BackgroundSpec(collection="users", from_version=0, to_version=1),
        resolve(),
        resolve_spec(NAME, module({"mode": "step", "from": 1, "to": 3}, step=step))[0],
        _full_spec(),
    ],
)
def test_document_round_trip(spec: BackgroundSpec) -> None:
    doc = spec.to_document()
    assert read_stored(doc) == spec
    # Through BSON, as the state document stores it.
    stored = bson.decode(bson.encode({"spec": doc}))["spec"]
    assert read_stored(stored) == spec
    assert match_hash(stored, "forward") == match_hash(spec, "forward")


def test_document_shape() -> None:
    doc = _full_spec().to_document()
    assert doc["from"] == 1
    assert doc["to"] == 2
    assert "from_version" not in doc
    assert doc["transaction"] == {"timeout_ms": 1_000, "max_retries": 8}
    assert doc["adaptive"]["decrease"] == 0.75
    assert doc["reversible"] is True
    assert resolve().to_document()["transaction"] is False
    assert resolve().to_document()["adaptive"] is False
    assert set(doc) == set(resolve().to_document())


def test_from_document_tolerates_missing_and_unknown_keys() -> None:
    spec = read_stored({"collection": "users", "from": 1, "to": 2, "added_later": {"x": 1}})
    assert spec == BackgroundSpec(collection="users", from_version=1, to_version=2)
    partial = read_stored({**BASE, "partitions": {"sample_size": 5, "new": 1}, "adaptive": {}})
    assert partial.partitions == PartitionSettings(16, 5, 5_000)
    assert partial.adaptive == AdaptiveSettings(50, 500, 50)


def test_from_document_still_validates_values() -> None:
    refused(lambda: read_stored({**BASE, "batch_size": 0}, name=NAME), "batch_size")
    refused(
        lambda: read_stored({"collection": "users", "from": 1}),
        "to",
        migration="(stored spec)",
    )
    refused(
        lambda: read_stored({**BASE, "reversible": "yes"}),
        "reversible",
        migration="(stored spec)",
    )


def test_to_document_is_a_copy() -> None:
    spec = resolve(filter={"a": {"b": 1}})
    doc = spec.to_document()
    doc["filter"]["a"]["b"] = 2
    assert spec.filter == {"a": {"b": 1}}
