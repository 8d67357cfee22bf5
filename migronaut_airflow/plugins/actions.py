"""The controls' input: the reason every UI action must give.

The actions themselves, which of them restart the migration's DAG and which
the page asks to confirm are the core's
(:mod:`migronaut_core.background.control.actions`); the API applies them with
:meth:`Background.control <migronaut_core.Background.control>`.
"""

from __future__ import annotations

from migronaut_core.errors import ConfigInvalidError


def clean_reason(reason: str) -> str:
    """The reason as recorded: whitespace runs (line breaks too) become one space.

    :raises ConfigInvalidError: it is blank.
    """
    text = " ".join(reason.split())
    if not text:
        raise ConfigInvalidError("a reason is required", {"key": "reason"})
    return text
