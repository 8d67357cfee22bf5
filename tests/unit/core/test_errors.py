"""The error hierarchy and actor fields (no server)."""

from __future__ import annotations

import pickle

import pytest

import migronaut_core
from migronaut_core import errors
from migronaut_core.changelog import Actor


def test_every_error_has_a_unique_stable_code() -> None:
    exported = [getattr(errors, name) for name in errors.__all__]
    classes = [cls for cls in exported if cls is not errors.DocError]
    codes = {cls.code for cls in classes if isinstance(cls, type)}
    assert len(codes) == len({id(cls) for cls in classes if isinstance(cls, type)})
    assert all(issubclass(cls, errors.MigronautError) for cls in classes)


def test_config_error_is_a_value_error_and_round_trips() -> None:
    error = errors.ConfigInvalidError("bad key", {"key": "x"})
    assert isinstance(error, ValueError)
    copy = pickle.loads(pickle.dumps(error))
    assert copy.to_dict() == {
        "code": "CONFIG_INVALID",
        "message": "bad key",
        "context": {"key": "x"},
    }


def test_retryable_classification() -> None:
    assert errors.LockAlreadyHeldError("x").retryable
    assert errors.ConnectionFailedError("x").retryable
    assert not errors.ConfigInvalidError("x").retryable
    assert errors.LockLostError("x").retryable
    assert not errors.DocumentFailedError(errors.DocError(1, "bad", "write")).retryable


def test_a_document_failure_carries_its_record_and_round_trips() -> None:
    record = errors.DocError(7, "E11000 duplicate key", "write")
    error = errors.DocumentFailedError(record)
    assert isinstance(error, errors.BackgroundFailedError)
    assert error.context == {"reason": "document"}
    copy = pickle.loads(pickle.dumps(error))
    assert copy.error == record
    assert record.entry() == {"id": 7, "error": "E11000 duplicate key", "reason": "write"}


def test_public_api_exports_errors() -> None:
    assert migronaut_core.MigronautError is errors.MigronautError
    assert "Migronaut" in migronaut_core.__all__


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"requested_by": "x" * 101}, "requested_by"),
        ({"reason": "y" * 501}, "reason"),
        ({"reason": "line\nbreak"}, "reason"),
        ({"requested_by": "   "}, "requested_by"),
    ],
)
def test_actor_limits(kwargs: dict[str, str], key: str) -> None:
    with pytest.raises(errors.ConfigInvalidError) as raised:
        Actor(**kwargs)
    assert raised.value.context["key"] == key


def test_actor_fields() -> None:
    assert Actor("ana", "ticket 42").fields() == {"requested_by": "ana", "reason": "ticket 42"}
    assert Actor().fields() == {}
