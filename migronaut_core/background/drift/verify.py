"""Drift verification: old-shape documents that appeared after a migration completed.

An old release of the application may still write the old shape after a
background migration completed. :func:`verify` probes each completed forward
migration with one indexed query for a document still matching its source
version (its known failed documents excluded), and reopens the migration (as a
retry of a completed one does) or only reports it.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from typing import Any, cast

from migronaut_core.background.control.actions import control
from migronaut_core.background.indexes import probe_query
from migronaut_core.background.runtime import Runtime
from migronaut_core.background.spec import BackgroundSpec, read_stored
from migronaut_core.changelog import Actor
from migronaut_core.checks import check_choice
from migronaut_core.config import ON_DRIFT_MODES, OnDrift

log = logging.getLogger("migronaut_core.background")

__all__ = ["OnDrift", "check_on_drift", "probe_query", "verify"]


def check_on_drift(value: object) -> OnDrift:
    """``value`` as an :data:`OnDrift` (the poll's, the watcher's and the kit's one check).

    :raises ConfigInvalidError: it is neither ``reopen`` nor ``report``.
    """
    return cast(OnDrift, check_choice("on_drift", value, ON_DRIFT_MODES))


def verify(
    rt: Runtime,
    *,
    on_drift: OnDrift = "reopen",
    collections: Sequence[str] | None = None,
    actor: Actor | None = None,
    streamed: Collection[str] = (),
) -> dict[str, Any]:
    """Probe every completed forward migration once; reopen or report the drifted ones.

    :param streamed: collections a live, fresh watcher streams, left to it in
        drift mode ``stream`` (in ``both`` the poll probes them too): not probed,
        counted in ``skipped``.
    :returns: ``{checked, drifted: [{migration, collection, action}], skipped}``.
    """
    wanted = set(collections) if collections is not None else None
    checked, skipped, drifted = 0, 0, []
    for state in rt.store.states.list_states({"status": "completed"}):
        if state.get("direction") == "revert" or not state.get("spec"):
            continue
        spec = read_stored(state["spec"])
        if (
            spec.collection is None
            or (wanted is not None and spec.collection not in wanted)
            or spec.collection in streamed
        ):
            skipped += 1
            continue
        checked += 1
        if not _has_old_shape(rt, spec, list(state.get("bad_ids") or [])):
            continue
        action = "reported"
        if on_drift == "reopen":
            who = actor or Actor(requested_by="migronaut-drift", reason="old-shape documents found")
            action = (
                "reopened"
                if control(rt, state["_id"], "retry", actor=who).applied == "changed"
                else "unchanged"
            )
        log.warning(
            "%s: old-shape documents in %s after completion (%s)",
            state["_id"],
            spec.collection,
            action,
        )
        drifted.append({"migration": state["_id"], "collection": spec.collection, "action": action})
    return {"checked": checked, "drifted": drifted, "skipped": skipped}


def _has_old_shape(rt: Runtime, spec: BackgroundSpec, bad_ids: list[Any]) -> bool:
    assert spec.collection is not None
    match, hint = probe_query(rt, spec, bad_ids)
    options: dict[str, Any] = {"projection": {"_id": 1}}
    if hint is not None:
        options["hint"] = hint
    return rt.db[spec.collection].find_one(match, **options) is not None
