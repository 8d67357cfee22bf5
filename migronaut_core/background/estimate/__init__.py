"""Estimates of background migrations: how many documents, at what cost, for how long.

``migronaut background estimate NAME`` counts the documents a pass would migrate,
samples their per-document cost (:mod:`.measure`: the transform timed here, the
guarded write timed in a transaction that is always aborted), and tells the
duration from now under the maintenance windows and the write budget, as a range
(the model: :mod:`migronaut_core.background.eta`). Nothing is written.

Modules: ``report`` (the result types), ``measure`` (sampling), ``run``
(:func:`estimate_migration`). The names below are the public surface.
"""

from __future__ import annotations

from migronaut_core.background.estimate.report import BudgetView, MigrationEstimate, SampledCosts
from migronaut_core.background.estimate.run import (
    DEFAULT_ESTIMATE_SAMPLE,
    MIN_ESTIMATE_SAMPLE,
    estimate_migration,
)

__all__ = [
    "DEFAULT_ESTIMATE_SAMPLE",
    "MIN_ESTIMATE_SAMPLE",
    "BudgetView",
    "MigrationEstimate",
    "SampledCosts",
    "estimate_migration",
]
