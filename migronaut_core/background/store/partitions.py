"""The partitions of a background migration's plans.

A plan's partitions are inserted and committed
(:meth:`PartitionDocuments.commit_plan`), superseded by a replan, moved by the
controls, and their counters summed for the state's roll-up; the leases lanes
hold on them, and everything a lane writes to its partition, are :mod:`.leases`.
Every method is one or a few atomic MongoDB operations; none reads then writes on
the client's say-so where a concurrent process could slip in between. The
invariants callers rely on (DESIGN §3.3):

- a plan commits by compare-and-set on generation, previous plan token, status
  and checksum;
- a pass's counters roll into the totals once per generation (``rolled_generation``).

Ids of failed documents live in ``bad_ids`` (later passes must skip them); they
never appear in messages or logs.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from pymongo import ASCENDING
from pymongo.collection import Collection
from pymongo.database import Database

from migronaut_core.background.store.documents import PartitionDocument, StateDocument
from migronaut_core.background.store.states import (
    MAX_DOC_ERRORS,
    Document,
    StateDocuments,
)
from migronaut_core.clock import utc_now
from migronaut_core.config import BackgroundCollections
from migronaut_core.json_shape import to_json_dict
from migronaut_core.required_indexes import RequiredIndex

OPEN_STATUSES = ("pending", "running")


def open_partitions_filter(name: str, *, generation: int, plan: str) -> Document:
    """The partitions of a plan that still have work (pending or running)."""
    return {
        "migration": name,
        "generation": generation,
        "plan": plan,
        "status": {"$in": list(OPEN_STATUSES)},
    }


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
        return cast("dict[str, int]", to_json_dict(self))


@dataclass(frozen=True, slots=True)
class GenerationTotals:
    """The counters of every partition of one generation, summed."""

    totals: dict[str, int]
    bad_ids: list[Any]
    doc_errors: list[Document]
    failed_partitions: int
    last_error: str | None


def as_rows(collection: Collection[PartitionDocument]) -> Collection[Document]:
    """The partitions collection for an aggregation, whose rows are not partitions."""
    return cast("Collection[Document]", collection)


class PartitionDocuments:
    """The partitions of background migrations' plans in one database.

    A plan commits against its state (a compare-and-set on :class:`StateDocuments`).
    """

    def __init__(
        self, db: Database[Document], names: BackgroundCollections, states: StateDocuments
    ) -> None:
        self.collection = cast("Collection[PartitionDocument]", db[names.partitions])
        self._states = states

    def required_indexes(self) -> list[RequiredIndex]:
        """The index plan reads and counts go through (the lease slots' are :class:`Leases`')."""
        return [
            RequiredIndex(
                self.collection.name,
                (
                    ("migration", ASCENDING),
                    ("generation", ASCENDING),
                    ("plan", ASCENDING),
                    ("status", ASCENDING),
                ),
                name="migration_generation_plan_status",
            ),
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
    ) -> StateDocument | None:
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
            self.collection.insert_many(
                [
                    cast(
                        "PartitionDocument",
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
                        },
                    )
                    for index, scope in enumerate(scopes)
                ],
                ordered=False,
            )
        condition: Document = {"generation": generation, **expected}
        condition["plan.token"] = (
            previous_token if previous_token is not None else {"$exists": False}
        )
        committed = self._states.cas(
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
            self.collection.delete_many({"migration": name, "plan": token})
        return committed

    def drop_foreign_plans(self, name: str, token: str) -> int:
        """Remove never-claimed partitions of plans that lost a commit race."""
        result = self.collection.delete_many(
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
        result = self.collection.update_many(
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
        result = self.collection.delete_many({"migration": name, "generation": {"$lte": up_to}})
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
        result = self.collection.update_many(
            {
                "migration": name,
                "generation": generation,
                "plan": plan,
                "status": {"$in": list(from_statuses)},
            },
            update,
        )
        return result.modified_count

    # -- reading partitions ----------------------------------------------------------

    def last_partition_write(self, name: str) -> Any:
        """When a lane last wrote any partition of the migration (claim, checkpoint, release),
        as stored (a datetime), or None when it has none."""
        latest = self.collection.find_one(
            {"migration": name}, projection={"updated_at": 1}, sort=[("updated_at", -1)]
        )
        return None if latest is None else latest.get("updated_at")

    def partition_counts(self, name: str, *, generation: int, plan: str) -> PartitionCounts:
        rows = as_rows(self.collection).aggregate(
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

    def list_partitions(
        self, name: str, *, generation: int | None = None
    ) -> list[PartitionDocument]:
        query: Document = {"migration": name}
        if generation is not None:
            query["generation"] = generation
        return list(self.collection.find(query).sort([("generation", 1), ("index", 1)]))

    def count_bad_ids(self, name: str, generation: int) -> int:
        """Failed documents so far: those rolled into the state plus this generation's."""
        rows = list(
            as_rows(self.collection).aggregate(
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
        state = self._states.get(name, projection={"bad_ids": 1})
        rolled = len(state.get("bad_ids", [])) if state else 0
        return rolled + (rows[0]["n"] if rows else 0)

    def generation_totals(self, name: str, generation: int) -> GenerationTotals:
        """Sum the counters of every partition of a generation, whatever its status."""
        totals: dict[str, int] = {}
        bad_ids: list[Any] = []
        doc_errors: list[Document] = []
        failed = 0
        last_error = None
        for doc in self.collection.find({"migration": name, "generation": generation}):
            for key, value in (doc.get("counters") or {}).items():
                totals[key] = totals.get(key, 0) + int(value)
            bad_ids.extend(doc.get("bad_ids") or [])
            doc_errors.extend(doc.get("doc_errors") or [])
            if doc.get("status") == "failed":
                failed += 1
                last_error = doc.get("last_error") or last_error
        return GenerationTotals(totals, bad_ids, doc_errors[-MAX_DOC_ERRORS:], failed, last_error)
