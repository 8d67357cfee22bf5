"""Which failures of a bulk write fail single documents and which fail the batch."""

from __future__ import annotations

from pymongo.errors import BulkWriteError

from migronaut_core.server_errors import document_write_errors


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
