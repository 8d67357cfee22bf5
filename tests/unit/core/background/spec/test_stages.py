"""Update-pipeline specs: accepted stages, what they may write, and the mode's settings."""

from __future__ import annotations

from typing import Any

import bson
import pytest

from migronaut_core.background.spec import (
    AdaptiveSettings,
    BackgroundFunctions,
    BackgroundSpec,
    match_hash,
    read_stored,
    resolve_spec,
)
from migronaut_core.errors import ConfigInvalidError
from tests.support.spec import (
    BASE,
    NAME,
    migrate,
    module,
    refused,
    resolve,
)

# ─── Update-pipeline mode ─────────────────────────────────────────────────────

UPDATE = [{"$set": {"full": {"$concat": ["$first", " ", "$last"]}}}, {"$unset": ["first", "last"]}]
REVERT_UPDATE = [{"$set": {"first": "$full"}}, {"$unset": "full"}]


def resolve_update(**overrides: Any) -> tuple[BackgroundSpec, BackgroundFunctions]:
    return resolve_spec(NAME, module({**BASE, "update": UPDATE, **overrides}, throttle=migrate))


def test_update_pipeline_resolves_to_update_mode() -> None:
    spec, fns = resolve_update()
    assert spec.mode == "update"
    assert spec.update == UPDATE
    assert spec.revert_update is None
    assert spec.reversible is False
    assert spec.transaction is None
    assert fns == BackgroundFunctions(throttle=migrate)
    assert resolve_update(mode="update")[0] == spec
    reversible, _ = resolve_update(revert_update=REVERT_UPDATE)
    assert reversible.reversible is True
    assert reversible.pipeline("revert") == REVERT_UPDATE
    assert reversible.pipeline("forward") == UPDATE
    assert reversible.pipeline("forward") is not reversible.update
    assert resolve().pipeline("forward") is None


def test_update_round_trips_through_the_state_document() -> None:
    spec, _ = resolve_update(revert_update=REVERT_UPDATE, revision_field="rev")
    doc = spec.to_document()
    assert doc["mode"] == "update"
    assert doc["update"] == UPDATE
    assert doc["revert_update"] == REVERT_UPDATE
    stored = bson.decode(bson.encode({"spec": doc}))["spec"]
    assert read_stored(stored) == spec
    assert resolve().to_document()["update"] is None
    assert read_stored(resolve().to_document()) == resolve()
    assert match_hash(spec, "forward") != match_hash(resolve(), "forward")


@pytest.mark.parametrize(
    "stage",
    ["$set", "$addFields", "$unset", "$replaceWith", "$replaceRoot", "$project"],
)
def test_every_update_pipeline_stage_is_accepted(stage: str) -> None:
    body: Any = {
        "$unset": "old",
        "$replaceWith": {"$mergeObjects": ["$$ROOT", {"a": 1}]},
        "$replaceRoot": {"newRoot": "$$ROOT"},
        "$project": {"a": 1},
    }.get(stage, {"a": 1})
    spec, _ = resolve_update(update=[{stage: body}])
    assert spec.update == [{stage: body}]


@pytest.mark.parametrize(
    ("update", "shown"),
    [
        ([{"$set": {"a": 1}}, {"$lookup": {"from": "x"}}], "stage 1 ($lookup)"),
        ([{"$match": {"a": 1}}], "stage 0 ($match)"),
        ([{"$out": "elsewhere"}], "stage 0 ($out)"),
        ([{"$set": {"a": 1}, "$unset": "b"}], "stage 0 must be a mapping"),
        (["$set"], "stage 0 must be a mapping"),
        ([], "non-empty list"),
        ({"$set": {"a": 1}}, "non-empty list"),
        ([{"$set": {"a": object()}}], "stage 0 ($set) must be a document MongoDB can encode"),
    ],
)
def test_update_refuses_other_stages_by_index(update: Any, shown: str) -> None:
    error = refused(lambda: resolve_update(update=update), "update")
    assert shown in error.message


@pytest.mark.parametrize(
    "update",
    [
        [{"$set": {"_v": 2}}],
        [{"$addFields": {"rev": 0}}],
        [{"$set": {"a": 1}}, {"$unset": ["a", "_v"]}],
        [{"$unset": "rev"}],
        [{"$set": {"_v.x": 1}}],
        [{"$project": {"rev": 0}}],
    ],
)
def test_update_must_not_touch_the_stamps(update: list[dict[str, Any]]) -> None:
    error = refused(lambda: resolve_update(update=update, revision_field="rev"), "update")
    assert "the engine stamps it" in error.message
    refused(lambda: resolve_update(revert_update=update, revision_field="rev"), "revert_update")


def test_update_refuses_functions_and_conflicting_settings() -> None:
    background = {**BASE, "update": UPDATE}
    for attribute in ("migrate", "migrate_batch", "revert", "revert_batch", "step"):
        error = refused(
            lambda a=attribute: resolve_spec(NAME, module(background, **{a: migrate})), attribute
        )
        assert "background.update" in error.message
    refused(lambda: resolve_update(mode="step"), "mode")
    refused(lambda: resolve_update(mode="declarative"), "mode")
    error = refused(lambda: resolve_update(transaction=True), "transaction")
    assert "update mode" in error.message
    assert resolve_update(transaction=False)[0].transaction is None
    refused(lambda: resolve(mode="update"), "update")
    refused(lambda: resolve(revert_update=REVERT_UPDATE), "revert_update")
    refused(lambda: resolve_update(collection=None), "collection")
    refused(lambda: read_stored({**BASE, "mode": "update"}, name=NAME), "update")


def test_update_mode_defaults_to_larger_batches() -> None:
    spec, _ = resolve_update()
    assert spec.batch_size == 10_000
    assert resolve_update(adaptive=True)[0].adaptive == AdaptiveSettings(
        min_batch_size=1_000, max_batch_size=10_000, increase=1_000
    )
    assert resolve_update(batch_size=500)[0].batch_size == 500
    assert resolve().batch_size == 500


def test_update_mode_partitions_hold_several_batches() -> None:
    # A partition of one partial batch pays a claim, an unoverlapped read and a release
    # for as long as its rewrite takes: in update mode a partition is worth 4 batches.
    assert resolve_update()[0].partitions.min_partition_docs == 40_000
    assert resolve_update(batch_size=500)[0].partitions.min_partition_docs == 2_000
    assert resolve().partitions.min_partition_docs == 1_000
    chosen = resolve_update(partitions={"min_partition_docs": 5_000})[0]
    assert chosen.partitions.min_partition_docs == 5_000
    with pytest.raises(ConfigInvalidError) as refused:
        resolve(partitions={"min_partition_docs": 0})
    assert refused.value.context["key"] == "partitions.min_partition_docs"
