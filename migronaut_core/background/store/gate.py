"""What the deploy gate reads of a migration's state, the same query sync or async.

The kit's ``wait`` reads through the store; Airflow's ``BackgroundMigrationSensor``
trigger reads in the triggerer through pymongo's ``AsyncMongoClient`` (which cannot
share a :class:`~migronaut_core.background.store.BackgroundStore`), so the provider
never builds a query on migronaut's collections. One indexed read by ``_id``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.database import Database

from migronaut_core.config import BackgroundCollections

__all__ = ["GateSnapshot", "read_gate", "read_gate_async"]


@dataclass(frozen=True, slots=True)
class GateSnapshot:
    """What the gate reads of a migration's state; ``status`` None: not registered.

    :param direction: ``forward``, or ``revert`` once ``down`` or an undo reverts it.
    :param phase: the state's phase (``finalize`` while a validator soaks).
    :param validator_phase: its validator's phase (``recorded``, ``warn``, ``error``),
        None when it declares none or none was set yet.
    """

    status: str | None
    direction: str = "forward"
    phase: str | None = None
    validator_phase: str | None = None


_GATE_FIELDS: Final[Mapping[str, int]] = {
    "status": 1,
    "direction": 1,
    "phase": 1,
    "validator.phase": 1,
}


def _snapshot(state: Mapping[str, Any] | None) -> GateSnapshot:
    if state is None:
        return GateSnapshot(status=None)
    validator = state.get("validator")
    return GateSnapshot(
        status=str(state.get("status") or "unknown"),
        direction=str(state.get("direction") or "forward"),
        phase=state.get("phase"),
        validator_phase=validator.get("phase") if isinstance(validator, Mapping) else None,
    )


def read_gate(
    db: Database[dict[str, Any]], collections: BackgroundCollections, migration: str
) -> GateSnapshot:
    """What the gate judges of ``migration`` (status None: not registered)."""
    return _snapshot(db[collections.state].find_one({"_id": migration}, _GATE_FIELDS))


async def read_gate_async(
    db: AsyncDatabase[dict[str, Any]], collections: BackgroundCollections, migration: str
) -> GateSnapshot:
    """:func:`read_gate` through an ``AsyncMongoClient``'s database."""
    return _snapshot(await db[collections.state].find_one({"_id": migration}, _GATE_FIELDS))
