"""Which failures of a bulk write fail single documents and which fail the batch."""

from __future__ import annotations

import pytest
from pymongo.errors import BulkWriteError

from migronaut_core.server_errors import document_write_errors, pipeline_write_errors


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
