"""Which bulk-write failures fail single documents, which fail the batch; what is overload."""

from __future__ import annotations

import pytest
from pymongo.errors import (
    AutoReconnect,
    BulkWriteError,
    DuplicateKeyError,
    ExecutionTimeout,
    NetworkTimeout,
    OperationFailure,
    WriteConcernError,
    WTimeoutError,
)

from migronaut_core.server_errors import document_write_errors, is_overload, pipeline_write_errors


def bulk_error(**details: object) -> BulkWriteError:
    return BulkWriteError({"writeErrors": [], "writeConcernErrors": [], **details})


def test_document_errors_are_taken_apart_by_op_index() -> None:
    duplicate = {"index": 3, "code": 11000, "errmsg": "E11000"}
    invalid = {"index": 0, "code": 121, "errmsg": "failed validation"}
    failed = document_write_errors(bulk_error(writeErrors=[duplicate, invalid]))
    assert failed == {3: duplicate, 0: invalid}


def test_a_write_concern_error_fails_the_batch() -> None:
    error = bulk_error(
        writeErrors=[{"index": 0, "code": 11000, "errmsg": "E11000"}],
        writeConcernErrors=[{"code": 64, "errmsg": "waiting for replication"}],
    )
    assert document_write_errors(error) is None


def test_any_other_write_error_fails_the_batch() -> None:
    error = bulk_error(
        writeErrors=[
            {"index": 0, "code": 11000, "errmsg": "E11000"},
            {"index": 1, "code": 50, "errmsg": "exceeded time limit"},
        ]
    )
    assert document_write_errors(error) is None


def test_an_update_pipeline_fails_a_document_on_its_expression_errors_too() -> None:
    conversion = {"index": 2, "code": 241, "errmsg": "Failed to parse number"}
    invalid = {"index": 0, "code": 121, "errmsg": "failed validation"}
    failed = pipeline_write_errors(bulk_error(writeErrors=[conversion, invalid]))
    assert failed == {2: conversion, 0: invalid}
    assert document_write_errors(bulk_error(writeErrors=[conversion])) is None


@pytest.mark.parametrize("code", [50, 112, 10107, 11602, 189, 91, 13])
def test_an_update_pipeline_batch_fault_is_not_a_document_error(code: int) -> None:
    error = bulk_error(writeErrors=[{"index": 0, "code": code, "errmsg": "x"}])
    assert pipeline_write_errors(error) is None
    concern = bulk_error(writeConcernErrors=[{"code": 64, "errmsg": "waiting for replication"}])
    assert pipeline_write_errors(concern) is None


# ─── Overload classification ──────────────────────────────────────────────────


def labelled(label: str, code: int = 112) -> OperationFailure:
    return OperationFailure("labelled", code, {"ok": 0, "code": code, "errorLabels": [label]})


@pytest.mark.parametrize(
    "error",
    [
        WriteConcernError("waiting for replication timed out", 64, {"code": 64}),
        WTimeoutError("wtimeout", 64, {"errInfo": {"wtimeout": True}}),
        BulkWriteError(
            {
                "writeErrors": [],
                "writeConcernErrors": [{"code": 64, "errmsg": "waiting for replication"}],
                "nMatched": 3,
            }
        ),
        BulkWriteError({"writeErrors": [{"index": 0, "code": 50, "errmsg": "t"}]}),
        labelled("TransientTransactionError"),
        labelled("RetryableWriteError", 189),
        OperationFailure("operation exceeded time limit", 50),
        ExecutionTimeout("operation exceeded time limit", 50),
        OperationFailure("exceeded time limit", 262),
        NetworkTimeout("timed out"),
        AutoReconnect("connection closed"),
    ],
    ids=lambda error: type(error).__name__,
)
def test_overload_errors(error: Exception) -> None:
    assert is_overload(error) is True


@pytest.mark.parametrize(
    "error",
    [
        DuplicateKeyError("E11000", 11000),
        OperationFailure("document failed validation", 121),
        BulkWriteError({"writeErrors": [{"index": 0, "code": 11000, "errmsg": "dup"}]}),
        OperationFailure("other label", 2, {"errorLabels": ["NoWritesPerformed"]}),
        ValueError("transform bug"),
    ],
    ids=lambda error: type(error).__name__,
)
def test_not_overload(error: Exception) -> None:
    assert is_overload(error) is False


def test_overload_is_found_through_a_wrapping_error() -> None:
    try:
        try:
            raise NetworkTimeout("timed out")
        except NetworkTimeout as inner:
            raise RuntimeError("batch failed") from inner
    except RuntimeError as outer:
        assert is_overload(outer) is True
