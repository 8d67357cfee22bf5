"""The stages of an update-pipeline migration: which are accepted, and what they may write.

:func:`stage_problem` says what is wrong with a ``background.update`` (or
``revert_update``) value, naming the stage by its index and operator, never a
value; :func:`stamp_problem` refuses a stage that writes the version or revision
field itself (the engine stamps both after the user's stages). Pure: no
database. :mod:`.validation` turns the problems into ``ConfigInvalidError``\\ s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import bson
from bson.codec_options import CodecOptions
from bson.errors import BSONError

from migronaut_core.background.spec.model import UPDATE_STAGES

__all__ = ["StageError", "checked_stages", "stamp_problem"]


class StageError(ValueError):
    """What is wrong with an update pipeline (a value-free sentence)."""


def checked_stages(value: Any, codec: CodecOptions[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return ``value`` as BSON gives it back, if it is a valid update pipeline.

    :raises StageError: not a non-empty list, a stage that is not a mapping of
        exactly one operator of :data:`~.model.UPDATE_STAGES`, or one BSON
        cannot encode.
    """
    if not isinstance(value, list | tuple) or not value:
        got = "" if isinstance(value, list | tuple) else f" (got {type(value).__name__})"
        raise StageError(f"must be a non-empty list of pipeline stages{got}")
    stages: list[dict[str, Any]] = []
    allowed = ", ".join(sorted(UPDATE_STAGES))
    for index, stage in enumerate(value):
        where = f"stage {index}"
        if not isinstance(stage, Mapping) or len(stage) != 1:
            raise StageError(f"{where} must be a mapping with exactly one stage operator")
        (operator,) = stage
        if operator not in UPDATE_STAGES:
            shown = str(operator)[:40]
            raise StageError(
                f"{where} ({shown}) is not an update-pipeline stage; use one of {allowed}"
            )
        try:
            stages.append(bson.decode(bson.encode(dict(stage), codec_options=codec)))
        except (BSONError, TypeError, ValueError, OverflowError):
            raise StageError(
                f"{where} ({operator}) must be a document MongoDB can encode"
            ) from None
    return stages


def stamp_problem(stages: list[dict[str, Any]], names: list[str]) -> str | None:
    """Why a stage may not run (it sets or unsets one of ``names`` at top level), or None."""
    for index, stage in enumerate(stages):
        ((operator, body),) = stage.items()
        for name in names:
            if name in _paths_written(operator, body):
                return (
                    f"stage {index} ({operator}) must not set or unset {name!r}: "
                    "the engine stamps it"
                )
    return None


def _paths_written(operator: str, body: Any) -> set[str]:
    """The top-level field names a ``$set``/``$addFields``/``$unset``/``$project`` names."""
    if operator == "$unset":
        paths = [body] if isinstance(body, str) else list(body) if isinstance(body, list) else []
    elif operator in ("$set", "$addFields", "$project") and isinstance(body, Mapping):
        paths = list(body)
    else:
        return set()
    return {path.split(".", 1)[0] for path in paths if isinstance(path, str)}
