"""What the deploy gate reads: a migration's status, the same query sync or async.

The kit's ``wait`` reads through the store; Airflow's ``BackgroundMigrationSensor``
trigger reads in the triggerer through pymongo's ``AsyncMongoClient`` (which cannot
share a :class:`~migronaut_core.background.store.BackgroundStore`), so the provider
never builds a query on migronaut's collections. One indexed read by ``_id``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.database import Database

from migronaut_core.config import BackgroundCollections

__all__ = ["read_migration_status", "read_migration_status_async"]

_STATUS_ONLY: Final[Mapping[str, int]] = {"status": 1}


def _status_of(state: Mapping[str, Any] | None) -> str | None:
    return None if state is None else str(state.get("status") or "unknown")


def read_migration_status(
    db: Database[dict[str, Any]], collections: BackgroundCollections, migration: str
) -> str | None:
    """The status of ``migration``; None when it is not registered."""
    return _status_of(db[collections.state].find_one({"_id": migration}, _STATUS_ONLY))


async def read_migration_status_async(
    db: AsyncDatabase[dict[str, Any]], collections: BackgroundCollections, migration: str
) -> str | None:
    """:func:`read_migration_status` through an ``AsyncMongoClient``'s database."""
    state = await db[collections.state].find_one({"_id": migration}, _STATUS_ONLY)
    return _status_of(state)
