"""What status commands, the Airflow UI and the JSON API show of a background migration.

Views are JSON-safe dicts. They never carry a lease's token, a resume token or a
document value; failed documents are listed by ``_id`` (kept in the state so
later passes can skip them) with a value-free reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pendulum
from bson import json_util

if TYPE_CHECKING:
    from migronaut_core.background.store import BackgroundStore

#: Failed documents listed in a status view (the state keeps up to MAX_BAD_IDS).
VIEW_FAILED_DOCUMENTS = 20
#: Throughput is measured over this window for the ETA.
ETA_WINDOW_SECONDS = 300


def _iso(value: Any) -> str | None:
    if isinstance(value, datetime):
        return pendulum.instance(value).in_timezone("UTC").isoformat()
    return None


def json_safe(value: Any) -> Any:
    """Make a stored value JSON-safe: dates as ISO text, other BSON as extended JSON text."""
    if isinstance(value, Mapping):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    if isinstance(value, datetime):
        return _iso(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return json_util.dumps(value, json_options=json_util.RELAXED_JSON_OPTIONS)


def progress(state: Mapping[str, Any], partitions: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Documents done in this pass against its estimate, with a percentage.

    ``at_least``: the estimate is a floor (a capped count); ``approximate``: it
    was estimated from a random sample (a large pass, see the id-range planner).
    """
    plan = state.get("plan") or {}
    estimate = int(plan.get("estimate") or 0)
    done_now = sum(
        int((p.get("counters") or {}).get("migrated", 0))
        + int((p.get("counters") or {}).get("skipped", 0))
        for p in partitions
        if p.get("generation") == state.get("generation")
    )
    if state.get("status") == "completed":
        percent: float | None = 100.0
    elif estimate > 0:
        percent = round(min(100.0, 100.0 * done_now / estimate), 1)
    else:
        percent = None
    return {
        "estimate": estimate,
        "at_least": bool(plan.get("at_least")),
        "approximate": bool(plan.get("approximate")),
        "done": done_now,
        "percent": percent,
    }


def eta_seconds(state: Mapping[str, Any], done_now: int, estimate: int) -> float | None:
    """Seconds left at the pass's average rate so far; None when it cannot be told."""
    started = state.get("started_at")
    if state.get("status") != "running" or not started or estimate <= done_now or done_now <= 0:
        return None
    begun = pendulum.instance(state["started_at"])
    elapsed = (pendulum.now("UTC") - begun).total_seconds()
    if elapsed <= 0:
        return None
    rate = done_now / elapsed
    return round((estimate - done_now) / rate, 1) if rate > 0 else None


def state_view(store: BackgroundStore, state: Mapping[str, Any]) -> dict[str, Any]:
    """The status of one background migration."""
    name = state["_id"]
    generation = state.get("generation", 0)
    partitions = store.list_partitions(name, generation=generation)
    by_status: dict[str, int] = {}
    for partition in partitions:
        by_status[partition["status"]] = by_status.get(partition["status"], 0) + 1
    shown = progress(state, partitions)
    bad_ids = list(state.get("bad_ids") or [])
    errors = list(state.get("doc_errors") or [])
    return {
        "name": name,
        "status": state.get("status"),
        "phase": state.get("phase"),
        "direction": state.get("direction", "forward"),
        "mode": state.get("mode"),
        "collection": (state.get("spec") or {}).get("collection"),
        "description": state.get("description"),
        "pass": state.get("pass", 0),
        "generation": generation,
        "progress": shown,
        "eta_seconds": eta_seconds(state, shown["done"], shown["estimate"]),
        "totals": dict(state.get("totals") or {}),
        "partitions": by_status,
        "live_leases": store.live_leases(name),
        "failed_documents": len(bad_ids),
        "failed_document_samples": [
            json_safe({key: entry.get(key) for key in ("id", "reason", "error")})
            for entry in errors[-VIEW_FAILED_DOCUMENTS:]
        ],
        "last_error": state.get("last_error"),
        "waits_for": list(state.get("waits_for") or []),
        "requires": list(state.get("requires") or []),
        "coordinator": json_safe(state.get("coordinator")),
        "round": state.get("round"),
        "plan": json_safe(
            {key: value for key, value in (state.get("plan") or {}).items() if key != "token"}
        ),
        "sharding": sharding_view(state),
        "created_at": _iso(state.get("created_at")),
        "started_at": _iso(state.get("started_at")),
        "completed_at": _iso(state.get("completed_at")),
        "failed_at": _iso(state.get("failed_at")),
        "updated_at": _iso(state.get("updated_at")),
        "last_progress_at": _iso(state.get("last_progress_at")),
    }


def sharding_view(state: Mapping[str, Any]) -> dict[str, Any] | None:
    """How the current plan split the collection: ``{mode, key, groups}``.

    ``mode`` is ``off`` (by ``_id``, not sharded or shard-awareness off),
    ``untargeted`` (sharded, split by ``_id``), ``chunks`` or ``sampled`` (along
    the shard key); ``None`` before the first plan.
    """
    plan = state.get("plan")
    if not plan:
        return None
    recorded = plan.get("sharding")
    if not recorded:
        return {"mode": "off"}
    return dict(json_safe(recorded))


def partition_view(partition: Mapping[str, Any]) -> dict[str, Any]:
    """One partition: scope, cursor, counters, and who holds it (never the lease token)."""
    lease = partition.get("lease") or {}
    holder = (
        {
            "owner": lease.get("owner"),
            "slot": lease.get("slot"),
            "renewed_at": _iso(lease.get("renewed_at")),
        }
        if lease
        else None
    )
    return {
        "id": str(partition["_id"]),
        "generation": partition.get("generation"),
        "index": partition.get("index"),
        "status": partition.get("status"),
        "scope": json_safe(partition.get("scope")),
        "group": partition.get("group"),
        "cursor": json_safe(partition.get("cursor")),
        "counters": dict(partition.get("counters") or {}),
        "failed_documents": len(partition.get("bad_ids") or []),
        "slice_failures": partition.get("slice_failures", 0),
        "last_error": partition.get("last_error"),
        "lease": holder,
        "updated_at": _iso(partition.get("updated_at")),
    }


def history_view(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The control history, oldest first: action, from, to, who, why, when."""
    return [json_safe(entry) for entry in state.get("history") or []]
