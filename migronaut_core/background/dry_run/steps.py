"""Dry runs of step migrations: a few steps in a transaction that is always aborted.

The steps start from the migration's last checkpoint (or from none) and each
reports its counters and the size of the checkpoint it returned, never the
checkpoint itself. Every write through ``ctx.db`` and ``ctx.client`` is bound to
the aborted transaction, with ``ctx.session`` or without it
(:mod:`.isolation`); a write to migronaut's own collections is refused.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import bson
from pymongo import ReadPreference
from pymongo.errors import PyMongoError
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.dry_run.isolation import (
    isolated_client,
    isolated_database,
    isolation_of,
)
from migronaut_core.background.dry_run.options import check_steps
from migronaut_core.background.dry_run.preview import spec_of
from migronaut_core.background.dry_run.report import StepDryRunReport
from migronaut_core.background.engine.steps import StepContext, read_step_result
from migronaut_core.background.runtime import LoadedBackground, Runtime
from migronaut_core.background.spec import BackgroundSpec, Direction
from migronaut_core.background.store import StateDocument
from migronaut_core.clock import monotonic
from migronaut_core.errors import ConfigInvalidError, TransactionsUnsupportedError
from migronaut_core.scrub import error_text

__all__ = ["dry_run_steps"]


def dry_run_steps(
    rt: Runtime, name: str, *, steps: int | None = None, from_start: bool = False
) -> StepDryRunReport:
    """Run ``steps`` steps of a step migration in a transaction that is always aborted.

    It starts from the migration's last checkpoint (``from_start``: from none).
    Whatever a step writes through ``ctx.db`` or ``ctx.client`` is rolled back,
    passed ``ctx.session`` or not; a write it cannot bind to the transaction is
    refused, and so is a write to migronaut's own collections (the step's error).

    :raises ConfigInvalidError: a declarative migration, or ``steps`` outside 1-100.
    :raises TransactionsUnsupportedError: on a standalone server.
    """
    count = check_steps(steps)
    loaded = rt.load(name)
    state = rt.store.states.get(name, projection={"history": 0, "doc_errors": 0})
    spec = spec_of(name, loaded, state)
    if spec.mode != "step":
        raise ConfigInvalidError(
            f"dry run of {name}: {name} is declarative; dry-run it on a sample (sample, first)",
            {"migration": name, "key": "steps"},
        )
    if not rt.supports_transactions():
        raise TransactionsUnsupportedError(
            f"dry run of {name}: steps run in an aborted transaction, which needs a replica "
            "set or a sharded cluster; this server is standalone",
            {"migration": name},
        )
    direction: Direction = "revert" if state and state.get("direction") == "revert" else "forward"
    checkpoint = None if from_start else _last_checkpoint(rt, name, state)
    previews = _run_steps(rt, name, loaded, spec, direction, checkpoint, count, state)
    return StepDryRunReport(
        migration=name,
        direction=direction,
        status=None if state is None else str(state.get("status")),
        from_checkpoint=checkpoint is not None,
        steps=tuple(previews),
    )


def _last_checkpoint(rt: Runtime, name: str, state: StateDocument | None) -> Any:
    if state is None:
        return None
    partitions = rt.store.partitions.list_partitions(
        name, generation=int(state.get("generation", 0))
    )
    return (partitions[0].get("cursor") or {}).get("checkpoint") if partitions else None


def _run_steps(
    rt: Runtime,
    name: str,
    loaded: LoadedBackground,
    spec: BackgroundSpec,
    direction: Direction,
    checkpoint: Any,
    count: int,
    state: StateDocument | None,
) -> list[dict[str, Any]]:
    function = loaded.fns.step_for(direction)
    assert function is not None  # the spec guarantees a step for each direction it runs
    previews: list[dict[str, Any]] = []
    with rt.client.start_session() as session:
        session.start_transaction(
            read_concern=ReadConcern("snapshot"),
            write_concern=WriteConcern("majority"),
            read_preference=ReadPreference.PRIMARY,
        )
        isolation = isolation_of(rt, session)
        try:
            for number in range(1, count + 1):
                ctx = StepContext(
                    migration=name,
                    direction=direction,
                    generation=int(state.get("generation", 0)) if state else 0,
                    checkpoint=checkpoint,
                    deadline=monotonic() + spec.slice_ms / 1000,
                    db=isolated_database(rt.db, isolation),
                    client=isolated_client(rt.client, isolation),
                    log=logging.getLogger(f"migronaut.background.{name}"),
                    cancel=CancelToken(),
                    session=session,
                    dry_run=True,
                )
                try:
                    result = read_step_result(name, function(ctx))
                except Exception as exc:
                    previews.append({"step": number, "error": error_text(exc)})
                    break
                size = len(bson.encode({"checkpoint": result.checkpoint}))
                previews.append(
                    {
                        "step": number,
                        "done": result.done,
                        "counters": result.counters,
                        "total": result.total,
                        "checkpoint_bytes": size,
                    }
                )
                checkpoint = result.checkpoint
                if result.done:
                    break
        finally:
            with contextlib.suppress(PyMongoError):
                session.abort_transaction()
    return previews
