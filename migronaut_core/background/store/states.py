"""The state documents: one per background migration, with its status history.

:class:`StateDocuments` reads and writes them; every write is one atomic update
(a status moves only from the statuses its caller names, a compare-and-set
applies only to the state it expected). The caps on what a state keeps
(:data:`MAX_BAD_IDS`, :data:`MAX_DOC_ERRORS`, :data:`MAX_HISTORY`) and the layout
version (:data:`STATE_SCHEMA`) live here too.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, cast

from pymongo import ASCENDING, ReturnDocument
from pymongo.client_session import ClientSession
from pymongo.collection import Collection
from pymongo.database import Database

from migronaut_core.background.states import CanaryMove, ValidatorMove
from migronaut_core.background.store.documents import (
    HistoryDocument,
    HoldDocument,
    StateDocument,
)
from migronaut_core.clock import utc_now
from migronaut_core.config import BackgroundCollections
from migronaut_core.required_indexes import RequiredIndex

#: The state document layout this release writes; a newer one is left alone.
STATE_SCHEMA = 1
#: Failed document ids kept on a state (one more marks "and more").
MAX_BAD_IDS = 10_000
#: Document error entries kept on a state and on a partition.
MAX_DOC_ERRORS = 100
#: Control history entries kept on a state.
MAX_HISTORY = 100

Document = dict[str, Any]

#: What a watcher of lanes (the Airflow trigger) needs of a state document.
LANES_STATE_PROJECTION: Mapping[str, int] = {"status": 1, "generation": 1, "plan.token": 1}
#: A hold counts as current this long after a lane last confirmed it (lanes held
#: for health look every 2 s and confirm every 10 s), and a window hold this long
#: past the window's opening (the lanes' own wake-up, a deferred task's resume).
HOLD_FRESH_MS = 60_000


def holding_filter(name: str) -> Document:
    """The state of ``name`` while a hold keeps its lanes away on purpose, by the
    server's clock: a window hold until its window opens, any hold while confirmed lately
    (:data:`HOLD_FRESH_MS`)."""
    now = "$$NOW"
    return {
        "_id": name,
        "$expr": {
            "$or": [
                {"$gt": [{"$add": ["$hold.until", HOLD_FRESH_MS]}, now]},
                {"$gt": ["$hold.at", {"$subtract": [now, HOLD_FRESH_MS]}]},
            ]
        },
    }


def newer_schema(state: StateDocument) -> bool:
    """Whether a newer release wrote ``state``: its plan may hold what this one cannot
    read, so coordinators and lanes leave it to a process of that release."""
    return int(state.get("schema", 1)) > STATE_SCHEMA


def _literal_fields(fields: Mapping[str, Any]) -> Document:
    """Field values for a pipeline ``$set``: no value is read as an expression."""
    return {key: {"$literal": value} for key, value in fields.items()}


class StateDocuments:
    """The state documents of background migrations in one database.

    It knows the partitions collection too: a fresh registration, and a
    forgotten migration, take their partitions with them.
    """

    def __init__(self, db: Database[Document], names: BackgroundCollections) -> None:
        self.collection = cast("Collection[StateDocument]", db[names.state])
        self._partitions: Collection[Document] = db[names.partitions]

    @property
    def namespace(self) -> str:
        """The state collection's full name: what tells apart deployments in one process."""
        return self.collection.full_name

    def required_indexes(self) -> list[RequiredIndex]:
        """The indexes state queries need."""
        return [
            RequiredIndex(self.collection.name, (("status", ASCENDING),), name="status"),
            RequiredIndex(
                self.collection.name,
                (("requires", ASCENDING), ("status", ASCENDING)),
                name="requires",
            ),
        ]

    def get(
        self, name: str, *, projection: Mapping[str, Any] | None = None
    ) -> StateDocument | None:
        return self.collection.find_one({"_id": name}, projection)

    def get_many(self, names: Sequence[str]) -> dict[str, StateDocument]:
        return {doc["_id"]: doc for doc in self.collection.find({"_id": {"$in": list(names)}})}

    def list_states(self, query: Mapping[str, Any] | None = None) -> list[StateDocument]:
        return list(self.collection.find(dict(query or {}), {"history": 0}).sort("created_at", 1))

    def register(
        self,
        name: str,
        fields: Mapping[str, Any],
        *,
        action: str = "register",
        by: str | None = None,
        session: ClientSession | None = None,
    ) -> StateDocument:
        """Start a registration afresh (a first ``up``, or a ``down`` that reverts).

        The partitions of any earlier registration go: a lane still working one
        finds its lease gone at its next write. The history is kept.
        """
        self._partitions.delete_many({"migration": name}, session=session)
        doc = self.collection.find_one_and_update(
            {"_id": name},
            _registration_update(fields, action, by),
            upsert=True,
            return_document=ReturnDocument.AFTER,
            session=session,
        )
        assert doc is not None
        return doc

    def register_over(
        self,
        name: str,
        fields: Mapping[str, Any],
        *,
        expected: Mapping[str, Any],
        action: str,
        noted: Mapping[str, Any] | None = None,
    ) -> StateDocument | None:
        """Replace a registration by compare-and-set: only while the state matches
        ``expected`` (``None``: it moved on and was left as it was). ``noted``
        joins the history entry (who asked, why).

        For a state no pass is working (a final status): its partitions go first,
        as with :meth:`register`, so none is left for the new registration to mistake.
        """
        self._partitions.delete_many({"migration": name})
        return self.collection.find_one_and_update(
            {"_id": name, **expected},
            _registration_update(fields, action, None, noted),
            return_document=ReturnDocument.AFTER,
        )

    def delete(self, name: str, *, session: ClientSession | None = None) -> None:
        """Forget a background migration entirely (a withdrawn registration)."""
        self._partitions.delete_many({"migration": name}, session=session)
        self.collection.delete_one({"_id": name}, session=session)

    def set(self, name: str, fields: Mapping[str, Any]) -> None:
        self.collection.update_one({"_id": name}, {"$set": {**fields, "updated_at": utc_now()}})

    def hold(self, name: str, hold: HoldDocument, *, refresh_before: datetime) -> bool:
        """Record why the lanes hold; True when this is a new hold (another reason or
        signal, or none).

        A hold for the same reason and signal keeps its ``since``; the rest is
        refreshed when the stored one was confirmed before ``refresh_before``, so
        N held lanes write at most once per refresh, not once per look.
        """
        same = {"hold.reason": hold["reason"], "hold.signal": hold.get("signal")}
        fresh = self.collection.update_one(
            {"_id": name, "$nor": [same]}, {"$set": {"hold": dict(hold)}}
        )
        if fresh.modified_count:
            return True
        refreshed = {f"hold.{key}": value for key, value in hold.items() if key != "since"}
        self.collection.update_one(
            {"_id": name, **same, "hold.at": {"$lt": refresh_before}}, {"$set": refreshed}
        )
        return False

    def release_hold(self, name: str) -> bool:
        """Forget the lanes' hold; True when there was one (the first lane to see it clear)."""
        result = self.collection.update_one(
            {"_id": name, "hold": {"$exists": True}}, {"$unset": {"hold": ""}}
        )
        return result.modified_count == 1

    def cas(
        self, name: str, expected: Mapping[str, Any], update: Mapping[str, Any]
    ) -> StateDocument | None:
        """Apply ``update`` if the state still matches ``expected``; the state after, or None."""
        return self.collection.find_one_and_update(
            {"_id": name, **expected}, dict(update), return_document=ReturnDocument.AFTER
        )

    def move(
        self,
        name: str,
        *,
        from_statuses: Iterable[str],
        to: str,
        action: str,
        fields: Mapping[str, Any] | None = None,
        by: str | None = None,
        reason: str | None = None,
        note: Mapping[str, Any] | None = None,
    ) -> StateDocument | None:
        """Change the status if it is one of ``from_statuses``, recording it in ``history``.

        ``note``: more the history entry records (a failed-only retry's ``failed_only``
        and ``failed``). Returns the state after, or None when the status was not one
        of them (a concurrent move won; judge again from what it is now).
        """
        entry: Document = {"action": action, "from": "$status", "to": to, "at": "$$NOW"}
        entry.update(_literal_fields(note or {}))
        if by is not None:
            entry["by"] = {"$literal": by}
        if reason is not None:
            entry["reason"] = {"$literal": reason}
        history = {
            "$slice": [{"$concatArrays": [{"$ifNull": ["$history", []]}, [entry]]}, -MAX_HISTORY]
        }
        stage = {
            **_literal_fields(fields or {}),
            "status": to,
            "history": history,
            "updated_at": "$$NOW",
        }
        return self.collection.find_one_and_update(
            {"_id": name, "status": {"$in": list(from_statuses)}},
            [{"$set": stage}],
            return_document=ReturnDocument.AFTER,
        )

    def move_validator(
        self,
        name: str,
        move: ValidatorMove,
        fields: Mapping[str, Any] | None = None,
        state_fields: Mapping[str, Any] | None = None,
    ) -> StateDocument | None:
        """Apply a finalize move if the validator phase is one of its sources.

        ``fields`` are set under ``validator`` (ignored by a move that removes the
        phase), ``state_fields`` on the state itself (the coordinator's ``phase``).
        Returns the state after, or None when the phase was not one of the move's
        sources (another step moved it first; judge again).
        """
        return self._move_phase(name, "validator", move.sources, move.to, fields, state_fields)

    def move_canary(
        self,
        name: str,
        move: CanaryMove,
        fields: Mapping[str, Any] | None = None,
        state_fields: Mapping[str, Any] | None = None,
        *,
        statuses: Sequence[str] | None = None,
    ) -> StateDocument | None:
        """Apply a canary move if the canary phase is one of its sources (as
        :meth:`move_validator`: ``fields`` under ``canary``, ``state_fields`` beside it),
        and, with ``statuses``, the status one of them (a control's pause wins)."""
        also = None if statuses is None else {"status": {"$in": list(statuses)}}
        return self._move_phase(
            name, "canary", move.sources, move.to, fields, state_fields, also=also
        )

    def _move_phase(
        self,
        name: str,
        key: str,
        sources: Sequence[str | None],
        to: str | None,
        fields: Mapping[str, Any] | None,
        state_fields: Mapping[str, Any] | None,
        *,
        also: Mapping[str, Any] | None = None,
    ) -> StateDocument | None:
        """A compare-and-set on ``<key>.phase`` (``None`` in ``sources``: ``key`` absent),
        and on ``also``."""
        phases = [phase for phase in sources if phase is not None]
        matches: list[Document] = [{f"{key}.phase": {"$in": phases}}]
        if None in sources:
            matches.append({key: {"$exists": False}})
        update: Document
        changes: Document = {**(state_fields or {}), "updated_at": utc_now()}
        if to is None:
            update = {"$unset": {key: ""}, "$set": changes}
        else:
            nested = {f"{key}.{field}": value for field, value in (fields or {}).items()}
            update = {"$set": {f"{key}.phase": to, **nested, **changes}}
        return self.collection.find_one_and_update(
            {"_id": name, "$or": matches, **(also or {})},
            update,
            return_document=ReturnDocument.AFTER,
        )

    def note(self, name: str, entry: Mapping[str, Any]) -> None:
        """Record an operator's act that changes no status (an unlock) in ``history``."""
        self.collection.update_one(
            {"_id": name},
            {
                "$push": {
                    "history": {"$each": [{**entry, "at": utc_now()}], "$slice": -MAX_HISTORY}
                },
                "$set": {"updated_at": utc_now()},
            },
        )


#: What a fresh registration clears of the one before it (unless it sets it again).
_CLEARED_BY_REGISTRATION = (
    "plan",
    "started_at",
    "completed_at",
    "failed_at",
    "coordinator",
    "round",
    "control",
    "hold",
    "validator",
    "canary",
    "replay",
    "undo",
)


def _registration_update(
    fields: Mapping[str, Any],
    action: str,
    by: str | None,
    noted: Mapping[str, Any] | None = None,
) -> Document:
    """The update that starts a registration afresh with ``fields`` (history kept)."""
    now = utc_now()
    fresh = {
        "schema": STATE_SCHEMA,
        "registration": uuid.uuid4().hex,
        "phase": "partition",
        "generation": 0,
        "pass": 0,
        "rolled_generation": 0,
        "totals": {},
        "bad_ids": [],
        "doc_errors": [],
        "failed_partitions": 0,
        "last_error": None,
        "updated_at": now,
        "registered_at": now,
        **fields,
    }
    entry: HistoryDocument = {"action": action, "to": fields.get("status"), "by": by, "at": now}
    entry.update(cast(HistoryDocument, dict(noted or {})))
    return {
        "$set": fresh,
        "$unset": {key: "" for key in _CLEARED_BY_REGISTRATION if key not in fields},
        "$setOnInsert": {"created_at": now},
        "$push": {"history": {"$each": [entry], "$slice": -MAX_HISTORY}},
    }
