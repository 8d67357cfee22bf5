"""Validating ``background.canary`` and a canary's ``check(ctx)``."""

from __future__ import annotations

from typing import Any

import pytest

from migronaut_core.background.spec import (
    CanarySettings,
    SoakSettings,
    canary_subset,
    in_canary,
    read_stored,
    resolve_spec,
)
from tests.support.spec import BASE, NAME, SECRET, migrate, module, refused, resolve, step


def check(ctx: object) -> bool:
    return True


def test_no_canary_by_default() -> None:
    assert resolve().canary is None


def test_a_fraction_canary_takes_the_defaults_of_its_checks_soak_and_approval() -> None:
    assert resolve(canary={"fraction": 0.1}).canary == CanarySettings(
        fraction=0.1, soak=SoakSettings(1, 0), sample=20, max_drift=0.01, approval=False
    )


def test_a_filter_canary_with_every_key_reads_back_equal_from_the_state() -> None:
    spec = resolve(
        canary={
            "filter": {"region": "eu"},
            "soak": {"passes": 3, "seconds": 60},
            "checks": {"sample": 50, "max_drift": 0},
            "approval": True,
        }
    )
    assert spec.canary == CanarySettings(
        filter={"region": "eu"}, soak=SoakSettings(3, 60), sample=50, max_drift=0.0, approval=True
    )
    assert read_stored(spec.to_document()) == spec


def test_a_spec_stored_before_canaries_reads_without_one() -> None:
    stored = resolve().to_document()
    del stored["canary"]
    assert read_stored(stored).canary is None


def test_the_fraction_subset_hashes_the_id_into_buckets_and_a_filter_is_anded() -> None:
    fraction = CanarySettings(fraction=0.25)
    bucket = {"$abs": {"$mod": [{"$toHashedIndexKey": "$_id"}, 10_000]}}
    assert canary_subset(fraction) == {"$expr": {"$lt": [bucket, 2_500]}}
    assert canary_subset(CanarySettings(fraction=0.00001))["$expr"]["$lt"][1] == 1
    chosen = CanarySettings(filter={"region": "eu"})
    assert in_canary({"_v": 1}, chosen) == {"$and": [{"_v": 1}, {"region": "eu"}]}


@pytest.mark.parametrize(
    ("canary", "key", "says"),
    [
        ({}, "canary", "needs exactly one of fraction"),
        ({"fraction": 0.1, "filter": {"a": 1}}, "canary", "(got fraction and filter)"),
        ({"fraction": 1.0}, "canary.fraction", "strictly between 0 and 1"),
        ({"fraction": 0.0}, "canary.fraction", "strictly between 0 and 1"),
        ({"fraction": SECRET}, "canary.fraction", "strictly between 0 and 1"),
        ({"filter": {}}, "canary.filter", "must not be empty"),
        ({"filter": {"_v": 1}}, "canary.filter", "must not test '_v'"),
        ({"filter": [SECRET]}, "canary.filter", "must be a mapping"),
        ({"shard": "shard01"}, "canary.shard", "is not supported yet"),
        ({"fraction": 0.1, "soak": {"passes": 0}}, "canary.soak.passes", "between 1 and 10000"),
        ({"fraction": 0.1, "checks": {"sample": 0}}, "canary.checks.sample", "between 1 and 1000"),
        ({"fraction": 0.1, "checks": {"max_drift": 2}}, "canary.checks.max_drift", "between 0"),
        ({"fraction": 0.1, "checks": {"drift": 0}}, "canary.checks.drift", "'max_drift'"),
        ({"fraction": 0.1, "approval": "yes"}, "canary.approval", "True or False"),
        ({"fraction": 0.1, "approve": True}, "canary.approve", "'approval'"),
        (SECRET, "canary", "must be a mapping"),
    ],
)
def test_a_wrong_canary_names_its_key(canary: Any, key: str, says: str) -> None:
    error = refused(lambda: resolve(canary=canary), key)
    assert says in error.message


def test_a_step_migration_has_no_canary() -> None:
    background = {"mode": "step", "from": 1, "to": 2, "canary": {"fraction": 0.5}}
    refused(lambda: resolve_spec(NAME, module(background, step=step)), "canary")


def test_check_is_read_beside_a_canary_and_refused_without_one() -> None:
    with_canary = module({**BASE, "canary": {"fraction": 0.5}}, migrate=migrate, check=check)
    assert resolve_spec(NAME, with_canary)[1].check is check
    refused(lambda: resolve_spec(NAME, module(dict(BASE), migrate=migrate, check=check)), "check")
