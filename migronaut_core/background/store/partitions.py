"""The partitions of a background migration's plans, and the leases lanes hold on them.

One concept, so one module: a plan's partitions are inserted and committed
(:meth:`PartitionDocuments.commit_plan`), claimed under a lease, checkpointed,
released, failed or reaped, and their counters summed for the state's roll-up.
Every method is one or a few atomic MongoDB operations; none reads then writes on
the client's say-so where a concurrent process could slip in between. The
invariants callers rely on (DESIGN §3.3):

- at most ``max_parallel`` live leases per migration, whatever the number of
  claimants: a lease takes a *slot*, and a unique partial index on
  ``(migration, lease.slot)`` lets only one partition hold each slot;
- with ``shard_concurrency``, at most that many live leases per shard group: a
  lease on a grouped partition also takes a *group slot*, unique per
  ``(migration, lease.group, lease.group_slot)``;
- every write a lane makes to its partition is fenced by its lease token
  (:class:`~migronaut_core.errors.LockLostError` when it no longer holds it);
- lease expiry is judged by the server's clock: leases record ``renewed_at``
  with ``$currentDate`` and expire ``ttl_ms`` after it, compared with ``$$NOW``;
- a plan commits by compare-and-set on generation, previous plan token, status
  and checksum;
- a pass's counters roll into the totals once per generation (``rolled_generation``).

Ids of failed documents live in ``bad_ids`` (later passes must skip them); they
never appear in messages or logs.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pymongo import ASCENDING, ReturnDocument
from pymongo.client_session import ClientSession
from pymongo.errors import DuplicateKeyError

from migronaut_core.background.store.states import (
    MAX_DOC_ERRORS,
    Document,
    StateDocuments,
)
from migronaut_core.clock import utc_now
from migronaut_core.errors import LockLostError
from migronaut_core.required_indexes import RequiredIndex

OPEN_STATUSES = ("pending", "running")


def _lease_expired() -> Document:
    """``$expr`` true for a partition whose lease lapsed by the server's clock."""
    return {"$lt": [{"$add": ["$lease.renewed_at", "$lease.ttl_ms"]}, "$$NOW"]}


def open_partitions_filter(name: str, *, generation: int, plan: str) -> Document:
    """The partitions of a plan that still have work (pending or running)."""
    return {
        "migration": name,
        "generation": generation,
        "plan": plan,
        "status": {"$in": list(OPEN_STATUSES)},
    }


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

    partition: Document | None = None
    lease: Lease | None = None
    exhausted: bool = False
    busy: bool = False
    #: Lapsed leases this attempt reaped first (their lanes died or stalled).
    reaped: int = 0


@dataclass(frozen=True, slots=True)
class PartitionCounts:
    pending: int = 0
    running: int = 0
    leased: int = 0
    done: int = 0
    failed: int = 0
    cancelled: int = 0
    superseded: int = 0

    @property
    def open(self) -> int:
        return self.pending + self.running

    def to_dict(self) -> dict[str, int]:
        return {
            "pending": self.pending,
            "running": self.running,
            "leased": self.leased,
            "done": self.done,
            "failed": self.failed,
            "cancelled": self.cancelled,
            "superseded": self.superseded,
        }


@dataclass(frozen=True, slots=True)
class GenerationTotals:
    """The counters of every partition of one generation, summed."""

    totals: dict[str, int]
    bad_ids: list[Any]
    doc_errors: list[Document]
    failed_partitions: int
    last_error: str | None


class PartitionDocuments(StateDocuments):
    """The partitions of background migrations, beside their state documents.

    A plan commits against its state (a compare-and-set), hence the base class.
    """

    def required_indexes(self) -> list[RequiredIndex]:
        """The indexes the invariants need (the slot caps) and the states' ones."""
        partitions = self.partitions.name
        return [
            RequiredIndex(
                partitions,
                (
                    ("migration", ASCENDING),
                    ("generation", ASCENDING),
                    ("plan", ASCENDING),
                    ("status", ASCENDING),
                ),
                name="migration_generation_plan_status",
            ),
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
            *super().required_indexes(),
        ]

    # -- plans -----------------------------------------------------------------------

    def commit_plan(
        self,
        name: str,
        *,
        generation: int,
        previous_token: str | None,
        new_pass: bool,
        expected: Mapping[str, Any],
        plan: Mapping[str, Any],
        scopes: Sequence[Mapping[str, Any]],
        fields: Mapping[str, Any],
    ) -> Document | None:
        """Insert a plan's partitions and point the state at it, if nobody planned first.

        A new pass starts a new generation; a replan keeps it (its superseded
        partitions' counters still count). Returns the state after, or None when
        the compare-and-set lost — its partitions are then removed (and any left
        by a crash in between are removed by :meth:`drop_foreign_plans`).
        """
        token = uuid.uuid4().hex
        target = generation + 1 if new_pass else generation
        now = utc_now()
        if scopes:
            self.partitions.insert_many(
                [
                    {
                        "migration": name,
                        "generation": target,
                        "plan": token,
                        "index": index,
                        "scope": dict(scope),
                        **({"group": scope["group"]} if "group" in scope else {}),
                        "status": "pending",
                        "cursor": {},
                        "counters": {},
                        "bad_ids": [],
                        "doc_errors": [],
                        "slice_failures": 0,
                        "created_at": now,
                        "updated_at": now,
                    }
                    for index, scope in enumerate(scopes)
                ],
                ordered=False,
            )
        condition: Document = {"generation": generation, **expected}
        condition["plan.token"] = (
            previous_token if previous_token is not None else {"$exists": False}
        )
        committed = self.cas(
            name,
            condition,
            {
                "$set": {
                    "generation": target,
                    "plan": {**plan, "token": token},
                    "phase": "process",
                    **fields,
                    "updated_at": now,
                }
            },
        )
        if committed is None:
            self.partitions.delete_many({"migration": name, "plan": token})
        return committed

    def drop_foreign_plans(self, name: str, token: str) -> int:
        """Remove never-claimed partitions of plans that lost a commit race."""
        result = self.partitions.delete_many(
            {
                "migration": name,
                "plan": {"$ne": token},
                "status": "pending",
                "lease": {"$exists": False},
                "counters.batches": {"$exists": False},
            }
        )
        return result.deleted_count

    def supersede(self, name: str, *, generation: int, plan: str) -> int:
        """Retire the open partitions of a plan being replaced (their counters still count)."""
        result = self.partitions.update_many(
            {
                "migration": name,
                "generation": generation,
                "plan": plan,
                "status": {"$in": list(OPEN_STATUSES)},
            },
            {"$set": {"status": "superseded", "updated_at": utc_now()}},
        )
        return result.modified_count

    def drop_generations(self, name: str, up_to: int) -> int:
        """Remove the partitions of generations ``<= up_to`` (their counters are rolled)."""
        result = self.partitions.delete_many({"migration": name, "generation": {"$lte": up_to}})
        return result.deleted_count

    def set_open_partitions(
        self,
        name: str,
        *,
        generation: int,
        plan: str,
        status: str,
        from_statuses: Sequence[str] = OPEN_STATUSES,
    ) -> int:
        """Move a plan's partitions in ``from_statuses`` to ``status`` (cancel, retry)."""
        update: Document = {"$set": {"status": status, "updated_at": utc_now()}}
        if status == "pending":
            update["$set"]["slice_failures"] = 0
            update["$unset"] = {"last_error": ""}
        result = self.partitions.update_many(
            {
                "migration": name,
                "generation": generation,
                "plan": plan,
                "status": {"$in": list(from_statuses)},
            },
            update,
        )
        return result.modified_count

    # -- leases ------------------------------------------------------------------------

    def reap(self, name: str) -> int:
        """Drop leases that lapsed by the server's clock; their partitions become claimable."""
        result = self.partitions.update_many(
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
        if shard_concurrency is not None:
            claim = self._claim_grouped(
                name,
                generation=generation,
                plan=plan,
                max_parallel=max_parallel,
                ttl_ms=ttl_ms,
                owner=owner,
                shard_concurrency=shard_concurrency,
            )
        else:
            claim = self._claim_one(
                name,
                generation=generation,
                plan=plan,
                max_parallel=max_parallel,
                ttl_ms=ttl_ms,
                owner=owner,
            )
        return replace(claim, reaped=reaped) if reaped else claim

    def _claim_one(
        self, name: str, *, generation: int, plan: str, max_parallel: int, ttl_ms: int, owner: str
    ) -> Claim:
        """:meth:`claim` capped by ``max_parallel`` alone."""
        claimable = {
            "migration": name,
            "generation": generation,
            "plan": plan,
            "status": {"$in": list(OPEN_STATUSES)},
            "lease": {"$exists": False},
        }
        if self.partitions.count_documents(claimable, limit=1) == 0:
            return Claim(exhausted=True)
        held = {
            doc["lease"]["slot"]
            for doc in self.partitions.find(
                {"migration": name, "lease.slot": {"$exists": True}}, {"lease.slot": 1}
            )
        }
        for slot in (slot for slot in range(max_parallel) if slot not in held):
            lease = Lease(
                partition_id=None, token=uuid.uuid4().hex, owner=owner, slot=slot, ttl_ms=ttl_ms
            )
            try:
                doc = self.partitions.find_one_and_update(
                    claimable,
                    {
                        "$set": {
                            "status": "running",
                            "lease.token": lease.token,
                            "lease.owner": owner,
                            "lease.slot": slot,
                            "lease.ttl_ms": ttl_ms,
                            "updated_at": utc_now(),
                        },
                        "$currentDate": {"lease.renewed_at": True, "lease.claimed_at": True},
                    },
                    sort=[("status", ASCENDING), ("index", ASCENDING)],
                    return_document=ReturnDocument.AFTER,
                )
            except DuplicateKeyError:
                continue  # another lane took this slot first
            if doc is None:
                return Claim(exhausted=True)
            return Claim(
                partition=doc,
                lease=Lease(doc["_id"], lease.token, owner, slot, ttl_ms),
            )
        return Claim(busy=True)

    def _claim_grouped(
        self,
        name: str,
        *,
        generation: int,
        plan: str,
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
        claimable = {
            "migration": name,
            "generation": generation,
            "plan": plan,
            "status": {"$in": list(OPEN_STATUSES)},
            "lease": {"$exists": False},
        }
        for _ in range(max_parallel + shard_concurrency + 8):
            groups = {
                row["_id"]: row["first"]
                for row in self.partitions.aggregate(
                    [
                        {"$match": claimable},
                        {"$group": {"_id": "$group", "first": {"$min": "$index"}}},
                    ]
                )
            }
            if not groups:
                return Claim(exhausted=True)
            held: set[int] = set()
            group_held: dict[str, set[int]] = {}
            for leased in self.partitions.find(
                {"migration": name, "lease.slot": {"$exists": True}},
                {"lease.slot": 1, "lease.group": 1, "lease.group_slot": 1},
            ):
                lease = leased["lease"]
                held.add(lease["slot"])
                if "group_slot" in lease:
                    group_held.setdefault(lease.get("group"), set()).add(lease["group_slot"])
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
            fields: Document = {
                "status": "running",
                "lease.token": uuid.uuid4().hex,
                "lease.owner": owner,
                "lease.slot": free[0],
                "lease.ttl_ms": ttl_ms,
                "updated_at": utc_now(),
            }
            target = {**claimable, "group": {"$exists": False} if group is None else group}
            if group is not None:
                taken = group_held.get(group, set())
                fields["lease.group"] = group
                fields["lease.group_slot"] = next(
                    slot for slot in range(shard_concurrency) if slot not in taken
                )
            try:
                doc = self.partitions.find_one_and_update(
                    target,
                    {
                        "$set": fields,
                        "$currentDate": {"lease.renewed_at": True, "lease.claimed_at": True},
                    },
                    sort=[("status", ASCENDING), ("index", ASCENDING)],
                    return_document=ReturnDocument.AFTER,
                )
            except DuplicateKeyError:
                continue  # another lane took the slot or the group slot first
            if doc is None:
                continue  # that group's partitions were taken meanwhile
            return Claim(
                partition=doc,
                lease=Lease(doc["_id"], fields["lease.token"], owner, free[0], ttl_ms, group=group),
            )
        return Claim(busy=True)

    def _fenced(self, lease: Lease) -> Document:
        return {"_id": lease.partition_id, "lease.token": lease.token}

    def renew(self, lease: Lease) -> bool:
        """Extend a lease; False when it was reaped or taken over."""
        result = self.partitions.update_one(
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
        result = self.partitions.update_one(self._fenced(lease), update, session=session)
        if result.matched_count != 1:
            raise _lost(lease)

    def record_intent(self, lease: Lease, ids: Sequence[Any]) -> None:
        """Note the ids a batch is about to write, before it writes them.

        If the lane dies between its writes and its checkpoint, the next holder of
        the partition counts which of them were rewritten (:meth:`settle_inflight`),
        so the totals stay exact across ``kill -9``.

        :raises LockLostError: the lease is not ours any more; nothing was written.
        """
        result = self.partitions.update_one(
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
        result = self.partitions.update_one(self._fenced(lease), update)
        if result.matched_count != 1:
            raise _lost(lease)

    def release(self, lease: Lease) -> bool:
        """Give a partition back (work left on it); False if the lease was already gone."""
        result = self.partitions.update_one(
            self._fenced(lease), {"$unset": {"lease": ""}, "$set": {"updated_at": utc_now()}}
        )
        return result.matched_count == 1

    def fail_slice(self, lease: Lease, *, error: str, max_slice_failures: int) -> bool:
        """Count a failed slice on its partition; True when that failed the partition."""
        doc = self.partitions.find_one_and_update(
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
        self.partitions.update_one(
            {"_id": doc["_id"], "status": "running", "lease": {"$exists": False}},
            {"$set": {"status": "failed"}},
        )
        return True

    def fail_partition(self, lease: Lease, *, error: str) -> None:
        self.partitions.update_one(
            self._fenced(lease),
            {
                "$set": {"status": "failed", "last_error": error, "updated_at": utc_now()},
                "$unset": {"lease": ""},
            },
        )

    def unlock_all(self, name: str) -> int:
        """Drop every lease of a migration (an operator's unlock); their lanes stop at once."""
        result = self.partitions.update_many(
            {"migration": name, "lease": {"$exists": True}}, {"$unset": {"lease": ""}}
        )
        return result.modified_count

    # -- reading partitions ----------------------------------------------------------

    def live_leases(self, name: str) -> int:
        """Leases not lapsed by the server's clock, over every generation."""
        return self.partitions.count_documents(live_leases_filter(name))

    def has_live_lease(self, name: str) -> bool:
        """Whether any lease of the migration has not lapsed by the server's clock."""
        return self.partitions.count_documents(live_leases_filter(name), limit=1) > 0

    def last_partition_write(self, name: str) -> Any:
        """When a lane last wrote any partition of the migration (claim, checkpoint, release),
        as stored (a datetime), or None when it has none."""
        latest = self.partitions.find_one(
            {"migration": name}, projection={"updated_at": 1}, sort=[("updated_at", -1)]
        )
        return None if latest is None else latest.get("updated_at")

    def partition_counts(self, name: str, *, generation: int, plan: str) -> PartitionCounts:
        rows = self.partitions.aggregate(
            [
                {"$match": {"migration": name, "generation": generation, "plan": plan}},
                {
                    "$group": {
                        "_id": "$status",
                        "n": {"$sum": 1},
                        "leased": {"$sum": {"$cond": [{"$gt": ["$lease", None]}, 1, 0]}},
                    }
                },
            ]
        )
        counts: dict[str, int] = {"leased": 0}
        for row in rows:
            counts[row["_id"]] = row["n"]
            counts["leased"] += row["leased"]
        known = {key: value for key, value in counts.items() if key in PartitionCounts.__slots__}
        return PartitionCounts(**known)

    def list_partitions(self, name: str, *, generation: int | None = None) -> list[Document]:
        query: Document = {"migration": name}
        if generation is not None:
            query["generation"] = generation
        return list(self.partitions.find(query).sort([("generation", 1), ("index", 1)]))

    def count_bad_ids(self, name: str, generation: int) -> int:
        """Failed documents so far: those rolled into the state plus this generation's."""
        rows = list(
            self.partitions.aggregate(
                [
                    {"$match": {"migration": name, "generation": generation}},
                    {
                        "$group": {
                            "_id": None,
                            "n": {"$sum": {"$size": {"$ifNull": ["$bad_ids", []]}}},
                        }
                    },
                ]
            )
        )
        state = self.get(name, projection={"bad_ids": 1})
        rolled = len(state.get("bad_ids", [])) if state else 0
        return rolled + (rows[0]["n"] if rows else 0)

    def generation_totals(self, name: str, generation: int) -> GenerationTotals:
        """Sum the counters of every partition of a generation, whatever its status."""
        totals: dict[str, int] = {}
        bad_ids: list[Any] = []
        doc_errors: list[Document] = []
        failed = 0
        last_error = None
        for doc in self.partitions.find({"migration": name, "generation": generation}):
            for key, value in (doc.get("counters") or {}).items():
                totals[key] = totals.get(key, 0) + int(value)
            bad_ids.extend(doc.get("bad_ids") or [])
            doc_errors.extend(doc.get("doc_errors") or [])
            if doc.get("status") == "failed":
                failed += 1
                last_error = doc.get("last_error") or last_error
        return GenerationTotals(totals, bad_ids, doc_errors[-MAX_DOC_ERRORS:], failed, last_error)


def _lost(lease: Lease) -> LockLostError:
    return LockLostError(
        "the partition lease was lost (it expired or was reaped); this lane stops without writing",
        {"slot": lease.slot},
    )
