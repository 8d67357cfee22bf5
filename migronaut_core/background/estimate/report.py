"""What ``background estimate`` answers: one frozen, JSON-safe result, values-free."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from migronaut_core.background.eta import EtaRange
from migronaut_core.json_shape import json_field, to_json_dict

__all__ = ["BudgetView", "MigrationEstimate", "SampledCosts"]


@dataclass(frozen=True, slots=True)
class SampledCosts:
    """Per-document costs measured on the sample (means; milliseconds and bytes).

    :param documents: documents sampled (those whose transform failed are left out
        of the costs and counted in ``failed``).
    :param transform_ms: the transform, timed in this process.
    :param write_ms: the guarded write, timed in transactions that were aborted.
    :param before_bytes: the documents' BSON size as read.
    :param after_bytes: their BSON size once rewritten.
    :param oplog_bytes: the oplog entry one rewrite adds (its diff, or the whole
        document when the diff is larger, plus an entry's own fields).
    :param relative_error: the standard error of the per-document cost over its mean.
    """

    documents: int
    failed: int
    transform_ms: float
    write_ms: float
    before_bytes: float
    after_bytes: float
    oplog_bytes: float
    relative_error: float

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


@dataclass(frozen=True, slots=True)
class BudgetView:
    """The target's budget as the estimate counts it: the migration's weighted share.

    :param docs_per_s: the target's budget (``background_budget``).
    :param priority: the migration's weight (its spec's ``priority``).
    :param others: the weights of the other running migrations assumed to share it.
    :param share: documents per second the migration may write.
    """

    docs_per_s: int
    priority: int
    others: tuple[int, ...]
    share: float

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


@dataclass(frozen=True, slots=True)
class MigrationEstimate:
    """How long a background migration's pass would take from now, and what it would write.

    :param migration: the migration's name.
    :param collection: the collection it rewrites.
    :param documents: documents still to migrate (those its pass matches now);
        None when the count ran out of time.
    :param at_least: the count stopped at its cap; ``documents`` is a floor.
    :param lanes: the lanes counted (the spec's ``max_parallel`` unless given).
    :param docs_per_s: the expected rate at full speed with those lanes (before
        windows and the budget).
    :param oplog_bytes: the oplog the pass would add (``documents`` times the
        sample's mean entry).
    :param eta: seconds from now, expected and its range, under windows and budget.
    :param finishes_at: now plus the expected seconds (UTC).
    :param windows: ``spec`` or ``target`` when maintenance windows apply.
    :param budget: the budget's share, when the target has one.
    :param costs: what the sample measured.
    """

    migration: str
    collection: str
    mode: str
    documents: int | None
    at_least: bool
    lanes: int
    docs_per_s: float
    oplog_bytes: int | None
    eta: EtaRange
    finishes_at: datetime | None
    windows: str | None = field(metadata=json_field(omit="none"))
    budget: BudgetView | None = field(metadata=json_field(omit="none"))
    costs: SampledCosts

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)
