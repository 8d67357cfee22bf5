"""Finalizing a completed migration with the database's help: a collection validator.

A forward migration whose spec has ``validator`` is not completed when its last
pass leaves no old-shape document: the coordinator finalizes it first, one step at
a time, answering ``wait`` in between (so every driver, Airflow's generated DAG
included, drives it through its existing coordinator steps and waits). The moves
of ``validator.phase`` are :func:`~migronaut_core.background.states.validator_move`'s:

1. ``record``: the collection's validation options as they are (``validator``,
   ``validationLevel``, ``validationAction``) are stored in the state, BSON-encoded,
   before anything changes them;
2. ``warn``: ``collMod`` sets the new validator with ``validationLevel: "strict"`` and
   ``validationAction: "warn"``: the soak begins. The server accepts a write of the
   old shape and logs a warning;
3. the soak: every step counts old-shape documents with the drift probe (the
   source version, known failed documents excluded). A count above zero is reported
   in the status (``validator.old_shape``) and a healing pass rewrites them; the
   soak then starts over. It ends after ``validator_soak.passes`` clean checks in a
   row once ``validator_soak.seconds`` have passed since it (re)started;
4. ``enforce``: ``collMod`` sets ``validationAction: "error"``; the migration completes.

``down`` restores the recorded options exactly (:func:`restore`), before its revert
is registered; so does a ``cancel`` of a migration that is finalizing (the control
action, :func:`released`): a cancelled migration leaves no validator behind. Each
``collMod`` of a step is preceded by a renewal of the coordinator's lock
(``confirm``), so a coordinator that lost its lock mid-step (it lapsed, was taken
over or unlocked) changes nothing. A refused ``collMod`` (a missing privilege) raises
:class:`~migronaut_core.errors.PrivilegeMissingError` naming the action and the
namespace; the state is then as it was before the step.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final, Literal

import bson
from pymongo.errors import OperationFailure

from migronaut_core.background.indexes import probe_query
from migronaut_core.background.runtime import Runtime
from migronaut_core.background.spec import BackgroundSpec
from migronaut_core.background.states import ValidatorAction, validator_move
from migronaut_core.background.store import StateDocument, ValidatorDocument
from migronaut_core.bson_values import clone_document
from migronaut_core.clock import utc_now
from migronaut_core.errors import LockLostError, PrivilegeMissingError
from migronaut_core.server_errors import is_unauthorized

log = logging.getLogger("migronaut_core.background")

#: Old-shape documents a soak check counts at most (the status says "at least").
COUNT_LIMIT: Final = 10_000
#: How often a soaking migration is checked (its ``wait`` answers).
SOAK_POLL_MS: Final = 5_000
#: The validation level a finalized collection gets: every insert and update is checked.
LEVEL: Final = "strict"

SoakOutcome = Literal["soaking", "heal", "enforced"]
#: Renews the coordinator's lock or raises ``LockLostError``: called right before each
#: ``collMod``, so only the lock's holder changes the collection's validation.
Confirm = Callable[[], None]


@dataclass(frozen=True, slots=True)
class Validation:
    """A collection's validation options, as ``listCollections`` gives them.

    ``None``: the option is not set. ``exists``: whether the collection existed.
    """

    validator: dict[str, Any] | None
    level: str | None
    action: str | None
    exists: bool = True

    def encode(self) -> bytes:
        """The options as stored in the state (``validator.previous``): exact BSON."""
        return bson.encode(
            {
                "exists": self.exists,
                **({"validator": self.validator} if self.validator is not None else {}),
                **({"level": self.level} if self.level is not None else {}),
                **({"action": self.action} if self.action is not None else {}),
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> Validation:
        doc = bson.decode(data)
        return cls(doc.get("validator"), doc.get("level"), doc.get("action"), doc["exists"])


@dataclass(frozen=True, slots=True)
class SoakStep:
    """What a finalize step did: still ``soaking`` (step again after ``retry_after_ms``),
    ``heal`` (old-shape documents seen: plan a pass), or ``enforced`` (complete it)."""

    outcome: SoakOutcome
    state: StateDocument
    retry_after_ms: int = 0


def validator_document(spec: BackgroundSpec) -> dict[str, Any]:
    """The validator ``collMod`` sets for ``spec`` (which has one).

    ``version``: the version field equals ``to`` for the documents the spec's filter
    matches; documents outside it are exempt. ``json_schema``: ``{"$jsonSchema": ...}``.
    """
    assert spec.validator is not None
    if spec.validator.kind == "json_schema":
        return {"$jsonSchema": clone_document(spec.validator.json_schema or {})}
    stamped: dict[str, Any] = {spec.field: spec.to_version}
    if not spec.filter:
        return stamped
    return {"$or": [stamped, {"$nor": [clone_document(spec.filter)]}]}


def read_validation(rt: Runtime, collection: str, *, migration: str) -> Validation:
    """The collection's validation options now.

    :raises PrivilegeMissingError: ``listCollections`` was refused.
    """
    try:
        infos = list(rt.db.list_collections(filter={"name": collection}))
    except OperationFailure as exc:
        raise _refused(exc, rt, "listCollections", collection, migration) from exc
    if not infos:
        return Validation(None, None, None, exists=False)
    options = infos[0].get("options") or {}
    return Validation(
        options.get("validator"), options.get("validationLevel"), options.get("validationAction")
    )


def begin(rt: Runtime, spec: BackgroundSpec, state: StateDocument, confirm: Confirm) -> SoakStep:
    """The last pass left no old-shape document: start (or restart) the soak.

    Records the previous validation (first time only), sets the validator to warn
    and the state's phase to ``finalize``. A migration whose validator is already
    enforced (a reopened one) answers ``enforced``.

    :raises PrivilegeMissingError: ``collMod`` (or ``listCollections``) was refused;
        a validation recorded by this step is forgotten again.
    :raises LockLostError: the coordinator's lock was lost before ``collMod``.
    """
    name, collection = state["_id"], _collection(spec)
    current = state.get("validator")
    if current is not None and current["phase"] == "error":
        return SoakStep("enforced", state)
    recorded_now = current is None
    if current is None:
        previous = read_validation(rt, collection, migration=name)
        state = _moved(rt, name, "record", {"previous": previous.encode()})
    try:
        _apply(rt, collection, spec, "warn", confirm, migration=name)
    except (PrivilegeMissingError, LockLostError):
        if recorded_now:
            rt.store.states.move_validator(name, validator_move("restore"))
        raise
    state = _moved(rt, name, "warn", spec.validator_soak.started(utc_now()), {"phase": "finalize"})
    log.info("%s: validator set to warn on %s; soaking", name, collection)
    return SoakStep("soaking", state, SOAK_POLL_MS)


def soak(rt: Runtime, spec: BackgroundSpec, state: StateDocument, confirm: Confirm) -> SoakStep:
    """One soak check: count old-shape documents; heal, wait, or enforce.

    :raises PrivilegeMissingError: ``collMod`` was refused at the end of the soak; the
        validator stays in ``warn`` and the state as it was.
    :raises LockLostError: the coordinator's lock was lost before ``collMod``; likewise.
    """
    name, collection = state["_id"], _collection(spec)
    validator: ValidatorDocument | None = state.get("validator")
    if validator is None:
        # Restored by a down whose revert is not registered yet (it replaces the state).
        return SoakStep("soaking", state, SOAK_POLL_MS)
    found = _old_shape(rt, spec, state)
    now = utc_now()
    if found:
        seen = int(validator.get("old_shape_seen", 0)) + found
        log.warning(
            "%s: %d old-shape document(s) written to %s during the validator's soak; "
            "healing them before it is enforced",
            name,
            found,
            collection,
        )
        fields = {
            "old_shape": found,
            "old_shape_seen": seen,
            "old_shape_at": now,
            "clean_passes": 0,
        }
        moved = _moved(rt, name, "warn", fields, {"phase": "partition"})
        return SoakStep("heal", moved)
    clean = int(validator.get("clean_passes", 0)) + 1
    wait = spec.validator_soak.wait_ms(clean, validator.get("until"), now, SOAK_POLL_MS)
    if wait is not None:
        moved = _moved(rt, name, "warn", {"clean_passes": clean})
        return SoakStep("soaking", moved, wait)
    _apply(rt, collection, spec, "error", confirm, migration=name)
    log.info("%s: validator enforced on %s", name, collection)
    return SoakStep("enforced", _moved(rt, name, "enforce", {"enforced_at": now}))


def restore(rt: Runtime, state: StateDocument) -> bool:
    """Put the collection's validation back as it was before finalize (``down``).

    The recorded validator, level and action are set again exactly; a collection
    that had none gets none. True when there was something to restore.

    :raises PrivilegeMissingError: ``collMod`` was refused; nothing changed.
    """
    validator = state.get("validator")
    spec_doc = state.get("spec") or {}
    collection = spec_doc.get("collection")
    if validator is None or not isinstance(collection, str):
        return False
    previous = Validation.decode(validator["previous"])
    options = {
        "validator": previous.validator if previous.validator is not None else {},
        "validationLevel": previous.level or "strict",
        "validationAction": previous.action or "error",
    }
    _coll_mod(rt, collection, options, migration=state["_id"])
    rt.store.states.move_validator(state["_id"], validator_move("restore"))
    log.info("%s: validation of %s restored as it was before finalize", state["_id"], collection)
    return True


@contextlib.contextmanager
def held(rt: Runtime, state: StateDocument | None) -> Iterator[None]:
    """Hold the migration's coordinator lock while a finalizing migration's state changes
    under a coordinator's feet (``down``, ``cancel``), so no step sets the validator again
    in between. Waits up to one lock TTL for a step in progress; a migration without a
    validator phase needs no lock.

    :raises LockAlreadyHeldError: a step held the lock past one TTL; nothing changed.
    """
    if state is None or state.get("validator") is None:
        yield
        return
    lock = rt.lock_for(state["_id"])
    lock.acquire(wait_seconds=rt.ttl_ms / 1000)
    with lock:
        yield


@contextlib.contextmanager
def released(rt: Runtime, state: StateDocument) -> Iterator[None]:
    """Under the coordinator lock (:func:`held`), restore the validation a finalizing
    migration changed, then run the caller's move (a ``cancel``'s).

    :raises PrivilegeMissingError: ``collMod`` was refused; nothing changed.
    :raises LockAlreadyHeldError: see :func:`held`.
    """
    with held(rt, state):
        if state.get("validator") is not None:
            restore(rt, state)
        yield


def _collection(spec: BackgroundSpec) -> str:
    assert spec.collection is not None
    return spec.collection


def _old_shape(rt: Runtime, spec: BackgroundSpec, state: StateDocument) -> int:
    match, hint = probe_query(rt, spec, list(state.get("bad_ids") or []))
    options: dict[str, Any] = {"limit": COUNT_LIMIT}
    if hint is not None:
        options["hint"] = hint
    return rt.db[_collection(spec)].count_documents(match, **options)


def _moved(
    rt: Runtime,
    name: str,
    action: ValidatorAction,
    fields: dict[str, Any],
    state_fields: dict[str, Any] | None = None,
) -> StateDocument:
    """Apply a finalize move (``fields`` under ``validator``, ``state_fields`` beside it);
    under the coordinator's lock nothing else moves the phase."""
    moved = rt.store.states.move_validator(name, validator_move(action), fields, state_fields)
    if moved is None:
        current = rt.store.states.get(name)
        assert current is not None, name
        return current
    return moved


def _apply(
    rt: Runtime,
    collection: str,
    spec: BackgroundSpec,
    action: str,
    confirm: Confirm,
    *,
    migration: str,
) -> None:
    options = {
        "validator": validator_document(spec),
        "validationLevel": LEVEL,
        "validationAction": action,
    }
    exists = read_validation(rt, collection, migration=migration).exists
    confirm()
    if exists:
        _coll_mod(rt, collection, options, migration=migration)
        return
    try:
        rt.db.command({"create": collection, **options})
    except OperationFailure as exc:
        raise _refused(exc, rt, "create", collection, migration) from exc


def _coll_mod(rt: Runtime, collection: str, options: dict[str, Any], *, migration: str) -> None:
    try:
        rt.db.command({"collMod": collection, **options})
    except OperationFailure as exc:
        raise _refused(exc, rt, "collMod", collection, migration) from exc


def _refused(
    exc: OperationFailure, rt: Runtime, action: str, collection: str, migration: str
) -> Exception:
    """A missing privilege as :class:`PrivilegeMissingError`; anything else as it was."""
    if not is_unauthorized(exc):
        return exc
    namespace = f"{rt.db.name}.{collection}"
    return PrivilegeMissingError(
        f"background migration {migration}: the server refused {action} on {namespace}: "
        f"the user lacks the privilege; grant {action} on {namespace} and step again",
        {"action": action, "namespace": namespace, "migration": migration},
    )
