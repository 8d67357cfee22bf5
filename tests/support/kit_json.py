"""The kit's typed results as the JSON the CLI and the UI show, for assertions on that shape.

The kit returns typed results (``kit.background.status(name)`` a status view,
…); a test that checks the JSON shape (what ``--json`` prints) reads it here,
one ``to_dict()`` per result, instead of from the kit's deprecated dict names.
"""

from __future__ import annotations

from typing import Any

from migronaut_core import Migronaut


def status(kit: Migronaut, name: str | None = None) -> Any:
    """The JSON status of one background migration (None if unregistered), or of all."""
    if name is None:
        return [view.to_dict() for view in kit.background.statuses()]
    view = kit.background.status(name)
    return None if view is None else view.to_dict()


def run(kit: Migronaut, name: str, **options: Any) -> dict[str, Any]:
    """Drive ``name`` (``kit.background.run``); its JSON status view after."""
    view = kit.background.run(name, **options)
    return {"name": name, "status": "unregistered"} if view is None else view.to_dict()


def partitions(kit: Migronaut, name: str) -> list[dict[str, Any]]:
    """The JSON of the current pass's partitions."""
    return [partition.to_dict() for partition in kit.background.partitions(name)]


def history(kit: Migronaut, name: str) -> list[dict[str, Any]]:
    """The control history as JSON."""
    return [entry.to_dict() for entry in kit.background.history(name)]


def runnable(kit: Migronaut) -> list[dict[str, Any]]:
    """The runnable migrations as JSON: ``{migration, status}``."""
    return [row.to_dict() for row in kit.background.runnable()]


def verify(kit: Migronaut, **options: Any) -> dict[str, Any]:
    """A drift poll's report as JSON: ``{checked, drifted, skipped}``."""
    return kit.drift.verify(**options).to_dict()


def watch_status(kit: Migronaut, collection: str | None = None) -> Any:
    """The drift watchers' status as JSON: one row (None when none), or all."""
    if collection is None:
        return [row.to_dict() for row in kit.drift.watch_status()]
    row = kit.drift.watch_status(collection)
    return None if row is None else row.to_dict()


def converge_log(kit: Migronaut, **options: Any) -> list[dict[str, Any]]:
    """The converge log as JSON, newest first."""
    return [entry.to_dict() for entry in kit.runs.converge_log(**options)]


def unlock(kit: Migronaut, name: str, **options: Any) -> dict[str, Any]:
    """Unlock (``kit.background.control(name, "unlock")``): ``{lock, leases}``."""
    result = kit.background.control(name, "unlock", **options)
    return {"lock": result.lock, "leases": result.leases}
