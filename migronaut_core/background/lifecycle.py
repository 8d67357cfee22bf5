"""Status moves the engine makes by itself: failing a migration, unblocking one.

``requires``: a migration registered while the background migrations it
requires are not all completed (forward) waits ``blocked``; :func:`try_unblock`
moves it to ``pending`` once they are. Coordinator, lanes and controls share
these, so each lives here once; each move's from-statuses are the state machine's
(:func:`~migronaut_core.background.states.sources`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from migronaut_core.background.runtime import Runtime
from migronaut_core.background.states import sources
from migronaut_core.background.store import StateDocument
from migronaut_core.clock import utc_now
from migronaut_core.scrub import error_text

log = logging.getLogger("migronaut_core.background")


def fail_state(
    rt: Runtime,
    state: StateDocument,
    reason: str | BaseException,
    *,
    stamp: Mapping[str, Any] | None = None,
) -> str:
    """Move a background migration to ``failed`` with a value-free reason; return that reason.

    ``stamp``: what the ``background:failed`` event carries besides (a lane's
    ``run_id``, so listeners know which lane failed it).
    """
    message = error_text(reason)
    failed = rt.store.states.move(
        state["_id"],
        from_statuses=sources("fail"),
        to="failed",
        action="fail",
        fields={"last_error": message, "failed_at": utc_now()},
    )
    if failed is not None:
        rt.forget_migration(state["_id"])
        rt.emit("background:failed", {**(stamp or {}), "migration": state["_id"], "error": message})
        log.error("background migration %s failed: %s", state["_id"], message)
    return message


def requires_status(rt: Runtime, requires: Sequence[str]) -> list[dict[str, Any]]:
    """Where each required background migration stands: ``{migration, status, done}``.

    Done means completed in the forward direction, or, with no state at all,
    adopted by a baseline (status ``adopted``: the changelog has it from a
    history that predates migronaut). A completed revert is not done.
    """
    if not requires:
        return []
    states = rt.store.states.get_many(requires)
    missing = [name for name in requires if name not in states]
    adopted = set(rt.adopted_of(missing)) if missing and rt.adopted_of is not None else set()
    rows = []
    for name in requires:
        state = states.get(name)
        if state is None:
            done = name in adopted
            rows.append(
                {"migration": name, "status": "adopted" if done else "unregistered", "done": done}
            )
        elif state.get("direction") == "revert":
            rows.append({"migration": name, "status": "reverted", "done": False})
        else:
            status = state["status"]
            rows.append({"migration": name, "status": status, "done": status == "completed"})
    return rows


def waiting_for(rt: Runtime, requires: Sequence[str]) -> list[str]:
    """The required background migrations that are not done yet, in ``requires`` order."""
    return [row["migration"] for row in requires_status(rt, requires) if not row["done"]]


def try_unblock(rt: Runtime, state: StateDocument) -> StateDocument | None:
    """Move a blocked migration whose requirements are all done to ``pending``."""
    waits = waiting_for(rt, list(state.get("requires") or []))
    if waits:
        if waits != list(state.get("waits_for") or []):
            rt.store.states.set(state["_id"], {"waits_for": waits})
        return None
    unblocked = rt.store.states.move(
        state["_id"],
        from_statuses=sources("unblock"),
        to="pending",
        action="unblock",
        fields={"waits_for": []},
    )
    if unblocked is not None:
        rt.emit("background:unblocked", {"migration": state["_id"]})
    return unblocked
