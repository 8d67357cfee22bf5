"""The validator a finalize sets, and the previous validation it records, exactly."""

from __future__ import annotations

import bson
from bson.int64 import Int64

from migronaut_core.background.validator import Validation, validator_document
from tests.support.spec import resolve

SCHEMA = {"bsonType": "object", "required": ["first"]}


def test_the_version_validator_is_the_version_field_equal_to_to() -> None:
    assert validator_document(resolve(validator="version", field="schema", to=3)) == {"schema": 3}


def test_the_version_validator_exempts_documents_outside_the_filter() -> None:
    spec = resolve(validator="version", filter={"tier": "gold"})
    assert validator_document(spec) == {"$or": [{"_v": 2}, {"$nor": [{"tier": "gold"}]}]}


def test_a_json_schema_validator_is_the_schema_as_given() -> None:
    spec = resolve(validator={"json_schema": SCHEMA})
    assert validator_document(spec) == {"$jsonSchema": SCHEMA}
    assert validator_document(spec)["$jsonSchema"] is not spec.validator.json_schema  # type: ignore[union-attr]


def test_a_recorded_validation_decodes_exactly_with_its_types_and_order() -> None:
    previous = Validation({"b": Int64(1), "a": {"$type": "int"}}, "moderate", "warn")
    decoded = Validation.decode(previous.encode())
    assert decoded == previous
    assert list(decoded.validator or {}) == ["b", "a"]
    assert isinstance((decoded.validator or {})["b"], Int64)
    none = Validation(None, None, None, exists=False)
    assert Validation.decode(none.encode()) == none
    assert bson.decode(none.encode()) == {"exists": False}
