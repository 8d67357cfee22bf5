"""Audit of the background side: what needs an operator's look, read-only.

:func:`audit` reports, never changes anything:

- ``checksum_changed`` — a registered migration's file changed since it was
  registered (the stored spec still stands; ``repin`` pins the new file);
- ``file_missing`` — a registered migration's file is gone;
- ``stalled`` — a running migration made no progress and saw no coordinator
  for a long time, and no lane holds a live lease;
- ``missing_version_index`` — the collection of a declarative migration has no
  index a drift probe can read through (neither the version index nor one led
  by the version field ascending:
  :func:`~migronaut_core.background.indexes.has_probe_index`), so every pass
  and drift probe scans it;
- ``dead_watcher`` — a watcher row says ``streaming``/``starting`` but its
  leader stopped writing it (only when a watcher is expected: drift mode
  ``stream``/``both``).

Each is a :class:`~migronaut_core.audit.Finding`, the one shape of the general
audit (``migronaut audit``), which folds these in.
Messages name migrations, collections, fields and times, never document values.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from migronaut_core import files
from migronaut_core.audit import Finding
from migronaut_core.background.coordinator import STALL_SECONDS, stalled_for
from migronaut_core.background.indexes import has_probe_index
from migronaut_core.background.runtime import Runtime
from migronaut_core.background.spec import REWRITING_MODES
from migronaut_core.background.store import STREAMING_FRESH_SECONDS, StateDocument, WatchStore
from migronaut_core.clock import utc_now
from migronaut_core.errors import MigronautError

__all__ = ["STALE_AFTER_SECONDS", "audit"]

#: A running migration without progress for this long (and no live lease) is stalled.
STALE_AFTER_SECONDS = STALL_SECONDS


def audit(
    rt: Runtime,
    *,
    migrations_dir: Path,
    watch: WatchStore | None = None,
    stale_after_seconds: float = STALE_AFTER_SECONDS,
    now: datetime | None = None,
) -> list[Finding]:
    """Every finding of the background side, migrations first, then watchers.

    :param watch: the watcher rows to check for dead leaders (None: no watcher
        expected, drift mode ``poll``).
    :param stale_after_seconds: how long without progress makes a running
        migration stalled.
    """
    at = now or utc_now()
    findings: list[Finding] = []
    indexed: dict[tuple[str, str], bool] = {}
    for state in rt.store.states.list_states():
        findings.extend(_file_findings(state, migrations_dir))
        if state.get("status") == "running":
            findings.extend(_stall_findings(rt, state, at, stale_after_seconds))
        findings.extend(_index_findings(rt, state, indexed))
    if watch is not None:
        findings.extend(_watch_findings(watch))
    return findings


def _file_findings(state: StateDocument, migrations_dir: Path) -> Iterator[Finding]:
    name = state["_id"]
    collection = state.get("collection")
    try:
        file = files.find(migrations_dir, name)
    except MigronautError:
        yield Finding(
            "file_missing",
            name,
            collection,
            f"{name} is registered but its file {name}.py is not in {migrations_dir}",
            "error",
        )
        return
    registered = state.get("checksum")
    if registered and file.checksum() != registered:
        yield Finding(
            "checksum_changed",
            name,
            collection,
            f"{name}.py changed since {name} was registered; it runs as registered "
            "(`migronaut background repin` pins the file on disk)",
            "warning",
        )


def _stall_findings(
    rt: Runtime, state: StateDocument, at: datetime, stale_after_seconds: float
) -> Iterator[Finding]:
    name = state["_id"]
    idle = stalled_for(rt, state, now=at)
    if idle is None or idle < timedelta(seconds=stale_after_seconds):
        return
    minutes = idle.total_seconds() / 60
    yield Finding(
        "stalled",
        name,
        state.get("collection"),
        f"{name} is running but made no progress and saw no coordinator for "
        f"{minutes:.0f} minutes, and no lane holds a lease (is its driver running?)",
        "warning",
    )


def _index_findings(
    rt: Runtime, state: StateDocument, indexed: dict[tuple[str, str], bool]
) -> Iterator[Finding]:
    spec = state.get("spec") or {}
    collection = spec.get("collection") or state.get("collection")
    field = spec.get("field")
    if state.get("mode", spec.get("mode")) not in REWRITING_MODES or not collection or not field:
        return
    key = (collection, field)
    if key not in indexed:
        indexed[key] = has_probe_index(rt, collection, field)
    if not indexed[key]:
        yield Finding(
            "missing_version_index",
            state["_id"],
            collection,
            f"{collection} has no {{{field}: 1, _id: 1}} index (nor any led by {field}): "
            f"passes and drift probes of {state['_id']} scan the collection "
            "(create it, or declare versioning and run `migronaut converge`)",
            "warning",
        )


def _watch_findings(watch: WatchStore) -> Iterator[Finding]:
    for row in watch.statuses():
        if row.get("state") in ("streaming", "starting") and not row.get("fresh"):
            leader: Mapping[str, Any] = row.get("leader") or {}
            where = f"{leader.get('host') or '?'} pid {leader.get('pid') or '?'}"
            yield Finding(
                "dead_watcher",
                None,
                row["_id"],
                f"the watcher of {row['_id']} says {row['state']} but its leader ({where}) "
                f"has not written for over {STREAMING_FRESH_SECONDS:.0f} s; "
                "start a watcher again (`migronaut background watch`)",
                "error",
            )
