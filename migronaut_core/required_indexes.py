"""The indexes migronaut needs, created or — with ``ensure_indexes = false`` — only checked.

Its own collections declare theirs as :class:`RequiredIndex` (the changelog's,
the background store's; the run lock needs none: it is found by ``_id``), and
:func:`ensure_indexes` creates them, or for a user without index-creation
rights checks that someone did, raising :class:`~migronaut_core.errors.IndexMissingError`
naming every missing one before anything is written. :func:`same_index_key` is
the one equality of key patterns (:func:`key_direction` compares one direction),
which the version-index rule uses too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pymongo.database import Database

from migronaut_core.errors import IndexMissingError
from migronaut_core.json_shape import json_field, to_json_dict

__all__ = [
    "RequiredIndex",
    "ensure_indexes",
    "key_direction",
    "missing_error",
    "missing_indexes",
    "same_index_key",
]

IndexKey = Sequence[tuple[str, Any]]


def same_index_key(live: Mapping[str, Any], wanted: IndexKey) -> bool:
    """Whether an index's key pattern is ``wanted``: same fields, order and directions."""
    have = list(live.items())
    if len(have) != len(wanted):
        return False
    for (name, kind), (wanted_name, wanted_kind) in zip(have, wanted, strict=True):
        if name != wanted_name or key_direction(kind) != key_direction(wanted_kind):
            return False
    return True


def key_direction(kind: Any) -> Any:
    """An index key's direction, comparable across numeric types (``1``, ``1.0``, ``Int64(1)``)."""
    if isinstance(kind, int | float) and not isinstance(kind, bool):
        return float(kind)
    return str(kind)


@dataclass(frozen=True, slots=True)
class RequiredIndex:
    """An index one collection needs.

    :param collection: the collection's name.
    :param key: its key pattern.
    :param name: the name it is created with (None: the server's default); an
        index with the same key and options under any name will do.
    :param unique: it must be unique.
    :param partial: its ``partialFilterExpression``, which must match too.
    :param expire_after_seconds: a TTL index: documents go this long after the
        date in its one field (``0``: at that date).
    """

    collection: str
    key: tuple[tuple[str, Any], ...]
    name: str | None = field(default=None, metadata=json_field(omit="always"))
    unique: bool = field(default=False, metadata=json_field(omit="empty"))
    partial: Mapping[str, Any] | None = field(default=None, metadata=json_field(omit="none"))
    expire_after_seconds: int | None = field(default=None, metadata=json_field(omit="none"))

    def options(self) -> dict[str, Any]:
        """The ``create_index`` options."""
        options: dict[str, Any] = {}
        if self.name is not None:
            options["name"] = self.name
        if self.unique:
            options["unique"] = True
        if self.partial is not None:
            options["partialFilterExpression"] = dict(self.partial)
        if self.expire_after_seconds is not None:
            options["expireAfterSeconds"] = self.expire_after_seconds
        return options

    def met_by(self, index: Mapping[str, Any]) -> bool:
        """Whether ``index`` (a ``listIndexes`` entry) is this one, by key and options."""
        partial = index.get("partialFilterExpression")
        return (
            same_index_key(index["key"], self.key)
            and bool(index.get("unique")) == self.unique
            and (None if partial is None else dict(partial)) == self.partial
            and index.get("expireAfterSeconds") == self.expire_after_seconds
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape an error carries: collection, key, and options when it has some."""
        return to_json_dict(self)

    def describe(self) -> str:
        """``collection {field: 1, …}`` and its options, for a message."""
        key = ", ".join(f"{field}: {direction}" for field, direction in self.key)
        flags = (("unique", self.unique), ("partial", self.partial))
        extra = [word for word, on in flags if on]
        if self.expire_after_seconds is not None:
            extra.append(f"expireAfterSeconds: {self.expire_after_seconds}")
        return f"{self.collection} {{{key}}}" + (f" ({', '.join(extra)})" if extra else "")


def missing_indexes(db: Database[Any], required: Iterable[RequiredIndex]) -> list[RequiredIndex]:
    """The ``required`` indexes ``db`` lacks, read afresh (a missing collection has none)."""
    listed: dict[str, list[Mapping[str, Any]]] = {}
    missing = []
    for wanted in required:
        if wanted.collection not in listed:
            listed[wanted.collection] = list(db[wanted.collection].list_indexes())
        if not any(wanted.met_by(index) for index in listed[wanted.collection]):
            missing.append(wanted)
    return missing


def missing_error(missing: Sequence[RequiredIndex]) -> IndexMissingError:
    """The error naming every missing index by collection and key."""
    listed = "; ".join(index.describe() for index in missing)
    return IndexMissingError(
        f"ensure_indexes is false and {len(missing)} index(es) migronaut needs are missing: "
        f"{listed}. Create them, or let migronaut create them once (ensure_indexes = true)",
        {"key": "ensure_indexes", "missing": [index.to_dict() for index in missing]},
    )


def ensure_indexes(db: Database[Any], required: Sequence[RequiredIndex], *, create: bool) -> None:
    """Create those of ``required`` that are missing, or with ``create`` false only check.

    An index with the same key and options under another name (one an
    administrator made) counts as there. Idempotent.

    :raises IndexMissingError: ``create`` is false and some are missing; nothing
        was written.
    """
    missing = missing_indexes(db, required)
    if missing and not create:
        raise missing_error(missing)
    for index in missing:
        db[index.collection].create_index(list(index.key), **index.options())
