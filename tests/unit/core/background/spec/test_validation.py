"""Validating a background spec: defaults, each key's errors, functions, modes, versioning."""

from __future__ import annotations

import re
import types
import uuid
from typing import Any

import bson
import pytest
from bson.binary import Binary

from migronaut_core.background.spec import (
    MAX_CHECKPOINT_BYTES,
    AdaptiveSettings,
    BackgroundFunctions,
    BackgroundSpec,
    PartitionSettings,
    ThrottleSettings,
    TransactionSettings,
    check_slice_ms,
    match_of,
    resolve_spec,
)
from migronaut_core.errors import ConfigInvalidError
from tests.support.spec import (
    BASE,
    NAME,
    SECRET,
    migrate,
    migrate_batch,
    module,
    refused,
    resolve,
    revert,
    step,
)

# ─── Defaults ─────────────────────────────────────────────────────────────────


def test_defaults() -> None:
    spec, fns = resolve_spec(NAME, module())
    assert spec == BackgroundSpec(collection="users", from_version=1, to_version=2)
    assert spec.field == "_v"
    assert spec.filter == {}
    assert spec.mode == "declarative"
    assert (spec.batch_size, spec.max_parallel, spec.slice_ms) == (500, 4, 120_000)
    assert (spec.max_passes, spec.max_conflict_retries) == (5, 3)
    assert (spec.max_document_errors, spec.max_slice_failures) == (0, 5)
    assert spec.transaction is None
    assert spec.write_concern is None
    assert spec.revision_field is None
    assert spec.partitions == PartitionSettings(16, 1_000, 5_000)
    assert spec.shard_concurrency is None
    assert spec.adaptive is None
    assert spec.throttle == ThrottleSettings(0, None)
    assert not spec.throttle.active
    assert spec.reversible is False
    assert fns == BackgroundFunctions(migrate=migrate)


def test_spec_is_frozen() -> None:
    spec = resolve()
    with pytest.raises(AttributeError):
        spec.batch_size = 1  # type: ignore[misc]


def test_max_partitions_default_follows_max_parallel() -> None:
    assert resolve(max_parallel=2).partitions.max_partitions == 16
    assert resolve(max_parallel=10).partitions.max_partitions == 40
    assert resolve(max_parallel=10, partitions={"max_partitions": 3}).partitions == (
        PartitionSettings(3, 1_000, 5_000)
    )


def test_switches_true_means_defaults() -> None:
    spec = resolve(transaction=True, adaptive=True, batch_size=800)
    assert spec.transaction == TransactionSettings(30_000, 8)
    assert spec.adaptive == AdaptiveSettings(
        min_batch_size=80, max_batch_size=800, increase=80, decrease=0.5
    )
    assert resolve(transaction=False, adaptive=False).transaction is None
    assert resolve(transaction={"max_retries": 0}).transaction == TransactionSettings(30_000, 0)


def test_adaptive_defaults_fit_explicit_bounds() -> None:
    small = resolve(batch_size=5, adaptive={})
    assert small.adaptive == AdaptiveSettings(1, 5, 1)
    capped = resolve(adaptive={"max_batch_size": 20})
    assert capped.adaptive is not None
    assert (capped.adaptive.min_batch_size, capped.adaptive.max_batch_size) == (20, 20)


def test_explicit_settings_are_kept() -> None:
    spec = resolve(
        field="schema",
        revision_field="rev",
        filter={"tenant": "acme", "age": {"$gte": 18}},
        batch_size=1,
        max_parallel=64,
        slice_ms=100,
        max_passes=100,
        max_conflict_retries=0,
        max_document_errors=10**6,
        max_slice_failures=1_000,
        write_concern={"w": "majority", "wtimeout": 5_000, "j": True},
        shard_concurrency=2,
        throttle={"pause_ms": 10, "max_lag_ms": 2_000},
    )
    assert spec.field == "schema"
    assert spec.revision_field == "rev"
    assert spec.filter == {"tenant": "acme", "age": {"$gte": 18}}
    assert spec.write_concern == {"w": "majority", "wtimeout": 5_000, "j": True}
    assert spec.throttle == ThrottleSettings(10, 2_000)
    assert spec.throttle.active
    assert resolve(write_concern={"w": 2}).write_concern == {"w": 2}


def test_version_zero_is_a_valid_source() -> None:
    spec = resolve(**{"from": 0, "to": 1})
    assert (spec.from_version, spec.to_version) == (0, 1)
    assert match_of(spec, "forward") == {"_v": None}


def test_filter_is_copied_and_bson_normalised() -> None:
    raw = {"tags": ("a", "b"), "key": uuid.UUID(int=5), "name": re.compile("^x")}
    spec = resolve(filter=raw)
    raw["tags"] = ("changed",)
    assert spec.filter["tags"] == ["a", "b"]
    assert spec.filter["key"] == Binary(uuid.UUID(int=5).bytes, 4)
    assert spec.filter["name"] == bson.regex.Regex("^x", re.UNICODE)


# ─── Errors: every key, wrong types and ranges ────────────────────────────────

INTEGER_BOUNDS = {
    "batch_size": (1, 10_000),
    "max_parallel": (1, 64),
    "slice_ms": (100, 3_600_000),
    "max_passes": (1, 100),
    "max_conflict_retries": (0, 20),
    "max_slice_failures": (1, 1_000),
    "shard_concurrency": (1, 64),
}

BAD_VALUES: list[tuple[str, Any]] = [
    *((key, low - 1) for key, (low, _) in INTEGER_BOUNDS.items()),
    *((key, high + 1) for key, (_, high) in INTEGER_BOUNDS.items()),
    *((key, True) for key in INTEGER_BOUNDS),
    *((key, "5") for key in INTEGER_BOUNDS),
    *((key, 5.0) for key in INTEGER_BOUNDS),
    ("max_document_errors", -1),
    ("max_document_errors", False),
    ("max_document_errors", 2**63),
    ("from", -1),
    ("from", True),
    ("from", "1"),
    ("from", None),
    ("to", 1.5),
    ("to", None),
    ("collection", ""),
    ("collection", 5),
    ("collection", "system.users"),
    ("collection", "a$b"),
    ("collection", ".users"),
    ("collection", "users."),
    ("collection", "nul\0"),
    ("collection", "x" * 256),
    ("collection", "bad\ud800"),
    ("field", ""),
    ("field", "a.b"),
    ("field", "$v"),
    ("field", "_id"),
    ("field", None),
    ("field", 1),
    ("field", "\ud800"),
    ("field", "f" * 256),
    ("revision_field", "_id"),
    ("revision_field", "_v"),
    ("revision_field", "r.v"),
    ("revision_field", 3),
    ("mode", "steps"),
    ("mode", None),
    ("filter", None),
    ("filter", [("a", 1)]),
    ("filter", {"_v": 1}),
    ("filter", {1: SECRET}),
    ("filter", {"a": complex(1, 2)}),
    ("filter", {"a": SECRET, "n": 2**64}),
    ("transaction", "yes"),
    ("transaction", 1),
    ("transaction", []),
    ("transaction.timeout_ms", {"timeout_ms": 99}),
    ("transaction.timeout_ms", {"timeout_ms": 600_001}),
    ("transaction.max_retries", {"max_retries": 51}),
    ("transaction.max_retries", {"max_retries": -1}),
    ("transaction.retries", {"retries": 1}),
    ("write_concern", "majority"),
    ("write_concern", 1),
    ("write_concern.w", {}),
    ("write_concern.w", {"w": 0}),
    ("write_concern.w", {"w": -1}),
    ("write_concern.w", {"w": True}),
    ("write_concern.w", {"w": ""}),
    ("write_concern.w", {"w": 51}),
    ("write_concern.wtimeout", {"w": 1, "wtimeout": -1}),
    ("write_concern.wtimeout", {"w": 1, "wtimeout": "5s"}),
    ("write_concern.j", {"w": 1, "j": 1}),
    ("write_concern.fsync", {"w": 1, "fsync": True}),
    ("partitions", None),
    ("partitions", 5),
    ("partitions.max_partitions", {"max_partitions": 0}),
    ("partitions.max_partitions", {"max_partitions": 10_001}),
    ("partitions.sample_size", {"sample_size": 0}),
    ("partitions.sample_size", {"sample_size": 100_001}),
    ("partitions.sample_timeout_ms", {"sample_timeout_ms": 99}),
    ("partitions.sample_timeout_ms", {"sample_timeout_ms": 600_001}),
    ("partitions.estimate_above", {"estimate_above": 0}),
    ("partitions.estimate_above", {"estimate_above": 10**9 + 1}),
    ("partitions.split", {"split": 1}),
    ("adaptive", "on"),
    ("adaptive", 0.5),
    ("adaptive.min_batch_size", {"min_batch_size": 0}),
    ("adaptive.min_batch_size", {"min_batch_size": 600}),
    ("adaptive.min_batch_size", {"min_batch_size": 50, "max_batch_size": 40}),
    ("adaptive.max_batch_size", {"max_batch_size": 10_001}),
    ("adaptive.increase", {"increase": 0}),
    ("adaptive.decrease", {"decrease": 0.0}),
    ("adaptive.decrease", {"decrease": 1.0}),
    ("adaptive.decrease", {"decrease": 1}),
    ("adaptive.decrease", {"decrease": float("nan")}),
    ("adaptive.target_latency_ms", {"target_latency_ms": 9}),
    ("adaptive.max_pause_ms", {"max_pause_ms": -1}),
    ("adaptive.step", {"step": 1}),
    ("throttle", None),
    ("throttle", True),
    ("throttle.pause_ms", {"pause_ms": -1}),
    ("throttle.pause_ms", {"pause_ms": 1.5}),
    ("throttle.max_lag_ms", {"max_lag_ms": -1}),
    ("throttle.max_lag_ms", {"max_lag_ms": "1s"}),
    ("throttle.lag", {"lag": 1}),
]


@pytest.mark.parametrize(("key", "value"), BAD_VALUES)
def test_bad_value_names_its_key(key: str, value: Any) -> None:
    overrides = {key.split(".", maxsplit=1)[0]: value}
    error = refused(lambda: resolve(**overrides), key)
    assert f"background.{key}" in error.message


def test_from_must_be_below_to() -> None:
    refused(lambda: resolve(**{"from": 2, "to": 2}), "to")
    refused(lambda: resolve(**{"from": 3, "to": 2}), "to")


@pytest.mark.parametrize("key", ["from", "to"])
def test_versions_are_required(key: str) -> None:
    background = {k: v for k, v in BASE.items() if k != key}
    refused(lambda: resolve_spec(NAME, module(background)), key)


def test_collection_is_required_in_declarative_mode() -> None:
    refused(lambda: resolve_spec(NAME, module({"from": 1, "to": 2})), "collection")
    refused(lambda: resolve(collection=None), "collection")


@pytest.mark.parametrize(
    ("unknown", "suggested"),
    [("batchSize", "batch_size"), ("max_paralel", "max_parallel"), ("colour", None)],
)
def test_unknown_key(unknown: str, suggested: str | None) -> None:
    error = refused(lambda: resolve(**{unknown: 5}), unknown)
    assert "not a known setting" in error.message
    if suggested is not None:
        assert repr(suggested) in error.message


def test_reversible_is_not_a_file_key() -> None:
    refused(lambda: resolve(reversible=True), "reversible")


@pytest.mark.parametrize("background", [None, [1, 2], "users", 5])
def test_background_must_be_a_mapping(background: Any) -> None:
    mod = types.SimpleNamespace(background=background, migrate=migrate)
    refused(lambda: resolve_spec(NAME, mod), "background")  # type: ignore[arg-type]


def test_messages_never_show_values() -> None:
    for overrides in (
        {"collection": f"system.{SECRET}"},
        {"filter": {"a": SECRET, "b": object()}},
        {"write_concern": {"w": 1, "j": SECRET}},
        {"mode": SECRET},
    ):
        with pytest.raises(ConfigInvalidError) as caught:
            resolve(**overrides)
        assert SECRET not in str(caught.value)
        assert SECRET not in repr(caught.value.context)
        assert caught.value.__cause__ is None


def test_filter_must_not_test_the_revision_field() -> None:
    refused(lambda: resolve(revision_field="rev", filter={"rev": 1}), "filter")
    # Nested mentions are the author's business; only top-level clauses would clash.
    assert resolve(filter={"$or": [{"_v": 1}, {"x": 1}]}).filter


# ─── Functions and modes ──────────────────────────────────────────────────────


def test_reversible_follows_revert_functions() -> None:
    assert resolve_spec(NAME, module(migrate=migrate, revert=revert))[0].reversible
    assert resolve_spec(NAME, module(migrate=migrate, revert_batch=revert))[0].reversible
    assert not resolve_spec(NAME, module(migrate_batch=migrate_batch))[0].reversible


def test_functions_are_returned() -> None:
    throttle = lambda ctx: 0  # noqa: E731
    _, fns = resolve_spec(
        NAME, module(migrate_batch=migrate_batch, revert=revert, throttle=throttle)
    )
    assert fns == BackgroundFunctions(migrate_batch=migrate_batch, revert=revert, throttle=throttle)
    assert fns.transforms("forward") == (None, migrate_batch)
    assert fns.transforms("revert") == (revert, None)
    assert fns.step_for("forward") is None


@pytest.mark.parametrize(
    ("functions", "key"),
    [
        ({"revert": revert}, "migrate"),
        ({"throttle": revert}, "migrate"),
        ({"migrate": migrate, "migrate_batch": migrate_batch}, "migrate_batch"),
        ({"migrate": migrate, "revert": revert, "revert_batch": revert}, "revert_batch"),
        ({"migrate": migrate, "step": step}, "step"),
        ({"migrate": migrate, "revert_step": step}, "revert_step"),
        ({"migrate": "not callable"}, "migrate"),
        ({"migrate": migrate, "revert": 5}, "revert"),
        ({"migrate": migrate, "throttle": {"pause_ms": 5}}, "throttle"),
    ],
)
def test_declarative_transforms(functions: dict[str, Any], key: str) -> None:
    refused(lambda: resolve_spec(NAME, module(None, **functions)), key)


def test_step_mode() -> None:
    background = {"mode": "step", "from": 1, "to": 2}
    spec, fns = resolve_spec(NAME, module(background, step=step))
    assert spec.mode == "step"
    assert spec.collection is None
    assert not spec.reversible
    assert fns.step_for("forward") is step
    with_way_back, _ = resolve_spec(
        NAME, module({**background, "collection": "users"}, step=step, revert_step=step)
    )
    assert with_way_back.reversible
    assert with_way_back.collection == "users"


@pytest.mark.parametrize(
    ("functions", "key"),
    [
        ({}, "step"),
        ({"migrate": migrate}, "step"),
        ({"step": step, "migrate": migrate}, "migrate"),
        ({"step": step, "migrate_batch": migrate_batch}, "migrate_batch"),
        ({"step": step, "revert": revert}, "revert"),
        ({"step": step, "revert_batch": revert}, "revert_batch"),
    ],
)
def test_step_mode_transforms(functions: dict[str, Any], key: str) -> None:
    background = {"mode": "step", "from": 1, "to": 2}
    mod = types.SimpleNamespace(background=background, **functions)
    refused(lambda: resolve_spec(NAME, mod), key)  # type: ignore[arg-type]


def test_step_mode_refuses_a_filter() -> None:
    background = {"mode": "step", "collection": "users", "from": 1, "to": 2, "filter": {"a": 1}}
    refused(lambda: resolve_spec(NAME, module(background, step=step)), "filter")


def test_module_may_be_a_mapping() -> None:
    spec, fns = resolve_spec(NAME, {"background": dict(BASE), "migrate": migrate})
    assert spec.collection == "users"
    assert fns.migrate is migrate


def test_module_with_declared_versioning() -> None:
    mod = module(migrate=migrate, revert=revert)
    spec, fns = resolve_spec(NAME, mod, versioning={"field": "_v"})
    assert spec.reversible
    assert fns.revert is revert


# ─── Declared versioning ──────────────────────────────────────────────────────


def test_versioning_supplies_defaults() -> None:
    versioning = {"field": "schema", "revision_field": "rev", "indexes": ["ignored"]}
    spec, _ = resolve_spec(NAME, module(), versioning=versioning)
    assert (spec.field, spec.revision_field) == ("schema", "rev")


def test_versioning_agrees_with_explicit_values() -> None:
    mod = module({**BASE, "field": "schema", "revision_field": None})
    spec, _ = resolve_spec(NAME, mod, versioning={"field": "schema", "revision_field": None})
    assert (spec.field, spec.revision_field) == ("schema", None)


@pytest.mark.parametrize(
    ("overrides", "versioning", "key"),
    [
        ({"field": "_v"}, {"field": "schema"}, "field"),
        ({"revision_field": "rev"}, {"revision_field": "revision"}, "revision_field"),
        ({"revision_field": "rev"}, {"revision_field": None}, "revision_field"),
        ({"revision_field": None}, {"revision_field": "rev"}, "revision_field"),
        ({}, {"field": "a.b"}, "field"),
        ({}, {"field": "v", "revision_field": "v"}, "revision_field"),
    ],
)
def test_versioning_conflicts(
    overrides: dict[str, Any], versioning: dict[str, Any], key: str
) -> None:
    mod = module({**BASE, **overrides})
    refused(lambda: resolve_spec(NAME, mod, versioning=versioning), key)


def test_versioning_without_a_revision_key_leaves_it_free() -> None:
    spec, _ = resolve_spec(NAME, module({**BASE, "revision_field": "rev"}), versioning={})
    assert spec.revision_field == "rev"


# ─── Small constants and checks ───────────────────────────────────────────────


def test_checkpoint_limit() -> None:
    assert MAX_CHECKPOINT_BYTES == 65_536


@pytest.mark.parametrize("value", [100, 30_000, 3_600_000])
def test_check_slice_ms_accepts(value: int) -> None:
    assert check_slice_ms(value) == value


@pytest.mark.parametrize("value", [99, 3_600_001, 0, -5, True, 1.5e3, "1000", None])
def test_check_slice_ms_refuses(value: Any) -> None:
    with pytest.raises(ConfigInvalidError) as caught:
        check_slice_ms(value)
    assert caught.value.context == {"key": "slice_ms"}
