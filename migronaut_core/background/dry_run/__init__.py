"""Dry runs of background migrations: what a pass would do to a few documents, with nothing kept.

A dry run picks a handful of the documents a pass would rewrite (a ``$sample``
of them, or the first ``n`` by ``_id``) and runs the migration's transform on
copies of them. For each document the report says which top-level fields the
rewrite would ``$set`` and ``$unset`` (names only, never values), or why the
document would fail (``transform``, ``shape``, and with ``validate`` also
``write`` and ``conflict``).

``validate`` goes further: it sends the documents through the engine's real
write path inside a snapshot transaction on the primary that is always aborted
(:mod:`~migronaut_core.background.dry_run.sandbox`). A step migration is dry-run
by steps instead (:mod:`~migronaut_core.background.dry_run.steps`).

Nothing is written: no state document, no partition, no changelog record, no
change to the collection. User code gets isolated handles
(:mod:`~migronaut_core.background.dry_run.isolation`): with ``validate`` and in
step dry runs whatever it writes through ``ctx.db`` or ``ctx.client`` is bound
to the aborted transaction, passed ``ctx.session`` or not; a plain preview
refuses its writes; a write to migronaut's own collections is always refused
(:class:`~migronaut_core.errors.DryRunRefusedError`, the document's or step's
error). Works for a registered migration (its registered spec, direction and
excluded documents) and for one that is only a file.

Modules: ``report`` (the result types), ``options`` (limits and option checks),
``isolation`` (the handles user code gets), ``preview`` (the job, picking
documents, previews), ``sandbox`` (validating in an aborted transaction),
``steps`` (step migrations), ``run`` (:func:`dry_run`).
The names below are the public surface; import them from this package.
"""

from __future__ import annotations

from migronaut_core.background.dry_run.options import (
    DEFAULT_SAMPLE,
    MAX_DOCUMENTS,
    MAX_DRY_STEPS,
    check_options,
)
from migronaut_core.background.dry_run.report import (
    DocumentPreview,
    DryRunReport,
    Method,
    StepDryRunReport,
)
from migronaut_core.background.dry_run.run import dry_run
from migronaut_core.background.dry_run.steps import dry_run_steps

__all__ = [
    "DEFAULT_SAMPLE",
    "MAX_DOCUMENTS",
    "MAX_DRY_STEPS",
    "DocumentPreview",
    "DryRunReport",
    "Method",
    "StepDryRunReport",
    "check_options",
    "dry_run",
    "dry_run_steps",
]
