"""The leases lanes hold on partitions: claims, renewals and every write fenced by one.

The invariants callers rely on (DESIGN §3.3):

- at most ``max_parallel`` live leases per migration, whatever the number of
  claimants: a lease takes a *slot*, and a unique partial index on
  ``(migration, lease.slot)`` lets only one partition hold each slot;
- with ``shard_concurrency``, at most that many live leases per shard group: a
  lease on a grouped partition also takes a *group slot*, unique per
  ``(migration, lease.group, lease.group_slot)``;
- every write a lane makes to its partition is fenced by its lease token
  (:class:`~migronaut_core.errors.LockLostError` when it no longer holds it);
- lease expiry is judged by the server's clock: leases record ``renewed_at``
  with ``$currentDate`` and expire ``ttl_ms`` after it, compared with ``$$NOW``.

A lease lives on its partition document (``lease``), so :class:`Leases` works
on the partitions collection; :mod:`.partitions` owns the rest of it.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from pymongo import ASCENDING, ReturnDocument
from pymongo.client_session import ClientSession
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import DuplicateKeyError

from migronaut_core.background.store.documents import PartitionDocument
from migronaut_core.background.store.partitions import OPEN_STATUSES, as_rows
from migronaut_core.background.store.states import MAX_DOC_ERRORS, Document
from migronaut_core.clock import utc_now
from migronaut_core.config import BackgroundCollections
from migronaut_core.errors import LockLostError
from migronaut_core.required_indexes import RequiredIndex


def _lease_expired() -> Document:
    """``$expr`` true for a partition whose lease lapsed by the server's clock."""
    return {"$lt": [{"$add": ["$lease.renewed_at", "$lease.ttl_ms"]}, "$$NOW"]}


def live_leases_filter(name: str) -> Document:
    """Partitions whose lease has not lapsed by the server's clock."""
    return {"migration": name, "lease": {"$exists": True}, "$expr": {"$not": [_lease_expired()]}}


@dataclass(frozen=True, slots=True)
class Lease:
    """A lane's hold on one partition: the token fences every write it makes."""

    partition_id: Any
    token: str
    owner: str
    slot: int
    ttl_ms: int
    group: str | None = None


@dataclass(frozen=True, slots=True)
class Claim:
    """What a claim attempt got: a partition and its lease, or why not."""

    partition: PartitionDocument | None = None
    lease: Lease | None = None
    exhausted: bool = False
    busy: bool = False
    #: Lapsed leases this attempt reaped first (their lanes died or stalled).
    reaped: int = 0


def _claimable(name: str, generation: int, plan: str) -> Document:
    """The open partitions of a plan that no lease holds."""
    return {
        "migration": name,
        "generation": generation,
        "plan": plan,
        "status": {"$in": list(OPEN_STATUSES)},
        "lease": {"$exists": False},
    }


def _lease_fields(owner: str, slot: int, ttl_ms: int) -> Document:
    """The ``$set`` of a claim: a fresh token on ``slot`` (a grouped claim adds its group slot)."""
    return {
        "status": "running",
        "lease.token": uuid.uuid4().hex,
        "lease.owner": owner,
        "lease.slot": slot,
        "lease.ttl_ms": ttl_ms,
        "updated_at": utc_now(),
    }


class Leases:
    """The leases on the partitions of background migrations in one database."""

    def __init__(self, db: Database[Document], names: BackgroundCollections) -> None:
        self.collection = cast("Collection[PartitionDocument]", db[names.partitions])

    def required_indexes(self) -> list[RequiredIndex]:
        """The unique indexes that cap live leases (the slots and the group slots)."""
        partitions = self.collection.name
        return [
            RequiredIndex(
                partitions,
                (("migration", ASCENDING), ("lease.slot", ASCENDING)),
                name="one_lease_per_slot",
                unique=True,
                partial={"lease.slot": {"$exists": True}},
            ),
            RequiredIndex(
                partitions,
                (
                    ("migration", ASCENDING),
                    ("lease.group", ASCENDING),
                    ("lease.group_slot", ASCENDING),
                ),
                name="one_lease_per_group_slot",
                unique=True,
                partial={"lease.group_slot": {"$exists": True}},
            ),
        ]

    # -- claims ------------------------------------------------------------------------

    def reap(self, name: str) -> int:
        """Drop leases that lapsed by the server's clock; their partitions become claimable."""
        result = self.collection.update_many(
            {"migration": name, "lease": {"$exists": True}, "$expr": _lease_expired()},
            {"$unset": {"lease": ""}, "$set": {"updated_at": utc_now()}},
        )
        return result.modified_count

    def claim(
        self,
        name: str,
        *,
        generation: int,
        plan: str,
        max_parallel: int,
        ttl_ms: int,
        owner: str,
        shard_concurrency: int | None = None,
    ) -> Claim:
        """Lease one open partition of the plan on a free slot.

        Exhausted: no open partition lacks a lease. Busy: open partitions are
        left, but every slot is held (or was taken while we tried).

        :param shard_concurrency: also cap the live leases of each partition
            ``group`` (a shard) at this many; partitions without a group are
            capped by ``max_parallel`` alone.
        """
        reaped = self.reap(name)
        claimable = _claimable(name, generation, plan)
        if shard_concurrency is not None:
            claim = self._claim_grouped(
                name, claimable, max_parallel, ttl_ms, owner, shard_concurrency
            )
        else:
            claim = self._claim_one(name, claimable, max_parallel, ttl_ms, owner)
        return replace(claim, reaped=reaped) if reaped else claim

    def _claim_one(
        self, name: str, claimable: Document, max_parallel: int, ttl_ms: int, owner: str
    ) -> Claim:
        """:meth:`claim` capped by ``max_parallel`` alone: each free slot in turn."""
        if self.collection.count_documents(claimable, limit=1) == 0:
            return Claim(exhausted=True)
        held, _ = self._held_slots(name)
        for slot in (slot for slot in range(max_parallel) if slot not in held):
            fields = _lease_fields(owner, slot, ttl_ms)
            try:
                doc = self._take(claimable, fields)
            except DuplicateKeyError:
                continue  # another lane took this slot first
            if doc is None:
                return Claim(exhausted=True)
            return _claimed(doc, fields)
        return Claim(busy=True)

    def _claim_grouped(
        self,
        name: str,
        claimable: Document,
        max_parallel: int,
        ttl_ms: int,
        owner: str,
        shard_concurrency: int,
    ) -> Claim:
        """:meth:`claim` with a cap per group: a grouped lease takes a group slot too.

        The least busy group (then the one whose first open partition comes
        first) is tried first, so lanes spread over the shards. Both slots are
        taken by one update, guarded by two unique indexes: two claimants that
        race for either slot cannot both win it.
        """
        for _ in range(max_parallel + shard_concurrency + 8):
            groups = {
                row["_id"]: row["first"]
                for row in as_rows(self.collection).aggregate(
                    [
                        {"$match": claimable},
                        {"$group": {"_id": "$group", "first": {"$min": "$index"}}},
                    ]
                )
            }
            if not groups:
                return Claim(exhausted=True)
            held, group_held = self._held_slots(name)
            free = [slot for slot in range(max_parallel) if slot not in held]
            candidates = sorted(
                (
                    (len(group_held.get(group, ())), first, group)
                    for group, first in groups.items()
                    if group is None or len(group_held.get(group, ())) < shard_concurrency
                ),
                key=lambda row: (row[0], row[1]),
            )
            if not free or not candidates:
                return Claim(busy=True)
            _, _, group = candidates[0]
            fields = _lease_fields(owner, free[0], ttl_ms)
            target = {**claimable, "group": {"$exists": False} if group is None else group}
            if group is not None:
                taken = group_held.get(group, set())
                fields["lease.group"] = group
                fields["lease.group_slot"] = next(
                    slot for slot in range(shard_concurrency) if slot not in taken
                )
            try:
                doc = self._take(target, fields)
            except DuplicateKeyError:
                continue  # another lane took the slot or the group slot first
            if doc is None:
                continue  # that group's partitions were taken meanwhile
            return _claimed(doc, fields, group=group)
        return Claim(busy=True)

    def _held_slots(self, name: str) -> tuple[set[int], dict[Any, set[int]]]:
        """The slots leases of the migration hold, and the group slots by group."""
        held: set[int] = set()
        group_held: dict[Any, set[int]] = {}
        for leased in self.collection.find(
            {"migration": name, "lease.slot": {"$exists": True}},
            {"lease.slot": 1, "lease.group": 1, "lease.group_slot": 1},
        ):
            lease = leased["lease"]
            held.add(lease["slot"])
            if "group_slot" in lease:
                group_held.setdefault(lease.get("group"), set()).add(lease["group_slot"])
        return held, group_held

    def _take(self, target: Document, fields: Document) -> PartitionDocument | None:
        """Lease the first partition matching ``target`` (pending before running, by index).

        :raises DuplicateKeyError: a slot in ``fields`` was taken meanwhile.
        """
        return self.collection.find_one_and_update(
            target,
            {
                "$set": fields,
                "$currentDate": {"lease.renewed_at": True, "lease.claimed_at": True},
            },
            sort=[("status", ASCENDING), ("index", ASCENDING)],
            return_document=ReturnDocument.AFTER,
        )

    # -- writes fenced by a lease ------------------------------------------------------

    def _fenced(self, lease: Lease) -> Document:
        return {"_id": lease.partition_id, "lease.token": lease.token}

    def renew(self, lease: Lease) -> bool:
        """Extend a lease; False when it was reaped or taken over."""
        result = self.collection.update_one(
            self._fenced(lease), {"$currentDate": {"lease.renewed_at": True}}
        )
        return result.matched_count == 1

    def checkpoint(
        self,
        lease: Lease,
        *,
        cursor: Mapping[str, Any],
        counters: Mapping[str, int],
        bad_ids: Sequence[Any] = (),
        doc_errors: Sequence[Mapping[str, Any]] = (),
        done: bool = False,
        throttle: Mapping[str, Any] | None = None,
        fields: Mapping[str, Any] | None = None,
        session: ClientSession | None = None,
        intent: Sequence[Any] = (),
    ) -> None:
        """Record a batch's progress, fenced by the lease; ``done`` releases the partition.

        :param intent: the ids the next batch is about to write (see
            :meth:`record_intent`), noted in the same write.
        :raises LockLostError: the lease is not ours any more; nothing was written.
        """
        update: Document = {
            "$set": {"cursor": dict(cursor), "updated_at": utc_now()},
            "$currentDate": {"lease.renewed_at": True},
        }
        increments = {f"counters.{key}": value for key, value in counters.items() if value}
        if increments:
            update["$inc"] = increments
        if bad_ids:
            update["$push"] = {
                "bad_ids": {"$each": list(bad_ids)},
                "doc_errors": {"$each": list(doc_errors), "$slice": -MAX_DOC_ERRORS},
            }
        if throttle is not None:
            update["$set"]["throttle"] = dict(throttle)
        if fields:
            update["$set"].update(fields)
        unset: Document = {}
        if intent:
            update["$set"]["inflight"] = {"ids": list(intent)}
        else:
            unset["inflight"] = ""
        if done:
            update["$set"]["status"] = "done"
            unset["lease"] = ""
            del update["$currentDate"]
        if unset:
            update["$unset"] = unset
        result = self.collection.update_one(self._fenced(lease), update, session=session)
        if result.matched_count != 1:
            raise _lost(lease)

    def record_intent(self, lease: Lease, ids: Sequence[Any]) -> None:
        """Note the ids a batch is about to write, before it writes them.

        If the lane dies between its writes and its checkpoint, the next holder of
        the partition counts which of them were rewritten (:meth:`settle_inflight`),
        so the totals stay exact across ``kill -9``.

        :raises LockLostError: the lease is not ours any more; nothing was written.
        """
        result = self.collection.update_one(
            self._fenced(lease),
            {"$set": {"inflight": {"ids": list(ids)}}, "$currentDate": {"lease.renewed_at": True}},
        )
        if result.matched_count != 1:
            raise _lost(lease)

    def settle_inflight(self, lease: Lease, *, migrated: int, intent: Sequence[Any] = ()) -> None:
        """Count what a dead lane's last batch rewrote, and note the batch about to be
        written in its place (``intent``), or forget the note."""
        update: Document = {"$unset": {"inflight": ""}}
        if intent:
            update = {"$set": {"inflight": {"ids": list(intent)}}}
        if migrated:
            update["$inc"] = {"counters.migrated": migrated, "counters.scanned": migrated}
        result = self.collection.update_one(self._fenced(lease), update)
        if result.matched_count != 1:
            raise _lost(lease)

    def release(self, lease: Lease) -> bool:
        """Give a partition back (work left on it); False if the lease was already gone."""
        result = self.collection.update_one(
            self._fenced(lease), {"$unset": {"lease": ""}, "$set": {"updated_at": utc_now()}}
        )
        return result.matched_count == 1

    def fail_slice(self, lease: Lease, *, error: str, max_slice_failures: int) -> bool:
        """Count a failed slice on its partition; True when that failed the partition."""
        doc = self.collection.find_one_and_update(
            self._fenced(lease),
            {
                "$inc": {"slice_failures": 1},
                "$set": {"last_error": error, "updated_at": utc_now()},
                "$unset": {"lease": ""},
            },
            return_document=ReturnDocument.AFTER,
        )
        if doc is None or doc.get("slice_failures", 0) < max_slice_failures:
            return False
        self.collection.update_one(
            {"_id": doc["_id"], "status": "running", "lease": {"$exists": False}},
            {"$set": {"status": "failed"}},
        )
        return True

    def fail_partition(self, lease: Lease, *, error: str) -> None:
        self.collection.update_one(
            self._fenced(lease),
            {
                "$set": {"status": "failed", "last_error": error, "updated_at": utc_now()},
                "$unset": {"lease": ""},
            },
        )

    def unlock_all(self, name: str) -> int:
        """Drop every lease of a migration (an operator's unlock); their lanes stop at once."""
        result = self.collection.update_many(
            {"migration": name, "lease": {"$exists": True}}, {"$unset": {"lease": ""}}
        )
        return result.modified_count

    # -- reading leases -------------------------------------------------------------------

    def live_leases(self, name: str) -> int:
        """Leases not lapsed by the server's clock, over every generation."""
        return self.collection.count_documents(live_leases_filter(name))

    def has_live_lease(self, name: str) -> bool:
        """Whether any lease of the migration has not lapsed by the server's clock."""
        return self.collection.count_documents(live_leases_filter(name), limit=1) > 0


def _claimed(doc: PartitionDocument, fields: Document, *, group: str | None = None) -> Claim:
    """The claim of ``doc``, leased with the ``$set`` of :func:`_lease_fields`."""
    lease = Lease(
        doc["_id"],
        fields["lease.token"],
        fields["lease.owner"],
        fields["lease.slot"],
        fields["lease.ttl_ms"],
        group=group,
    )
    return Claim(partition=doc, lease=lease)


def _lost(lease: Lease) -> LockLostError:
    return LockLostError(
        "the partition lease was lost (it expired or was reaped); this lane stops without writing",
        {"slot": lease.slot},
    )
