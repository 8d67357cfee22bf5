"""Document-level versioning: version and OCC filters, the guarded pipeline, the stamped diff.

Every writer of a versioned collection has to agree on one model, or a
background rewrite would silently overwrite an application write:

- the *version* field says which schema a document has. A missing or ``null``
  version field is version 0 (a legacy document nobody has stamped yet); any
  other version is a non-negative integer, written as an exact number (never
  incremented) so two releases that write the same shape agree on it;
- the optional *revision* field counts writes. Every guarded write bumps it by
  one, so a filter on ``{_id, version, revision}`` matches nothing once anyone
  else wrote the document in between (DESIGN §3.3, invariant 6);
- only the top-level fields a transform really changed are written, compared
  BSON-exactly (:func:`~migronaut_core.bson_values.bson_equal`), so every field
  the transform left alone keeps its stored BSON type (an ``Int64`` stays an
  ``Int64``, a double ``1.0`` does not become an ``int32`` ``1``).

Everything here is pure: no database, no clock, no logging. Messages name
fields and counts, never document values.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping
from typing import Any, Final

from bson.decimal128 import Decimal128
from bson.int64 import Int64

from migronaut_core.bson_values import bson_equal, clone_document, clone_value, to_decimal
from migronaut_core.checks import check_field_name, check_int
from migronaut_core.errors import BackgroundFailedError, ConfigInvalidError

__all__ = [
    "occ_filter",
    "revision_of",
    "stamped_diff",
    "stamped_pipeline",
    "updated_document",
    "version_filter",
    "version_of",
]

#: The update operators :func:`stamped_diff` emits and :func:`updated_document` applies.
_OPERATORS: Final = frozenset({"$set", "$unset", "$inc"})


# ─── Counts: versions and revisions ───────────────────────────────────────────


def _as_count(value: Any) -> int | None:
    """Return ``value`` as a non-negative integer, or ``None`` when it is not one.

    Any BSON number with an integral, non-negative value counts (``2``,
    ``Int64(2)``, ``2.0``, ``Decimal128("2")``): the server's equality match
    treats them all as 2. A bool is not a number to BSON, so it never counts.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return int(value) if value >= 0 else None
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer() or value < 0:
            return None
        return int(value)
    if isinstance(value, Decimal128):
        number = value.to_decimal()
        if not number.is_finite() or number < 0 or number != number.to_integral_value():
            return None
        return int(number)
    return None


def _count_of(doc: Mapping[str, Any], field: str) -> int | None:
    value = doc.get(field)
    return 0 if value is None else _as_count(value)


def _check_names(field: str, revision_field: str | None) -> None:
    with contextlib.suppress(TypeError):  # an unhashable name is checked (and refused) below
        if (field, revision_field) in _VALID_NAMES:
            return
    _check_names_anew(field, revision_field)
    _VALID_NAMES.add((field, revision_field))


#: Name pairs already found valid: the per-document calls skip the checks.
_VALID_NAMES: set[tuple[str, str | None]] = set()


def _check_names_anew(field: str, revision_field: str | None) -> None:
    check_field_name("field", field)
    if revision_field is None:
        return
    check_field_name("revision_field", revision_field)
    if revision_field == field:
        raise ConfigInvalidError("field and revision_field must differ", {"key": "revision_field"})


def version_of(doc: Mapping[str, Any], field: str) -> int | None:
    """Return the schema version of ``doc``.

    0 when the field is missing or ``null``; the integer when it holds a
    non-negative integral BSON number of any numeric type; ``None`` when it
    holds anything else (a string, a bool, a fraction), which is no version
    this engine can reason about. Compare the result with ``==`` only. An
    explicitly stored ``0`` also reads as 0, but :func:`version_filter` does
    not match it as version 0 (the engine never writes one: it unsets).
    """
    return _count_of(doc, field)


def revision_of(doc: Mapping[str, Any], revision_field: str | None) -> int | None:
    """Return the revision of ``doc``, under the same rules as :func:`version_of`.

    ``None`` also when ``revision_field`` is ``None`` (revisions are off). After
    a guarded rewrite the revision is ``(revision_of(before) or 0) + 1``.
    """
    if revision_field is None:
        return None
    return _count_of(doc, revision_field)


def version_filter(field: str, version: int) -> dict[str, Any]:
    """Return the query that matches documents at exactly ``version``.

    Version 0 matches documents whose field is missing or ``null`` — documents
    that were never stamped; an explicit stored ``0`` does not match it. Any
    other version is an equality match, which the server applies across
    numeric types (``2`` also matches ``2.0`` and ``Int64(2)``).

    :param field: the version field, a top-level field name.
    :param version: an integer >= 0.
    :raises ConfigInvalidError: on a bad field name or version.
    """
    check_field_name("field", field)
    check_int("version", version, 0)
    return {field: None if version == 0 else version}


def exact_value(value: Any) -> Any:
    """Return ``value`` as an equality operand the server cannot read as operators."""
    return {"$eq": value} if isinstance(value, Mapping) else value


def occ_filter(
    doc: Mapping[str, Any],
    *,
    field: str,
    version: int,
    revision_field: str | None = None,
) -> dict[str, Any]:
    """Return the optimistic-concurrency filter for rewriting ``doc``.

    It matches the document's ``_id`` at exactly ``version`` (the version it
    was read at) and, when ``revision_field`` is set, at exactly the revision
    it was read with. A missing or ``null`` revision is matched as ``null``
    (missing or null), never as 0, so a concurrent write that sets the
    revision to 0 still makes the rewrite match nothing. Any concurrent write
    that bumps the revision or changes the version has the same effect.

    :raises ConfigInvalidError: when ``doc`` has no ``_id`` or a name is invalid.
    """
    _check_names(field, revision_field)
    if "_id" not in doc:
        raise ConfigInvalidError("the document has no _id", {"key": "_id"})
    query: dict[str, Any] = {"_id": exact_value(doc["_id"])}
    query.update(version_filter(field, version))
    if revision_field is not None:
        query[revision_field] = exact_value(doc.get(revision_field))
    return query


def _matches_expr(path: str, value: Any) -> dict[str, Any]:
    """An aggregation test that ``path`` holds ``value``, as an equality filter on it would.

    ``None`` stands for "missing or null" (aggregation ``$eq`` tells those apart;
    ``$lte`` against ``null`` does not, and nothing else sorts that low but MinKey).
    """
    if value is None:
        return {"$lte": [path, None]}
    return {"$eq": [path, {"$literal": value}]}


def guarded_pipeline(
    doc: Mapping[str, Any],
    update: Mapping[str, Any],
    *,
    field: str,
    version: int,
    revision_field: str | None = None,
) -> list[dict[str, Any]]:
    """Return ``update`` (a :func:`stamped_diff`) as a pipeline that guards itself.

    The pipeline replaces the document with its updated form only while it is
    still at ``version`` and at the revision ``doc`` was read with — the same
    test as :func:`occ_filter` — and leaves it untouched otherwise. Paired with a
    filter on ``_id`` alone, the server keeps its ``_id`` fast path, and an
    applied write is one the server reports as *modified* (the stamp always
    changes the document). Needs MongoDB 5.0+ (``$unsetField``).

    The result is the document the plain update would leave, byte for byte: new
    fields in the same order, and the revision still added on the server, so its
    numeric type is kept as ``$inc`` keeps it.
    """
    _check_names(field, revision_field)
    guard = [_matches_expr(f"${field}", None if version == 0 else version)]
    if revision_field is not None:
        guard.append(_matches_expr(f"${revision_field}", doc.get(revision_field)))
    # Sorted: update operators add new fields in name order, and so does this.
    changed = dict(sorted((update.get("$set") or {}).items()))
    merged: Any = {"$mergeObjects": ["$$ROOT", {"$literal": changed}]}
    for name in update.get("$inc") or {}:
        merged["$mergeObjects"].append({name: {"$add": [f"${name}", update["$inc"][name]]}})
    for name in update.get("$unset") or {}:
        merged = {"$unsetField": {"field": name, "input": merged}}
    test = guard[0] if len(guard) == 1 else {"$and": guard}
    return [{"$replaceWith": {"$cond": [test, merged, "$$ROOT"]}}]


# ─── The stamped diff ─────────────────────────────────────────────────────────


def _refuse(detail: str, field: str | None = None) -> BackgroundFailedError:
    context: dict[str, Any] = {"reason": "shape"}
    if field is not None:
        context["field"] = field
    return BackgroundFailedError(f"The transform returned {detail}", context)


def _writable_key(key: Any) -> str:
    """Return ``key`` when ``$set``/``$unset`` can address it as one top-level field."""
    if not isinstance(key, str):
        raise _refuse("a field name that is not a string")
    if not key or key.startswith("$") or "." in key or "\0" in key:
        raise _refuse("a field name $set cannot write (empty, $-prefixed, dotted or NUL)", key)
    return key


def _check_id(before: Mapping[str, Any], after: Mapping[str, Any]) -> None:
    if "_id" not in before and "_id" not in after:
        return
    if "_id" not in after:
        raise _refuse("a document without its _id", "_id")
    if "_id" not in before or not bson_equal(before["_id"], after["_id"]):
        raise _refuse("a document with a different _id", "_id")


def _check_version(
    before: Mapping[str, Any], after: Mapping[str, Any], field: str, target: int
) -> None:
    """Accept a version field the transform left alone, dropped, or set to the target."""
    if field not in after:
        return
    if field in before and bson_equal(before[field], after[field]):
        return
    if _count_of(after, field) == target:
        return
    raise _refuse("a document that sets the version field itself", field)


def _check_revision(
    before: Mapping[str, Any], after: Mapping[str, Any], revision_field: str
) -> None:
    if revision_field in after and not (
        revision_field in before and bson_equal(before[revision_field], after[revision_field])
    ):
        raise _refuse("a document that sets the revision field itself", revision_field)
    if _count_of(before, revision_field) is None:
        raise BackgroundFailedError(
            "The stored revision field is not an integer >= 0, so it cannot be bumped",
            {"reason": "shape", "field": revision_field},
        )


def _field_changes(
    before: Mapping[str, Any], after: Mapping[str, Any], skip: frozenset[str]
) -> tuple[dict[str, Any], dict[str, str]]:
    to_set: dict[str, Any] = {}
    to_unset: dict[str, str] = {}
    for key, value in after.items():
        if key in skip:
            continue
        if key not in before or not bson_equal(before[key], value):
            to_set[_writable_key(key)] = clone_value(value)
    for key in before:
        if key not in skip and key not in after:
            to_unset[_writable_key(key)] = ""
    return to_set, to_unset


def stamped_diff(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    *,
    field: str,
    target_version: int,
    revision_field: str | None = None,
) -> dict[str, Any]:
    """Return the update document that turns ``before`` into ``after`` and stamps it.

    ``$set`` carries every top-level field whose value changed BSON-exactly
    (:func:`bson_equal`) or was added, ``$unset`` every top-level field the
    transform removed; fields it left alone are not written, so they keep
    their stored BSON type. A changed nested value rewrites its whole
    top-level field. The version field is set to ``target_version`` (unset for
    version 0, which means "never stamped"). With ``revision_field``, the
    revision is bumped by one: ``$inc`` when the stored revision is a number,
    ``$set`` to 1 when it is missing or ``null`` (``$inc`` cannot add to
    ``null``; the OCC filter has matched it as missing/null, so 1 is exactly
    "0 + 1"). The result always has at least the stamp, and shares no mutable
    value with ``after``; neither input is modified.

    The transform may leave the version field as it was, drop it, or set it to
    ``target_version``; it may leave the revision field as it was or drop it.

    :raises BackgroundFailedError: (``context["reason"] == "shape"``, with the
        offending ``context["field"]``) when ``after`` is not a document,
        removes or changes ``_id``, sets the version or revision field to
        anything else, names a field ``$set`` cannot address, or when the
        stored revision is not an integer >= 0. A per-document failure.
    :raises ConfigInvalidError: on a bad field name or target version.
    """
    _check_names(field, revision_field)
    check_int("target_version", target_version, 0)
    if not isinstance(before, Mapping):
        raise ConfigInvalidError("before must be a document (a mapping)")
    if not isinstance(after, Mapping):
        raise _refuse("something that is not a document")
    _check_id(before, after)
    _check_version(before, after, field, target_version)
    system = {"_id", field}
    if revision_field is not None:
        _check_revision(before, after, revision_field)
        system.add(revision_field)
    to_set, to_unset = _field_changes(before, after, frozenset(system))
    if target_version == 0:
        to_unset[field] = ""
    else:
        to_set[field] = target_version
    update: dict[str, Any] = {}
    if to_set:
        update["$set"] = to_set
    if to_unset:
        update["$unset"] = to_unset
    if revision_field is not None:
        _stamp_revision(update, before, revision_field)
    return update


def _stamp_revision(update: dict[str, Any], before: Mapping[str, Any], name: str) -> None:
    if before.get(name) is None:
        update.setdefault("$set", {})[name] = 1
    else:
        update["$inc"] = {name: 1}


def _incremented(current: Any, step: Any, name: str) -> Any:
    if isinstance(current, bool) or not isinstance(current, int | float | Decimal128):
        raise ConfigInvalidError(f"$inc on a field that is not a number: {name}", {"key": name})
    if isinstance(current, Decimal128) or isinstance(step, Decimal128):
        return Decimal128(to_decimal(current) + to_decimal(step))
    total = current + step
    return Int64(total) if isinstance(current, Int64) else total


def updated_document(before: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """Return a copy of ``before`` with ``update`` applied, as the server would.

    Supports what :func:`stamped_diff` emits: ``$set``, ``$unset`` and
    ``$inc`` on top-level fields. A ``$set`` of an existing field keeps its
    position, new fields are appended (the server may order added fields
    differently; compare with ``==`` or per field when order is irrelevant).
    ``$inc`` keeps the stored numeric type and creates a missing field.

    :raises ConfigInvalidError: on another operator, a dotted path, or an
        ``$inc`` of a value that is not a number.
    """
    doc = clone_document(before)
    for operator, fields in update.items():
        if operator not in _OPERATORS or not isinstance(fields, Mapping):
            raise ConfigInvalidError(f"unsupported update operator {operator!r}")
        for name, value in fields.items():
            _apply(doc, operator, check_field_name("update", name), value)
    return doc


def _apply(doc: dict[str, Any], operator: str, name: str, value: Any) -> None:
    if operator == "$set":
        doc[name] = clone_value(value)
    elif operator == "$unset":
        doc.pop(name, None)
    elif name not in doc:
        doc[name] = clone_value(value)
    else:
        doc[name] = _incremented(doc[name], value, name)


def stamped_pipeline(
    stages: list[dict[str, Any]],
    *,
    field: str,
    target_version: int,
    revision_field: str | None = None,
) -> list[dict[str, Any]]:
    """Return an update-pipeline migration's stages followed by the engine's stamps.

    The version field is set to ``target_version`` (unset for version 0) and,
    with ``revision_field``, the revision bumped exactly as :func:`stamped_diff`
    bumps it (a missing or ``null`` revision becomes 1). So that a stage that
    replaces the whole document (``$replaceWith``, ``$replaceRoot``, an
    inclusion ``$project``) cannot reset the revision, such a stage carries the
    stored revision over; the spec guarantees no stage writes either field
    itself. ``stages`` is not modified.

    :raises ConfigInvalidError: on a bad field name or target version.
    """
    _check_names(field, revision_field)
    check_int("target_version", target_version, 0)
    out = [_keeping_revision(clone_document(stage), revision_field) for stage in stages]
    stamp: dict[str, Any] = {}
    if target_version != 0:
        stamp[field] = target_version
    if revision_field is not None:
        stamp[revision_field] = {"$add": [{"$ifNull": [f"${revision_field}", 0]}, 1]}
    if stamp:
        out.append({"$set": stamp})
    if target_version == 0:
        out.append({"$unset": field})
    return out


def _keeping_revision(stage: dict[str, Any], revision_field: str | None) -> dict[str, Any]:
    if revision_field is None:
        return stage
    ((operator, body),) = stage.items()
    keep = {revision_field: f"${revision_field}"}
    if operator == "$replaceWith":
        return {operator: {"$mergeObjects": [body, keep]}}
    if operator == "$replaceRoot" and isinstance(body, Mapping) and "newRoot" in body:
        return {operator: {**body, "newRoot": {"$mergeObjects": [body["newRoot"], keep]}}}
    if operator == "$project" and isinstance(body, Mapping) and _includes(body):
        return {operator: {**body, revision_field: 1}}
    return stage


def _includes(projection: Mapping[str, Any]) -> bool:
    """Whether a ``$project`` keeps only what it names (any non-exclusion besides ``_id``)."""
    return any(value not in (0, False) for key, value in projection.items() if key != "_id")
