"""Background specs: validation, storage round trip, match hashes, state transitions."""

from __future__ import annotations

import copy
import datetime
import re
import types
import uuid
from collections.abc import Callable
from typing import Any

import bson
import pytest
from bson import Int64, ObjectId
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
    exclude_bad_ids,
    match_hash,
    match_of,
    read_stored,
    resolve_spec,
)
from migronaut_core.background.states import (
    STATUSES,
    TERMINAL,
    Transition,
    sources,
    transition,
)
from migronaut_core.errors import BackgroundConflictError, ConfigInvalidError

NAME = "20240501120000_split_names"
SECRET = "s3cr3t-value-never-shown"


def migrate(doc: dict[str, Any], ctx: object) -> dict[str, Any]:
    return doc


def revert(doc: dict[str, Any], ctx: object) -> dict[str, Any]:
    return doc


def migrate_batch(docs: list[dict[str, Any]], ctx: object) -> list[dict[str, Any]]:
    return docs


def step(ctx: object) -> dict[str, Any]:
    return {"checkpoint": None, "done": True}


BASE: dict[str, Any] = {"collection": "users", "from": 1, "to": 2}


def module(background: Any = None, **functions: Any) -> types.ModuleType:
    """Build a migration module the way a file would define it."""
    mod = types.ModuleType(f"migronaut_migrations.m_{NAME}")
    mod.background = dict(BASE) if background is None else background  # type: ignore[attr-defined]
    if not functions:
        functions = {"migrate": migrate}
    for attribute, value in functions.items():
        setattr(mod, attribute, value)
    return mod


def resolve(**overrides: Any) -> BackgroundSpec:
    spec, _ = resolve_spec(NAME, module({**BASE, **overrides}))
    return spec


def refused(call: Callable[[], object], key: str, *, migration: str = NAME) -> ConfigInvalidError:
    with pytest.raises(ConfigInvalidError) as caught:
        call()
    error = caught.value
    assert error.context == {"migration": migration, "key": key}
    assert migration in error.message
    assert SECRET not in error.message
    return error


# ─── Defaults ─────────────────────────────────────────────────────────────────


def test_defaults() -> None:
    spec, fns = resolve_spec(NAME, module())
    assert spec == BackgroundSpec(collection="users", from_version=1, to_version=2)
    assert spec.field == "_v"
    assert spec.filter == {}
    assert spec.mode == "declarative"
    assert (spec.batch_size, spec.max_parallel, spec.slice_ms) == (500, 4, 30_000)
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


# ─── Match ────────────────────────────────────────────────────────────────────


def test_match_of_forward_and_revert() -> None:
    spec = resolve(filter={"tenant": "acme"})
    assert match_of(spec, "forward") == {"tenant": "acme", "_v": 1}
    assert match_of(spec, "revert") == {"tenant": "acme", "_v": 2}
    match = match_of(spec, "forward")
    match["tenant"] = "other"
    assert spec.filter == {"tenant": "acme"}


def test_exclude_bad_ids() -> None:
    match = {"_v": 1}
    assert exclude_bad_ids(match, []) == {"_v": 1}
    assert exclude_bad_ids(match, ()) is not match
    assert exclude_bad_ids(match, (3, "x")) == {"$and": [{"_v": 1}, {"_id": {"$nin": [3, "x"]}}]}


def test_match_hash_is_stable() -> None:
    spec = resolve(filter={"a": {"x": 1, "y": [1, {"k": 2}]}, "b": {"$gt": 1, "$lt": 5}})
    value = match_hash(spec, "forward")
    assert re.fullmatch(r"[0-9a-f]{16}", value)
    assert match_hash(copy.deepcopy(spec), "forward") == value
    assert match_hash(spec.to_document(), "forward") == value
    # Clause order and operator order mean nothing to the server.
    reordered = resolve(filter={"b": {"$lt": 5, "$gt": 1}, "a": {"x": 1, "y": [1, {"k": 2}]}})
    assert match_hash(reordered, "forward") == value


def test_match_hash_ignores_settings() -> None:
    value = match_hash(resolve(), "forward")
    for overrides in (
        {"batch_size": 7},
        {"max_parallel": 9},
        {"slice_ms": 1_000},
        {"transaction": True},
        {"adaptive": True},
        {"throttle": {"pause_ms": 5}},
        {"write_concern": {"w": 1}},
    ):
        assert match_hash(resolve(**overrides), "forward") == value


@pytest.mark.parametrize(
    "overrides",
    [
        {"filter": {"a": 1}},
        {"collection": "people"},
        {"field": "schema"},
        {"revision_field": "rev"},
        {"from": 0},
        {"to": 3},
    ],
)
def test_match_hash_changes_with_what_is_matched(overrides: dict[str, Any]) -> None:
    before = resolve(filter={"a": 2} if "filter" in overrides else {})
    after = resolve(**overrides)
    forward_changes = "to" not in overrides
    assert (match_hash(before, "forward") != match_hash(after, "forward")) == forward_changes
    revert_changes = "from" not in overrides
    assert (match_hash(before, "revert") != match_hash(after, "revert")) == revert_changes


def test_match_hash_differs_between_directions() -> None:
    spec = resolve()
    assert match_hash(spec, "forward") != match_hash(spec, "revert")


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ({"a": {"x": 1, "y": 2}}, {"a": {"y": 2, "x": 1}}),  # embedded document order
        ({"a": [1, 2]}, {"a": [2, 1]}),
        ({"a": 1}, {"a": "1"}),
        ({"a": 1}, {"a": 1.5}),
        ({"a": {"$in": [{"x": 1, "y": 2}]}}, {"a": {"$in": [{"y": 2, "x": 1}]}}),
        ({"a": {"$elemMatch": {"b": 1}}}, {"a": {"$elemMatch": {"b": 2}}}),
        ({"$or": [{"a": 1}]}, {"$nor": [{"a": 1}]}),
    ],
)
def test_match_hash_keeps_what_matters(left: dict[str, Any], right: dict[str, Any]) -> None:
    assert match_hash(resolve(filter=left), "forward") != match_hash(
        resolve(filter=right), "forward"
    )


def test_match_hash_sorts_nested_query_clauses() -> None:
    left = {"$or": [{"a": 1, "b": 2}], "c": {"$elemMatch": {"x": 1, "y": {"$gt": 1, "$lt": 3}}}}
    right = {"c": {"$elemMatch": {"y": {"$lt": 3, "$gt": 1}, "x": 1}}, "$or": [{"b": 2, "a": 1}]}
    assert match_hash(resolve(filter=left), "forward") == match_hash(
        resolve(filter=right), "forward"
    )


# ─── States and transitions ───────────────────────────────────────────────────

CHANGED = "changed"
SAME = "unchanged"
CONFLICT = "conflict"

#: status -> action -> expected target (or SAME, or CONFLICT).
TABLE: dict[str, dict[str, str]] = {
    "pending": {
        "pause": "paused",
        "resume": SAME,
        "cancel": "cancelled",
        "retry": SAME,
        "reopen": CONFLICT,
        "plan": "running",
        "complete": "completed",
        "fail": "failed",
        "unblock": SAME,
    },
    "blocked": {
        "pause": "paused",
        "resume": SAME,
        "cancel": "cancelled",
        "retry": SAME,
        "reopen": CONFLICT,
        "plan": CONFLICT,
        "complete": CONFLICT,
        "fail": "failed",
        "unblock": "pending",
    },
    "running": {
        "pause": "paused",
        "resume": SAME,
        "cancel": "cancelled",
        "retry": SAME,
        "reopen": CONFLICT,
        "plan": SAME,
        "complete": "completed",
        "fail": "failed",
        "unblock": SAME,
    },
    "paused": {
        "pause": SAME,
        "resume": "pending",
        "cancel": "cancelled",
        "retry": CONFLICT,
        "reopen": CONFLICT,
        "plan": CONFLICT,
        "complete": CONFLICT,
        "fail": CONFLICT,
        "unblock": CONFLICT,
    },
    "completed": {
        "pause": CONFLICT,
        "resume": CONFLICT,
        "cancel": CONFLICT,
        "retry": CONFLICT,
        "reopen": "pending",
        "plan": CONFLICT,
        "complete": SAME,
        "fail": CONFLICT,
        "unblock": CONFLICT,
    },
    "failed": {
        "pause": CONFLICT,
        "resume": CONFLICT,
        "cancel": "cancelled",
        "retry": "pending",
        "reopen": CONFLICT,
        "plan": CONFLICT,
        "complete": CONFLICT,
        "fail": SAME,
        "unblock": CONFLICT,
    },
    "cancelled": {
        "pause": CONFLICT,
        "resume": CONFLICT,
        "cancel": SAME,
        "retry": "pending",
        "reopen": CONFLICT,
        "plan": CONFLICT,
        "complete": CONFLICT,
        "fail": CONFLICT,
        "unblock": CONFLICT,
    },
}

CASES = [(status, action, TABLE[status][action]) for status in STATUSES for action in TABLE[status]]


def test_table_covers_every_status() -> None:
    assert set(TABLE) == set(STATUSES)
    assert len(CASES) == 7 * 9


@pytest.mark.parametrize(("status", "action", "expected"), CASES)
def test_transition(status: str, action: str, expected: str) -> None:
    if expected == CONFLICT:
        with pytest.raises(BackgroundConflictError) as caught:
            transition(status, action, migration=NAME)
        error = caught.value
        assert error.context == {"migration": NAME, "action": action, "status": status}
        assert error.message.startswith(
            f"cannot {action} background migration {NAME}: it is {status}"
        )
    elif expected == SAME:
        assert transition(status, action, migration=NAME) == Transition(status, SAME)  # type: ignore[arg-type]
    else:
        assert transition(status, action, migration=NAME) == Transition(expected, CHANGED)  # type: ignore[arg-type]


def test_conflict_hints() -> None:
    with pytest.raises(BackgroundConflictError, match="resume it"):
        transition("paused", "retry", migration=NAME)
    with pytest.raises(BackgroundConflictError, match="reopen"):
        transition("completed", "retry", migration=NAME)


def test_unknown_action() -> None:
    refused(lambda: transition("pending", "explode", migration=NAME), "action")


def test_unknown_status_conflicts() -> None:
    with pytest.raises(BackgroundConflictError):
        transition("unregistered", "pause", migration=NAME)


def test_terminal() -> None:
    assert frozenset({"completed", "failed", "cancelled"}) == TERMINAL


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


def test_the_engines_moves_leave_only_the_statuses_the_state_machine_lists() -> None:
    assert sources("plan") == ("pending",)
    assert sources("complete") == ("pending", "running")
    assert sources("fail") == ("pending", "blocked", "running")
    assert sources("unblock") == ("blocked",)


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
