"""Helpers for finalize-validator tests: step a migration to its soak, read validation options."""

from __future__ import annotations

from typing import Any

from pymongo.database import Database

from migronaut_core import Answer, Migronaut


def step(kit: Migronaut, name: str, *, limit: int = 50) -> Answer:
    """Step ``name`` until a coordinator step answers anything but ``process``, running the
    lanes' slices in this thread in between; that step's answer."""
    for _ in range(limit):
        answer = kit.background.coordinate(name)
        if answer.next != "process":
            return answer
        while kit.background.run_slice(name).outcome == "yielded":
            pass
    raise AssertionError(f"{name} kept processing after {limit} steps")


def validation(db: Database[dict[str, Any]], collection: str) -> dict[str, Any]:
    """The collection's validation options as ``listCollections`` gives them."""
    (info,) = db.list_collections(filter={"name": collection})
    options = info.get("options") or {}
    return {
        key: options[key]
        for key in ("validator", "validationLevel", "validationAction")
        if key in options
    }
