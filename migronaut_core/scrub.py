"""Error texts that may leave the engine: no document values, no credentials in them.

Server errors about single documents quote the values involved (a duplicate key
error prints the key; a validation error prints the failing document's fields).
These texts name the error and the index or rule, never the values. A
transform's own exception is named by its type only: its message is the
user's and may quote the document. :func:`redact_uri` takes the user and
password out of any connection string in a text.
"""

from __future__ import annotations

import re
from typing import Any

from pymongo.errors import PyMongoError

from migronaut_core.errors import MigronautError
from migronaut_core.server_errors import is_document_error

_INDEX = re.compile(r"index: (\S+)")
#: The server code that :func:`write_error_text` and :func:`error_text` end a text with.
_CODE = re.compile(r"\(code (-?\d+)\)$")
#: The ``user:password@`` of a connection string (``mongodb://``, ``mongodb+srv://``, any ``//``).
_CREDENTIALS = re.compile(r"//[^@/\s]*@")


_CODE_TEXT = {
    11000: "duplicate key",
    121: "document failed validation",
    72: "invalid options (a shard key change through mongos)",
    66: "immutable field changed",
    17280: "index key too large",
}


def redact_uri(text: str) -> str:
    """``text`` with the credentials of every URI in it replaced by ``***``."""
    return _CREDENTIALS.sub("//***@", text)


def write_error_text(code: int | None, errmsg: str | None) -> str:
    """Describe one write error of a bulk write without its values."""
    text = _CODE_TEXT.get(code or 0, "write error")
    if code == 11000 and errmsg:
        index = _INDEX.search(errmsg)
        if index:
            text += f" on index {index.group(1)}"
    return f"{text} (code {code})" if code else text


def error_code(text: str | None) -> int | None:
    """The server error code a value-free error text ends with, None when it names none.

    Reads the texts :func:`write_error_text` and :func:`error_text` make (``…
    (code 11000)``), so a stored document error names its code without a second field.
    """
    found = _CODE.search(text or "")
    return int(found.group(1)) if found else None


def error_text(error: BaseException | str) -> str:
    """Describe an exception for logs, events and the state, without document values."""
    if isinstance(error, str):
        return error
    if isinstance(error, MigronautError):
        return error.message
    if isinstance(error, PyMongoError):
        code: Any = getattr(error, "code", None)
        details = getattr(error, "details", None) or {}
        if is_document_error(code):
            return write_error_text(code, details.get("errmsg"))
        return f"{type(error).__name__}" + (f" (code {code})" if code else "")
    return type(error).__name__
