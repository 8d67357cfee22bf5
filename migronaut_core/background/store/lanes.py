"""What a waiting task reads of one pass's lanes: one snapshot, the same queries sync or async.

Airflow's ``wait_for_lanes`` sensor polls from a worker (pymongo) and, deferred,
from the triggerer (pymongo's ``AsyncMongoClient``, which cannot share a
:class:`~migronaut_core.background.store.BackgroundStore`). Both read through
here, so the provider never builds a query on migronaut's collections and both
modes see exactly what the other would. Reads only; four small indexed reads
at most, the partition reads only while the pass is still running, the hold's
only while no lease is live.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.database import Database

from migronaut_core.background.store.documents import StateDocument
from migronaut_core.background.store.leases import live_leases_filter
from migronaut_core.background.store.partitions import open_partitions_filter
from migronaut_core.background.store.states import LANES_STATE_PROJECTION, holding_filter
from migronaut_core.config import BackgroundCollections

__all__ = ["LanesSnapshot", "read_lanes", "read_lanes_async"]

_ID_ONLY = {"_id": 1}


@dataclass(frozen=True, slots=True)
class LanesSnapshot:
    """One look at a pass: where the migration stands and whether its lanes still work.

    :param status: the migration's status; ``None`` when it is not registered.
    :param same_pass: the state's generation and plan token are the pass waited on.
    :param open_partitions: the pass has pending or running partitions (``None``:
        not read, because the migration is not running that pass).
    :param live_lease: a lease of the migration is live (server clock).
    :param held: no lease is live because the lanes hold on purpose: no maintenance
        window is open, or a health signal is past its hard limit (the state's
        ``hold``, current by the server's clock); read only when no lease is live.
    """

    status: str | None
    same_pass: bool
    open_partitions: bool | None = None
    live_lease: bool = False
    held: bool = False

    @property
    def running_this_pass(self) -> bool:
        """Whether the partitions are worth reading: running, on the pass waited on."""
        return self.status == "running" and self.same_pass


def _from_state(state: StateDocument | None, generation: int, plan: str) -> LanesSnapshot:
    if state is None:
        return LanesSnapshot(status=None, same_pass=False)
    recorded = state.get("plan")
    token = recorded.get("token") if isinstance(recorded, Mapping) else None
    same = state.get("generation") == generation and token == plan
    return LanesSnapshot(status=str(state.get("status") or "unknown"), same_pass=same)


def read_lanes(
    db: Database[dict[str, Any]],
    collections: BackgroundCollections,
    migration: str,
    *,
    generation: int,
    plan: str,
) -> LanesSnapshot:
    """Look once at the lanes of pass (``generation``, ``plan``) of ``migration``."""
    state = db[collections.state].find_one({"_id": migration}, LANES_STATE_PROJECTION)
    snapshot = _from_state(cast("StateDocument | None", state), generation, plan)
    if not snapshot.running_this_pass:
        return snapshot
    partitions = db[collections.partitions]
    open_filter = open_partitions_filter(migration, generation=generation, plan=plan)
    has_open = partitions.find_one(open_filter, _ID_ONLY) is not None
    live = has_open and partitions.find_one(live_leases_filter(migration), _ID_ONLY) is not None
    held = (
        has_open
        and not live
        and db[collections.state].find_one(holding_filter(migration), _ID_ONLY) is not None
    )
    return LanesSnapshot(snapshot.status, True, has_open, live, held)


async def read_lanes_async(
    db: AsyncDatabase[dict[str, Any]],
    collections: BackgroundCollections,
    migration: str,
    *,
    generation: int,
    plan: str,
) -> LanesSnapshot:
    """:func:`read_lanes` through an ``AsyncMongoClient``'s database."""
    state = await db[collections.state].find_one({"_id": migration}, LANES_STATE_PROJECTION)
    snapshot = _from_state(cast("StateDocument | None", state), generation, plan)
    if not snapshot.running_this_pass:
        return snapshot
    partitions = db[collections.partitions]
    open_filter = open_partitions_filter(migration, generation=generation, plan=plan)
    has_open = await partitions.find_one(open_filter, _ID_ONLY) is not None
    live = (
        has_open and await partitions.find_one(live_leases_filter(migration), _ID_ONLY) is not None
    )
    held = (
        has_open
        and not live
        and await db[collections.state].find_one(holding_filter(migration), _ID_ONLY) is not None
    )
    return LanesSnapshot(snapshot.status, True, has_open, live, held)
