"""The failed documents of a background migration: which, why and when, never their values.

A document whose transform or guarded write failed is kept out of later passes by
its ``_id`` (the state's ``bad_ids``, and the current pass's on its partitions until
they are rolled up). :func:`failed_ids` is the one answer to "which documents failed"
(a failed-only retry takes exactly these); :func:`read_failed` pages through them as
:class:`FailedDocument` rows for the kit, the CLI and the UI. Reads only.

A row carries the ``_id`` (JSON-safe, as :func:`~migronaut_core.bson_values.json_safe`
writes it), the error's kind (``reason``), the server's code and the value-free text
the engine stored (an exception's type, a write error's summary: see
:mod:`migronaut_core.scrub`), and the generation that recorded it. The engine keeps
the details of the latest :data:`~migronaut_core.background.store.MAX_DOC_ERRORS`
errors only: an older failure is listed by its ``_id`` with its details unknown
(None). Documents a failed-only retry is working on are listed too (``retrying``)
until its pass is closed: then they have migrated or failed again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from migronaut_core.bson_values import canonical_id_key, json_safe
from migronaut_core.checks import check_int
from migronaut_core.json_shape import json_field, to_json_dict
from migronaut_core.scrub import error_code

if TYPE_CHECKING:
    from migronaut_core.background.store import (
        BackgroundStore,
        PartitionDocument,
        StateDocument,
    )

#: Rows a read answers when its caller names no limit.
DEFAULT_FAILED_LIMIT: Final = 100
#: The most rows one read answers (page with ``offset`` for more).
MAX_FAILED_LIMIT: Final = 10_000

#: What the read needs of the state (never its history).
_PROJECTION: Final = {
    "status": 1,
    "generation": 1,
    "rolled_generation": 1,
    "bad_ids": 1,
    "doc_errors": 1,
    "replay": 1,
}


@dataclass(frozen=True, slots=True)
class FailedDocument:
    """One document the migration could not rewrite.

    ``id``: its ``_id``, JSON-safe. ``reason``: the error's kind (``transform``,
    ``shape``, ``write``, ``update``, ``transaction``, a partitioner's refusal).
    ``code``: the server's error code, for a refused write. ``error``: the
    value-free text stored (an exception's type name, a write error's summary).
    ``generation``: the pass's generation that recorded it. ``reason``, ``code``,
    ``error``, ``generation`` and ``at`` are None when the engine no longer keeps
    the details (past the latest errors it keeps), or did not record them (an
    older release). ``retrying``: a failed-only retry is working on it.
    """

    id: Any
    reason: str | None
    code: int | None
    error: str | None
    generation: int | None
    at: datetime | None
    retrying: bool = False

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


@dataclass(frozen=True, slots=True)
class FailedDocumentsView:
    """A page of a migration's failed documents, oldest first.

    ``total``: every failed document (``documents`` holds ``limit`` of them from
    ``offset``); ``retrying``: a failed-only retry is under way (its documents are
    listed until its pass is closed).
    """

    name: str
    status: str | None
    total: int
    offset: int
    limit: int
    retrying: bool
    documents: tuple[FailedDocument, ...] = field(metadata=json_field())

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


def failed_ids(store: BackgroundStore, state: StateDocument) -> list[Any]:
    """Every failed document's ``_id`` (as stored), oldest first, each once.

    Those rolled into the state, those a failed-only retry took and has not closed
    yet, and those the current pass recorded on its partitions and has not rolled up.
    """
    return [stored for stored, _ in _failed(state, _pass_partitions(store, state))]


def count_failed(state: StateDocument, partitions: Sequence[PartitionDocument]) -> int:
    """How many documents failed (each once), from the state and its current
    generation's ``partitions`` (a status view's read): what :func:`read_failed` totals."""
    unrolled = int(state.get("rolled_generation", 0)) < int(state.get("generation", 0))
    return len(_failed(state, partitions if unrolled else ()))


def read_failed(
    store: BackgroundStore,
    name: str,
    *,
    limit: int = DEFAULT_FAILED_LIMIT,
    offset: int = 0,
) -> FailedDocumentsView | None:
    """A page of the failed documents of ``name``; None when it is not registered.

    :raises ConfigInvalidError: ``limit`` outside 1 to :data:`MAX_FAILED_LIMIT`, or a
        negative ``offset``.
    """
    check_int("limit", limit, 1, MAX_FAILED_LIMIT)
    check_int("offset", offset, 0)
    state = store.states.get(name, projection=_PROJECTION)
    if state is None:
        return None
    partitions = _pass_partitions(store, state)
    listed = _failed(state, partitions)
    details = _latest_details(state, partitions)
    return FailedDocumentsView(
        name=name,
        status=state.get("status"),
        total=len(listed),
        offset=offset,
        limit=limit,
        retrying=bool(state.get("replay")),
        documents=tuple(
            _row(stored, details.get(canonical_id_key(stored)), retrying)
            for stored, retrying in listed[offset : offset + limit]
        ),
    )


def _pass_partitions(store: BackgroundStore, state: StateDocument) -> list[PartitionDocument]:
    """The current pass's partitions while its failures are not rolled into the state."""
    if int(state.get("rolled_generation", 0)) >= int(state.get("generation", 0)):
        return []
    return store.partitions.list_partitions(
        state["_id"], generation=int(state.get("generation", 0))
    )


def _failed(
    state: StateDocument, partitions: Sequence[PartitionDocument]
) -> list[tuple[Any, bool]]:
    """Each failed ``_id`` once, oldest first, with whether a failed-only retry holds it.

    A retry asked for and not started yet will take every one; a started one holds
    its own until its pass records them again (they failed again) or closes.
    """
    replay: Mapping[str, Any] = state.get("replay") or {}
    requested = bool(replay) and "ids" not in replay
    pass_ids = [value for partition in partitions for value in partition.get("bad_ids") or []]
    failed_again = set() if requested else {canonical_id_key(value) for value in pass_ids}
    seen: set[str] = set()
    listed: list[tuple[Any, bool]] = []
    sources: tuple[tuple[Sequence[Any], bool], ...] = (
        (state.get("bad_ids") or [], requested),
        (replay.get("ids") or [], True),
        (pass_ids, requested),
    )
    for ids, held in sources:
        for value in ids:
            key = canonical_id_key(value)
            if key not in seen:
                seen.add(key)
                listed.append((value, held and key not in failed_again))
    return listed


def _latest_details(
    state: StateDocument, partitions: Sequence[PartitionDocument]
) -> dict[str, Mapping[str, Any]]:
    """The latest error entry kept for each ``_id`` (by its canonical key)."""
    entries = [
        *(state.get("doc_errors") or []),
        *(entry for partition in partitions for entry in partition.get("doc_errors") or []),
    ]
    latest: dict[str, Mapping[str, Any]] = {}
    for entry in entries:
        if isinstance(entry, Mapping) and "id" in entry:
            latest[canonical_id_key(entry["id"])] = entry
    return latest


def _row(stored: Any, entry: Mapping[str, Any] | None, retrying: bool) -> FailedDocument:
    detail = entry or {}
    error = detail.get("error")
    text = error if isinstance(error, str) else None
    generation = detail.get("generation")
    at = detail.get("at_epoch")
    return FailedDocument(
        id=json_safe(stored),
        reason=_text(detail.get("reason")),
        code=error_code(text),
        error=text,
        generation=generation if isinstance(generation, int) else None,
        at=datetime.fromtimestamp(at, UTC) if isinstance(at, int | float) else None,
        retrying=retrying,
    )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
