"""Validating ``background.validator`` and ``background.validator_soak``."""

from __future__ import annotations

from typing import Any

import pytest

from migronaut_core.background.spec import (
    BackgroundSpec,
    SoakSettings,
    ValidatorSettings,
    read_stored,
    resolve_spec,
)
from tests.support.spec import NAME, SECRET, module, refused, resolve, step

SCHEMA: dict[str, Any] = {"bsonType": "object", "required": ["first", "last"]}


def test_no_validator_by_default_and_the_soak_defaults_to_one_clean_check() -> None:
    spec = resolve()
    assert spec.validator is None
    assert spec.validator_soak == SoakSettings(passes=1, seconds=0)


def test_the_version_shorthand_and_a_json_schema_are_read() -> None:
    assert resolve(validator="version").validator == ValidatorSettings("version")
    spec = resolve(validator={"json_schema": SCHEMA}, validator_soak={"passes": 3, "seconds": 60})
    assert spec.validator == ValidatorSettings("json_schema", json_schema=SCHEMA)
    assert spec.validator_soak == SoakSettings(passes=3, seconds=60)


@pytest.mark.parametrize(
    "validator",
    [{"validator": "version"}, {"validator": {"json_schema": SCHEMA}}, {}],
    ids=["version", "json_schema", "none"],
)
def test_a_stored_spec_reads_back_equal(validator: dict[str, Any]) -> None:
    spec = resolve(**validator, **({"validator_soak": {"passes": 2}} if validator else {}))
    assert read_stored(spec.to_document()) == spec


def test_a_spec_stored_before_validators_reads_without_one() -> None:
    stored = resolve().to_document()
    del stored["validator"], stored["validator_soak"]
    assert read_stored(stored) == BackgroundSpec(collection="users", from_version=1, to_version=2)


@pytest.mark.parametrize(
    ("overrides", "key", "says"),
    [
        ({"validator": SECRET}, "validator", "must be 'version' or a mapping"),
        ({"validator": 3}, "validator", "(got int)"),
        ({"validator": {"json_schema": {}}}, "validator.json_schema", "must not be empty"),
        ({"validator": {"json_schema": [SECRET]}}, "validator.json_schema", "must be a mapping"),
        ({"validator": {}}, "validator.json_schema", "is required"),
        ({"validator": {"jsonSchema": SCHEMA}}, "validator.jsonSchema", "'json_schema'"),
        ({"validator_soak": {"passes": 2}}, "validator_soak", "needs background.validator"),
        (
            {"validator": "version", "validator_soak": {"passes": 0}},
            "validator_soak.passes",
            "between 1 and 10000",
        ),
        (
            {"validator": "version", "validator_soak": {"seconds": -1}},
            "validator_soak.seconds",
            "between 0 and 2592000",
        ),
        (
            {"validator": "version", "validator_soak": {"secs": 5}},
            "validator_soak.secs",
            "did you mean 'seconds'",
        ),
        ({"validator": "version", "validator_soak": 5}, "validator_soak", "must be a mapping"),
    ],
)
def test_a_wrong_validator_names_its_key(overrides: dict[str, Any], key: str, says: str) -> None:
    error = refused(lambda: resolve(**overrides), key)
    assert says in error.message


def test_a_step_migration_has_no_validator() -> None:
    background = {"mode": "step", "from": 1, "to": 2, "validator": "version"}
    error = refused(lambda: resolve_spec(NAME, module(background, step=step)), "validator")
    assert "step mode" in error.message
