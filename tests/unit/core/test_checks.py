"""The one module of name, range and choice rules, and its callers agreeing on them."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal

import pytest

from migronaut_core.background.spec import resolve_spec
from migronaut_core.checks import (
    MAX_COLLECTION_BYTES,
    MAX_FIELD_BYTES,
    MAX_INT64,
    MAX_NAMESPACE_BYTES,
    check_choice,
    check_collection_name,
    check_field_name,
    check_int,
    check_number,
    choice_problem,
    choices,
    collection_name_problem,
    field_name_problem,
    int_problem,
    number_problem,
    read_toml,
)
from migronaut_core.config import Config, load_config
from migronaut_core.definitions import check_inline
from migronaut_core.errors import ConfigInvalidError

SECRET = "s3cr3t-value"
URI = "mongodb://127.0.0.1:27017"

# ─── Collection names ─────────────────────────────────────────────────────────

GOOD_COLLECTIONS = [
    "users",
    "events.2024",
    "_private",
    "a",
    "x" * MAX_COLLECTION_BYTES,
    "é" * (MAX_COLLECTION_BYTES // 2),  # two bytes each: 252 bytes
    "system",
    "my.system.users",
]
BAD_COLLECTIONS: list[Any] = [
    "",
    "a$b",
    "$cmd",
    "nul\x00",
    "system.users",
    "system.",
    ".users",
    "users.",
    "bad\ud800",
    "\udfff",
    "x" * (MAX_COLLECTION_BYTES + 1),
    "é" * (MAX_COLLECTION_BYTES // 2) + "ab",  # 254 bytes in 128 characters
    None,
    5,
    b"users",
]


@pytest.mark.parametrize("name", GOOD_COLLECTIONS)
def test_collection_names_within_the_rule(name: str) -> None:
    assert collection_name_problem(name) is None
    assert check_collection_name("collection", name) == name


@pytest.mark.parametrize("name", BAD_COLLECTIONS)
def test_collection_names_outside_the_rule(name: Any) -> None:
    assert collection_name_problem(name) is not None
    with pytest.raises(ConfigInvalidError) as raised:
        check_collection_name("lock_collection", name)
    assert raised.value.context == {"key": "lock_collection"}
    assert raised.value.message.startswith("lock_collection ")


def test_the_namespace_limit_counts_the_database_and_its_dot() -> None:
    database = "d" * 10
    fits = "c" * (MAX_NAMESPACE_BYTES - len(database) - 1)
    assert collection_name_problem(fits, database=database) is None
    assert collection_name_problem(fits + "c", database=database) is not None
    assert collection_name_problem(fits + "c") is None  # no database: only the name's own limit


def test_problems_name_the_rule_never_the_value() -> None:
    for value in (f"system.{SECRET}", f"{SECRET}$", SECRET * 40, f"{SECRET}\ud800", f".{SECRET}"):
        problem = collection_name_problem(value)
        assert problem is not None and SECRET not in problem
    for value in (f"${SECRET}", f"{SECRET}.x", SECRET * 40):
        problem = field_name_problem(value)
        assert problem is not None and SECRET not in problem
    problem = choice_problem(SECRET, ("a", "b"))
    assert problem is not None and SECRET not in problem
    assert "(got bytes)" in (collection_name_problem(SECRET.encode()) or "")


# ─── Field names ──────────────────────────────────────────────────────────────


@pytest.mark.parametrize("name", ["_v", "schema_version", "v$", "f" * MAX_FIELD_BYTES, "é" * 127])
def test_field_names_within_the_rule(name: str) -> None:
    assert field_name_problem(name) is None
    assert check_field_name("field", name) == name


@pytest.mark.parametrize(
    "name",
    ["", "$v", "a.b", "nul\x00", "_id", "\ud800", "f" * (MAX_FIELD_BYTES + 1), "é" * 128, None, 1],
)
def test_field_names_outside_the_rule(name: Any) -> None:
    assert field_name_problem(name) is not None
    with pytest.raises(ConfigInvalidError) as raised:
        check_field_name("revision_field", name)
    assert raised.value.context == {"key": "revision_field"}


# ─── Numbers ──────────────────────────────────────────────────────────────────


@pytest.mark.parametrize(("value", "fits"), [(1, True), (64, True), (0, False), (65, False)])
def test_int_bounds_are_inclusive(value: int, fits: bool) -> None:
    assert (int_problem(value, 1, 64) is None) is fits


@pytest.mark.parametrize("value", [True, False, 1.0, "1", None, 2.5])
def test_int_refuses_bools_floats_and_text(value: Any) -> None:
    problem = int_problem(value, 0, 64)
    assert problem is not None and f"(got {type(value).__name__})" in problem
    with pytest.raises(ConfigInvalidError):
        check_int("max_parallel", value, 0, 64)


def test_int_without_a_top_is_bounded_by_int64() -> None:
    assert int_problem(MAX_INT64, 0) is None
    assert int_problem(MAX_INT64 + 1, 0) == "must be an integer >= 0"
    assert int_problem(-1, 0) == "must be an integer >= 0"
    assert int_problem(0, 1, 64) == "must be an integer between 1 and 64"


def test_check_int_returns_the_value_and_names_a_label() -> None:
    assert check_int("limit", 7, 1) == 7
    with pytest.raises(ConfigInvalidError) as raised:
        check_int("first", 0, 1, 10, label="dry run: first")
    assert raised.value.message == "dry run: first must be an integer between 1 and 10"
    assert raised.value.context == {"key": "first"}


@pytest.mark.parametrize(
    ("value", "fits"),
    [
        (0.05, True),
        (3600, True),
        (1, True),
        (0.049, False),
        (3600.001, False),
        (float("nan"), False),
    ],
)
def test_number_bounds_are_inclusive(value: float, fits: bool) -> None:
    assert (number_problem(value, 0.05, 3600) is None) is fits


@pytest.mark.parametrize("value", [True, False, "1", None, float("inf"), float("-inf")])
def test_number_refuses_bools_text_and_infinity(value: Any) -> None:
    assert number_problem(value, 1) is not None
    with pytest.raises(ConfigInvalidError) as raised:
        check_number("stall_seconds", value, 1)
    assert raised.value.context == {"key": "stall_seconds"}


def test_number_messages() -> None:
    assert check_number("poll_seconds", 2, 0.05, 3600) == 2.0
    with pytest.raises(ConfigInvalidError) as raised:
        check_number("refresh_seconds", 0, 0.05, 3600, unit="seconds")
    assert raised.value.message == "refresh_seconds must be a number between 0.05 and 3600 seconds"
    assert number_problem(0.5, 1) == "must be a number >= 1"


# ─── Choices ──────────────────────────────────────────────────────────────────

Colour = Literal["red", "green"]


def test_choices_come_from_a_literal() -> None:
    assert choices(Colour) == ("red", "green")
    with pytest.raises(TypeError):
        choices(int)
    assert check_choice("colour", "red", choices(Colour)) == "red"


@pytest.mark.parametrize("value", ["blue", "RED", "", None, 1, True])
def test_a_choice_outside_the_literal(value: Any) -> None:
    with pytest.raises(ConfigInvalidError) as raised:
        check_choice("colour", value, choices(Colour))
    assert raised.value.message.startswith("colour must be one of 'red', 'green'")


# ─── TOML ─────────────────────────────────────────────────────────────────────


def test_read_toml(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text('a = 1\n[b]\nc = "d"\n')
    assert read_toml(good, key="config_file") == {"a": 1, "b": {"c": "d"}}
    bad = tmp_path / "bad.toml"
    bad.write_text("a = \n")
    with pytest.raises(ConfigInvalidError) as raised:
        read_toml(bad, key="collections_dir")
    assert "not valid TOML" in raised.value.message and str(bad) in raised.value.message
    assert raised.value.context == {"key": "collections_dir", "path": str(bad)}


# ─── The callers agree ────────────────────────────────────────────────────────


def _config_accepts(name: str) -> bool:
    try:
        load_config({"uri": URI, "lock_collection": name}, env={})
    except ConfigInvalidError as error:
        assert error.context["key"] == "lock_collection"
        return False
    return True


def _definitions_accept(name: str) -> bool:
    try:
        check_inline({"key": {"name": name}})
    except ConfigInvalidError as error:
        assert error.context["key"] == "name"
        return False
    return True


def _spec_accepts(name: str) -> bool:
    module = {"background": {"collection": name, "from": 1, "to": 2}, "migrate": lambda d, c: d}
    try:
        resolve_spec("20240101000000_m", module)
    except ConfigInvalidError as error:
        assert error.context["key"] == "collection"
        return False
    return True


@pytest.mark.parametrize(
    "name", [*GOOD_COLLECTIONS, *(name for name in BAD_COLLECTIONS if isinstance(name, str))]
)
def test_config_definitions_and_spec_agree_on_a_collection_name(name: str) -> None:
    expected = collection_name_problem(name) is None
    answers = (_config_accepts(name), _definitions_accept(name), _spec_accepts(name))
    assert answers == (expected, expected, expected)


def test_the_background_prefix_leaves_room_for_its_suffixes() -> None:
    longest_suffix = len("_converge_log")
    fits = "b" * (MAX_COLLECTION_BYTES - longest_suffix)
    assert load_config({"uri": URI, "background_collection": fits}, env={})
    with pytest.raises(ConfigInvalidError) as raised:
        load_config({"uri": URI, "background_collection": fits + "b"}, env={})
    assert raised.value.context == {"key": "background_collection"}
    assert "'_converge_log' appended" in raised.value.message


def test_a_configured_database_counts_in_the_namespace() -> None:
    name = "c" * (MAX_NAMESPACE_BYTES - len("shop."))
    assert load_config({"uri": URI, "lock_collection": name}, env={})
    assert load_config({"uri": URI, "database": "shop", "lock_collection": name}, env={})
    with pytest.raises(ConfigInvalidError) as raised:
        load_config({"uri": URI, "database": "shop", "lock_collection": name + "c"}, env={})
    assert raised.value.context == {"key": "lock_collection"}


def test_config_and_definitions_agree_on_field_names() -> None:
    for name in ("_v", "$v", "a.b", "_id", "\ud800", "f" * (MAX_FIELD_BYTES + 1)):
        definitions_ok = True
        try:
            check_inline({"users": {"versioning": {"field": name}}})
        except ConfigInvalidError:
            definitions_ok = False
        module = {
            "background": {"collection": "u", "field": name, "from": 1, "to": 2},
            "migrate": lambda d, c: d,
        }
        spec_ok = True
        try:
            resolve_spec("20240101000000_m", module)
        except ConfigInvalidError:
            spec_ok = False
        assert definitions_ok is spec_ok is (field_name_problem(name) is None)


# ─── Config's key table, derived from its dataclass ──────────────────────────


def test_every_config_field_is_a_known_key(tmp_path: Path) -> None:
    defaults = Config()
    for field in dataclasses.fields(Config):
        value = getattr(defaults, field.name)
        if value is None:
            continue
        given = {"uri": URI, field.name: value}
        assert getattr(load_config(given, cwd=tmp_path, env={}), field.name) is not None


@pytest.mark.parametrize(
    ("key", "good", "bad"),
    [
        ("background_shard_aware", "off", "on"),
        ("background_drift", "both", "never"),
        ("background_on_drift", "report", "ignore"),
        ("lock_ttl_seconds", 86_400, 86_401),
        ("lock_ttl_seconds", 1, 0.5),
        ("server_selection_timeout_ms", 100, 99),
        ("server_selection_timeout_ms", 600_000, 600_001),
    ],
)
def test_config_ranges_and_choices_come_from_the_dataclass(key: str, good: Any, bad: Any) -> None:
    assert getattr(load_config({"uri": URI, key: good}, env={}), key) == good
    with pytest.raises(ConfigInvalidError) as raised:
        load_config({"uri": URI, key: bad}, env={})
    assert raised.value.context == {"key": key}
