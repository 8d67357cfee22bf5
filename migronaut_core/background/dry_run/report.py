"""What a dry run reports: per-document previews and the reports of both kinds.

Every type here is frozen and JSON-safe through ``to_dict`` (the one conversion of
:mod:`migronaut_core.json_shape`; a preview's, either its changes or its error, by
hand); none holds a document value, only ``_id``s, field names, counts and
value-free error texts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from migronaut_core.background.spec import Direction
from migronaut_core.bson_values import json_safe
from migronaut_core.json_shape import json_field, to_json_dict

__all__ = ["DocumentPreview", "DryRunReport", "Method", "StepDryRunReport"]

Method = Literal["sample", "first"]


@dataclass(frozen=True, slots=True)
class DocumentPreview:
    """What a pass would do to one document: the fields it would write, or why it would fail.

    :param id: the document's ``_id``.
    :param set_fields: top-level fields the update would ``$set`` (the version
        and revision stamps included), in the update's order.
    :param unset_fields: top-level fields the update would ``$unset``.
    :param changed: the transform changed something besides the stamps.
    :param error: a value-free text, when the document would fail.
    :param reason: with ``error``: ``transform`` (it raised or returned no
        document), ``shape`` (what it returned cannot be written), and with
        ``validate`` also ``write`` (the server refused the update: a duplicate
        key, a validator), ``update`` (an update pipeline failed on the
        document: an expression error, and with ``validate`` a validator or a
        duplicate key), ``conflict`` (the document changed meanwhile) or
        ``unvalidated`` (too many others failed to write first).
    """

    id: Any
    set_fields: tuple[str, ...] = ()
    unset_fields: tuple[str, ...] = ()
    changed: bool = False
    error: str | None = None
    reason: str | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: ``{id, changes: {set, unset}}`` or ``{id, error, reason}``."""
        if self.failed:
            return {"id": json_safe(self.id), "error": self.error, "reason": self.reason}
        return {
            "id": json_safe(self.id),
            "changes": {"set": list(self.set_fields), "unset": list(self.unset_fields)},
        }


@dataclass(frozen=True, slots=True)
class DryRunReport:
    """The outcome of a dry run; nothing it describes was kept.

    :param migration: the background migration's name.
    :param collection: the collection it rewrites.
    :param direction: ``forward``, or ``revert`` for a registered way back.
    :param status: the registered migration's status; ``None`` when only the file exists.
    :param file_changed: the file on disk differs from the registered one (its
        functions ran with the registered spec; lanes wait until it is repinned).
    :param method: ``sample`` (random matching documents) or ``first`` (by ``_id``).
    :param size: how many documents were asked for (the JSON names it by ``method``).
    :param validate: the real write path ran in an aborted transaction.
    :param estimate: matching documents counted (``None``: the count ran out of time).
    :param at_least: the count stopped at its cap; ``estimate`` is a floor.
    :param documents: one preview per document looked at, in ``_id`` order.

    ``registered`` and ``totals`` are derived from these when the report is built.
    """

    migration: str
    collection: str
    direction: Direction
    #: The migration is registered (``status`` is not ``None``).
    registered: bool = field(init=False, repr=False, compare=False)
    status: str | None
    file_changed: bool
    method: Method = field(metadata=json_field(omit="always"))
    size: int = field(metadata=json_field(name_from="method"))
    validate: bool
    estimate: int | None
    at_least: bool
    #: ``documents`` looked at, how many ``would_change`` (beyond the version stamp),
    #: stay ``unchanged`` but for the stamp, and ``errors``.
    totals: dict[str, int] = field(init=False, repr=False, compare=False)
    documents: tuple[DocumentPreview, ...]

    def __post_init__(self) -> None:
        errors = sum(1 for doc in self.documents if doc.failed)
        changing = sum(1 for doc in self.documents if not doc.failed and doc.changed)
        totals = {
            "documents": len(self.documents),
            "would_change": changing,
            "unchanged": len(self.documents) - errors - changing,
            "errors": errors,
        }
        object.__setattr__(self, "registered", self.status is not None)
        object.__setattr__(self, "totals", totals)

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-safe data (ids rendered like the status views render them)."""
        return to_json_dict(self)


@dataclass(frozen=True)
class StepDryRunReport:
    """What ``steps`` steps of a step migration would do, from where it stands.

    Each step reports ``done``, its counters, ``total`` and the size of the
    checkpoint it returned (never the checkpoint itself), or a value-free error.
    """

    migration: str
    #: Always ``step`` (a declarative migration's dry run is a :class:`DryRunReport`).
    mode: Literal["step"] = field(default="step", init=False)
    direction: str
    status: str | None
    from_checkpoint: bool
    steps: tuple[dict[str, Any], ...]

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)
