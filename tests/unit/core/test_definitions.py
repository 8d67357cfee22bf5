"""Collection definitions and their config keys (no server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from migronaut_core.background.spec import resolve_spec
from migronaut_core.config import load_config, replace
from migronaut_core.definitions import (
    CollectionDefinition,
    Versioning,
    check_inline,
    load_definitions,
)
from migronaut_core.errors import ConfigInvalidError

URI = "mongodb://127.0.0.1/app"
RESERVED = ("migronaut_changelog", "migronaut_lock", "migronaut_background")


def test_inline_definitions_from_a_config_file(tmp_path: Path) -> None:
    (tmp_path / "migronaut.toml").write_text(
        'uri = "mongodb://127.0.0.1/app"\n'
        'collections_dir = "defs"\n'
        'background_shard_aware = "off"\n'
        "[collections.users]\n"
        'versioning = { field = "_v", revision_field = "rev" }\n'
        "[collections.audit]\n"
    )
    config = load_config(cwd=tmp_path, env={})
    assert config.collections == {
        "users": {"versioning": {"field": "_v", "revision_field": "rev"}},
        "audit": {},
    }
    assert config.collections_dir == (tmp_path / "defs").resolve()
    assert config.background_shard_aware == "off"
    assert hash(config) == hash(config)  # a Config stays hashable


def test_defaults_declare_nothing() -> None:
    config = load_config({"uri": URI}, env={})
    assert config.collections is None and config.collections_dir is None
    assert config.background_shard_aware == "auto"


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"background_shard_aware": "on"}, "background_shard_aware"),
        ({"background_shard_aware": True}, "background_shard_aware"),
        ({"collections": ["users"]}, "collections"),
        ({"collections_dir": 3}, "collections_dir"),
        ({"collections": {"users": {"versioning": {"feild": "_v"}}}}, "versioning"),
        ({"collections": {"users": {"indexes": []}}}, "indexes"),
        ({"collections": {"users": {"versioning": {"field": "_id"}}}}, "field"),
        ({"collections": {"users": {"versioning": {"field": "a.b"}}}}, "field"),
        (
            {"collections": {"users": {"versioning": {"field": "v", "revision_field": "v"}}}},
            "field",
        ),
        ({"collections": {"users": "v"}}, "collections"),
        ({"collections": {"system.views": {}}}, "name"),
        ({"collections": {"migronaut_lock": {}}}, "name"),
        ({"collections": {"migronaut_background_partitions": {}}}, "name"),
    ],
)
def test_bad_definitions_and_keys_are_refused(overrides: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigInvalidError) as raised:
        load_config({"uri": URI, **overrides}, env={})
    assert raised.value.context["key"] == key


def test_a_renamed_bookkeeping_collection_is_reserved_too() -> None:
    config = load_config({"uri": URI, "background_collection": "bg"}, env={})
    with pytest.raises(ConfigInvalidError):
        replace(config, collections={"bg_watch": {}})
    assert replace(config, collections={"migronaut_background": {}}).collections is not None


def test_versioning_defaults_and_switches() -> None:
    found = check_inline(
        {
            "a": {"versioning": {}},
            "b": {"versioning": True},
            "c": {"versioning": False},
            "d": {"versioning": {"field": "schema", "revision_field": "rev"}},
            "e": {"name": "events.2024"},
        }
    )
    assert [(d.name, d.versioning) for d in found] == [
        ("a", Versioning("_v", None)),
        ("b", Versioning("_v", None)),
        ("c", None),
        ("d", Versioning("schema", "rev")),
        ("events.2024", None),
    ]
    assert found[3].versioning is not None
    assert found[3].versioning.to_dict() == {"field": "schema", "revision_field": "rev"}


def test_a_directory_of_toml_and_python_definitions(tmp_path: Path) -> None:
    (tmp_path / "orders.toml").write_text('versioning = { field = "schema_version" }\n')
    (tmp_path / "events.py").write_text('name = "events.2024"\nversioning = {"field": "_v"}\n')
    (tmp_path / "_helpers.py").write_text("raise RuntimeError('never imported')\n")
    (tmp_path / "notes.md").write_text("# not a definition\n")
    found = load_definitions({"users": {"versioning": {}}}, tmp_path, reserved=RESERVED)
    assert [(d.name, d.versioning) for d in found] == [
        ("users", Versioning()),
        ("events.2024", Versioning("_v")),
        ("orders", Versioning("schema_version")),
    ]
    assert all(isinstance(d, CollectionDefinition) and d.source for d in found)


@pytest.mark.parametrize(
    ("name", "content", "needle"),
    [
        ("users.toml", "versioning = [", "not valid TOML"),
        ("users.py", "raise ValueError('boom')", "failed to import"),
        ("users.toml", 'versioning = { field = "$v" }', "top-level field name"),
        ("migronaut_changelog.toml", "", "own collections"),
        ("users.toml", "owner = 'team'", "not a known key"),
    ],
)
def test_a_bad_definition_file_names_itself(
    tmp_path: Path, name: str, content: str, needle: str
) -> None:
    (tmp_path / name).write_text(content + "\n")
    with pytest.raises(ConfigInvalidError) as raised:
        load_definitions(None, tmp_path, reserved=RESERVED)
    assert needle in raised.value.message
    assert name in raised.value.message


def test_a_collection_declared_twice_is_refused(tmp_path: Path) -> None:
    (tmp_path / "users.toml").write_text("versioning = true\n")
    with pytest.raises(ConfigInvalidError) as raised:
        load_definitions({"users": {}}, tmp_path, reserved=RESERVED)
    assert "declared twice" in raised.value.message


def test_a_missing_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigInvalidError) as raised:
        load_definitions(None, tmp_path / "nope")
    assert raised.value.context["key"] == "collections_dir"


def _module(**background: object) -> dict[str, object]:
    return {"background": {"collection": "users", "from": 1, "to": 2, **background},
            "migrate": lambda doc, ctx: doc}  # fmt: skip


def test_a_declared_collection_pins_the_spec_fields() -> None:
    declared = Versioning("schema", "rev").to_dict()
    spec, _ = resolve_spec("20240101000000_m", _module(), versioning=declared)
    assert (spec.field, spec.revision_field) == ("schema", "rev")
    same, _ = resolve_spec("20240101000000_m", _module(field="schema"), versioning=declared)
    assert same.field == "schema"
    with pytest.raises(ConfigInvalidError) as raised:
        resolve_spec("20240101000000_m", _module(revision_field="version"), versioning=declared)
    assert raised.value.context["key"] == "revision_field"
    # Declared without a revision field: a spec that names one contradicts it.
    with pytest.raises(ConfigInvalidError):
        resolve_spec(
            "20240101000000_m", _module(revision_field="rev"), versioning=Versioning().to_dict()
        )
