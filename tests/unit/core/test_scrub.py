"""Value-free error texts, and the server code a stored one names."""

from __future__ import annotations

import pytest
from pymongo.errors import OperationFailure

from migronaut_core.scrub import error_code, error_text, write_error_text


@pytest.mark.parametrize(
    ("code", "errmsg", "text"),
    [
        (11000, 'E11000 dup key: { email: "a@b.c" } index: email_1', "duplicate key on index"),
        (121, "Document failed validation: {name: 'Ann'}", "document failed validation"),
        (None, "anything", "write error"),
    ],
)
def test_a_write_error_is_described_without_its_values(
    code: int | None, errmsg: str, text: str
) -> None:
    described = write_error_text(code, errmsg)
    assert described.startswith(text)
    assert "a@b.c" not in described and "Ann" not in described
    assert error_code(described) == code


def test_the_code_is_read_back_from_texts_the_engine_makes_and_only_from_those() -> None:
    assert error_code(error_text(OperationFailure("boom", code=50))) == 50
    assert error_code(error_text(ValueError("code 7 (code 8) in the user's message"))) is None
    assert error_code("ValueError") is None
    assert error_code(None) is None
