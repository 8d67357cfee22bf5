"""Undo from the journal: a migration's documents put back without a hand-written ``revert``.

A migration with ``undo = "journal"`` keeps each rewritten document's
before-image (:mod:`.store.journal`): :func:`journal_writer` is what its
forward passes call before every guarded write. :func:`start_undo` registers
the way back as a revert pass of the migration (``direction: "revert"``,
``undo: "journal"`` on its state), so the undo is planned into ``_id``
partitions over the documents at the target version, claimed under leases,
checkpointed behind their fence and resumed after a crash exactly as any pass
is, by the same coordinators, lanes and Airflow DAG. Its transform is
:func:`restore_functions`' batch transform: a document still exactly the
migration's write (target version, the revision the migration gave it) gets
its before-image's fields back, with its version stamped back to ``from`` and
its revision moved on by one, so an application's OCC sees the change. Any
other document — changed since, inserted in the new shape, its entry expired —
is left as it is and recorded by ``_id`` as a document error of reason
``changed`` (kept on the state, at most ``MAX_BAD_IDS``, excluded from later
passes), never by value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pymongo.client_session import ClientSession

from migronaut_core.background.runtime import Runtime
from migronaut_core.background.spec import BackgroundFunctions, BackgroundSpec, read_stored
from migronaut_core.background.store import MAX_BAD_IDS, StateDocument
from migronaut_core.bson_values import canonical_id_key, clone_document
from migronaut_core.changelog import Actor
from migronaut_core.errors import UndoUnavailableError
from migronaut_core.versioning import revision_of, version_of

Document = dict[str, Any]
#: Keeps a batch's before-images: ``(documents as read, the batch's session or None)``.
JournalWriter = Callable[[Sequence[Document], ClientSession | None], None]

#: The statuses an undo may start from: the migration no longer writes.
UNDOABLE_STATUSES = frozenset({"completed", "failed", "cancelled"})
#: The reason a document the undo leaves as it is is recorded under.
CHANGED = "changed"


class ChangedSinceError(Exception):
    """A document is not the migration's write any more: the undo leaves it as it is."""

    reason = CHANGED


def journal_writer(rt: Runtime, name: str, spec: BackgroundSpec, generation: int) -> JournalWriter:
    """What a forward pass of ``name`` calls with each batch before its guarded write."""
    revision_field = spec.revision_field

    def write(docs: Sequence[Document], session: ClientSession | None) -> None:
        images = [(doc, revision_of(doc, revision_field) or 0) for doc in docs]
        rt.store.journal.record(
            name,
            generation,
            images,
            retention_s=spec.undo_retention_s,
            write_concern=spec.write_concern,
            session=session,
        )

    return write


def restore_functions(rt: Runtime, name: str, spec: BackgroundSpec) -> BackgroundFunctions:
    """The functions of an undo pass: a batch transform that answers each document's
    before-image, or :class:`ChangedSinceError` for one it must leave alone."""
    field, revision_field = spec.field, spec.revision_field
    assert revision_field is not None  # the spec guarantees one with undo = "journal"

    def restore_batch(docs: list[Document], ctx: Any) -> list[Any]:
        entries = rt.store.journal.entries(name, [doc["_id"] for doc in docs])
        out: list[Any] = []
        for doc in docs:
            entry = entries.get(canonical_id_key(doc["_id"]))
            revision = revision_of(doc, revision_field)
            ours = (
                entry is not None
                and version_of(doc, field) == spec.to_version
                and revision == entry.get("written")
            )
            if not ours or entry is None:
                out.append(ChangedSinceError("changed since the migration wrote it"))
                continue
            image = clone_document(entry.get("before") or {})
            # The revision moves on (the engine bumps it); the version goes back to ``from``.
            image[revision_field] = doc[revision_field]
            image.pop(field, None)
            out.append(image)
        return out

    return BackgroundFunctions(revert_batch=restore_batch)


def undo_registration(state: StateDocument) -> dict[str, Any]:
    """The fields that register the undo of a migration registered as ``state``.

    The spec is the registered one, but for ``max_document_errors``: every
    document left as changed is a document error, so an undo tolerates as many
    as a state keeps (``MAX_BAD_IDS``) and fails past that.
    """
    spec = dict(state.get("spec") or {})
    spec["max_document_errors"] = MAX_BAD_IDS
    return {
        "status": "pending",
        "mode": state.get("mode", "declarative"),
        "direction": "revert",
        "undo": "journal",
        "spec": spec,
        "checksum": state.get("checksum"),
        "requires": [],
        "waits_for": [],
        "collection": state.get("collection"),
        "description": state.get("description"),
    }


def check_undoable(rt: Runtime, name: str, state: StateDocument | None) -> BackgroundSpec:
    """The registered spec of a migration that may be undone from its journal now.

    :raises UndoUnavailableError: it is not registered, its spec has no
        ``undo = "journal"``, it is a revert or an undo already, or it still
        runs (anything but completed, failed or cancelled). Reads only.
    """
    if state is None or not state.get("spec"):
        raise UndoUnavailableError(
            f"background migration {name} is not registered: nothing to undo",
            {"migration": name, "reason": "unregistered"},
        )
    spec = read_stored(state["spec"], name=name)
    if spec.undo != "journal":
        raise UndoUnavailableError(
            f"background migration {name} keeps no undo journal (its spec has no "
            'undo = "journal"); revert it with `migronaut down` if it has a revert',
            {"migration": name, "reason": "no-journal"},
        )
    if state.get("direction", "forward") != "forward":
        raise UndoUnavailableError(
            f"background migration {name} is registered as a revert or an undo already",
            {"migration": name, "reason": "direction", "undo": state.get("undo")},
        )
    status = state.get("status")
    if status not in UNDOABLE_STATUSES:
        raise UndoUnavailableError(
            f"background migration {name} is {status}: an undo starts once it no longer "
            "writes (completed, failed or cancelled; cancel it first)",
            {"migration": name, "reason": "status", "status": status},
        )
    return spec


def start_undo(rt: Runtime, name: str, *, actor: Actor | None = None) -> StateDocument:
    """Register the undo of ``name``: a revert pass restoring its journal's before-images.

    The registration replaces the state by compare-and-set on its registration,
    so a concurrent control or coordinator step that moved the state first wins
    and this raises. The migration's changelog record is kept: the file stays
    applied in the sequence's eyes (``migronaut down`` afterwards removes the
    record and writes nothing).

    :raises UndoUnavailableError: see :func:`check_undoable`; nothing was written.
    """
    state = rt.store.states.get(name)
    check_undoable(rt, name, state)
    assert state is not None
    registered = rt.store.states.register_over(
        name,
        undo_registration(state),
        expected={"registration": state.get("registration"), "status": state.get("status")},
        action="undo",
        noted={"from": state.get("status"), **(actor or Actor()).fields()},
    )
    if registered is None:
        current = rt.store.states.get(name)
        raise UndoUnavailableError(
            f"background migration {name} changed while its undo was being registered; try again",
            {
                "migration": name,
                "reason": "status",
                "status": None if current is None else current.get("status"),
            },
        )
    rt.emit("background:registered", {"migration": name, "direction": "revert", "undo": True})
    return registered
