"""Background migration specs: validation, storage form, match hashes, state moves.

A background migration file declares a ``background = {...}`` mapping and a few
module-level functions (DESIGN §3.1). This module turns them into a validated,
immutable :class:`BackgroundSpec` plus a :class:`BackgroundFunctions` bundle,
before anything is written: every mistake is a :class:`ConfigInvalidError`
whose ``context`` is ``{"migration": <name>, "key": <key>}`` and whose message
names the key and what it expects, never the value it got.

The spec is stored in the state document when the migration is registered
(:meth:`BackgroundSpec.to_document`) and read back from there by running
lanes (:meth:`BackgroundSpec.from_document`): the stored spec, not the file,
is what a registered migration runs by. Filters go through a BSON round trip
on the way in, so a spec read back from MongoDB equals the one resolved from
the file and has the same :func:`match_hash`.

The state machine of a background migration is here too: :data:`TERMINAL`,
the :func:`transition` table for control actions (pause, resume, cancel,
retry, reopen) and for the engine's own moves (plan, complete, fail,
unblock), and :func:`sources_of` for compare-and-set writes.

Everything here is pure: no database, no clock, no logging.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias, cast, get_args

import bson
from bson import json_util
from bson.binary import UuidRepresentation
from bson.codec_options import CodecOptions
from bson.errors import BSONError

from migronaut_core.errors import BackgroundConflictError, ConfigInvalidError
from migronaut_core.versioning import clone_document, version_filter

if TYPE_CHECKING:
    from migronaut_core.files import LoadedMigration

__all__ = [
    "MAX_CHECKPOINT_BYTES",
    "STATUSES",
    "TERMINAL",
    "Action",
    "AdaptiveSettings",
    "BackgroundFunctions",
    "BackgroundSpec",
    "ControlAction",
    "Direction",
    "Mode",
    "PartitionSettings",
    "Phase",
    "Status",
    "ThrottleSettings",
    "TransactionSettings",
    "Transition",
    "check_slice_ms",
    "exclude_bad_ids",
    "match_hash",
    "match_of",
    "resolve_loaded",
    "resolve_spec",
    "sources_of",
    "transition",
]

Mode: TypeAlias = Literal["declarative", "step"]
Direction: TypeAlias = Literal["forward", "revert"]
Status: TypeAlias = Literal[
    "pending", "blocked", "running", "paused", "completed", "failed", "cancelled"
]
Phase: TypeAlias = Literal["partition", "process", "replan"]
ControlAction: TypeAlias = Literal["pause", "resume", "cancel", "retry", "reopen"]
#: Control actions plus the engine's own moves.
Action: TypeAlias = Literal[
    "pause", "resume", "cancel", "retry", "reopen", "plan", "complete", "fail", "unblock"
]
Applied: TypeAlias = Literal["changed", "unchanged"]
Transform: TypeAlias = Callable[..., Any]

STATUSES: Final[tuple[Status, ...]] = get_args(Status)
#: Statuses nothing moves out of on its own; only a control action does.
TERMINAL: Final[frozenset[Status]] = frozenset({"completed", "failed", "cancelled"})
#: The largest checkpoint a ``step(ctx)`` may return (BSON size of ``{checkpoint: ...}``).
MAX_CHECKPOINT_BYTES: Final = 64 * 1024

_MAX_INT64: Final = 2**63 - 1
_MAX_NAME_BYTES: Final = 255
_SLICE_MS: Final = (100, 3_600_000)
_FILTER_CODEC: Final[CodecOptions[dict[str, Any]]] = CodecOptions(
    uuid_representation=UuidRepresentation.STANDARD
)
_FUNCTION_NAMES: Final = (
    "migrate",
    "migrate_batch",
    "revert",
    "revert_batch",
    "step",
    "revert_step",
    "throttle",
)


# ─── The spec ─────────────────────────────────────────────────────────────────


@dataclass(frozen=True, slots=True)
class TransactionSettings:
    """How a batch (or a step) runs inside a transaction.

    :param timeout_ms: the commit's time limit (100-600000, default 30000).
    :param max_retries: how often a transient transaction error is retried
        before the batch fails (0-50, default 8).
    """

    timeout_ms: int = 30_000
    max_retries: int = 8


@dataclass(frozen=True, slots=True)
class PartitionSettings:
    """How a pass is split into ``_id`` ranges.

    :param max_partitions: at most this many partitions per pass (1-10000;
        default ``max(4 * max_parallel, 16)``).
    :param sample_size: ``_id``s sampled to pick split points (1-100000, default 1000).
    :param sample_timeout_ms: the sample's time budget; past it the plan is
        marked degraded and uses fewer, larger ranges (100-600000, default 5000).
    :param estimate_above: matching documents counted exactly; past this many a
        pass's size is estimated from a random sample of the collection, so
        planning stops growing with it (1-1000000000, default 100000).
    """

    max_partitions: int = 16
    sample_size: int = 1_000
    sample_timeout_ms: int = 5_000
    estimate_above: int = 100_000


@dataclass(frozen=True, slots=True)
class ThrottleSettings:
    """Fixed pauses between batches and a replication-lag ceiling.

    :param pause_ms: sleep this long before every batch (0-3600000, default 0).
    :param max_lag_ms: wait while a secondary lags more than this
        (0-86400000), or ``None`` (default) to ignore replication lag.
    """

    pause_ms: int = 0
    max_lag_ms: int | None = None

    @property
    def active(self) -> bool:
        """Whether this throttle ever waits."""
        return self.pause_ms > 0 or self.max_lag_ms is not None


@dataclass(frozen=True, slots=True)
class AdaptiveSettings:
    """AIMD batch sizing: grow additively while batches are fast, shrink on load.

    A lane starts at the spec's ``batch_size`` clamped into
    ``[min_batch_size, max_batch_size]``; a batch faster than
    ``target_latency_ms`` adds ``increase`` documents, a slower or overloaded
    one multiplies the size by ``decrease``. At the floor, an overloaded lane
    also pauses, up to ``max_pause_ms`` between batches.

    :param min_batch_size: 1-10000; default ``max(1, batch_size // 10)``.
    :param max_batch_size: 1-10000, at least ``min_batch_size``; default ``batch_size``.
    :param increase: documents added per fast batch, 1-10000; default
        ``max(1, batch_size // 10)``.
    :param decrease: factor per slow batch, strictly between 0 and 1; default 0.5.
    :param target_latency_ms: 10-600000; default 1000.
    :param max_pause_ms: 0-600000; default 5000.
    """

    min_batch_size: int = 50
    max_batch_size: int = 500
    increase: int = 50
    decrease: float = 0.5
    target_latency_ms: int = 1_000
    max_pause_ms: int = 5_000


@dataclass(frozen=True, slots=True, kw_only=True)
class BackgroundSpec:
    """The validated ``background`` mapping of a migration file.

    Build it with :func:`resolve_spec` (from a file) or :meth:`from_document`
    (from the state document); both guarantee every invariant below. Direct
    construction skips validation and is meant for tests.

    - ``collection`` is ``None`` only in step mode;
    - ``field`` and ``revision_field`` are distinct top-level field names, never ``_id``;
    - ``0 <= from_version < to_version`` (version 0: documents without the field);
    - ``filter`` is a BSON-normalised query that never tests ``field`` or
      ``revision_field`` at top level, and is empty in step mode. Treat it as
      read-only; :func:`match_of` returns a copy to build queries from;
    - ``transaction`` / ``adaptive`` are ``None`` when off;
    - ``reversible`` says a revert function exists (``revert``/``revert_batch``,
      or ``revert_step`` in step mode).
    """

    collection: str | None = None
    from_version: int
    to_version: int
    field: str = "_v"
    filter: dict[str, Any] = dataclasses.field(default_factory=dict)
    mode: Mode = "declarative"
    batch_size: int = 500
    max_parallel: int = 4
    slice_ms: int = 30_000
    max_passes: int = 5
    max_conflict_retries: int = 3
    max_document_errors: int = 0
    max_slice_failures: int = 5
    transaction: TransactionSettings | None = None
    write_concern: dict[str, Any] | None = None
    revision_field: str | None = None
    partitions: PartitionSettings = dataclasses.field(default_factory=PartitionSettings)
    shard_concurrency: int | None = None
    adaptive: AdaptiveSettings | None = None
    throttle: ThrottleSettings = dataclasses.field(default_factory=ThrottleSettings)
    reversible: bool = False

    def source_version(self, direction: Direction) -> int:
        """Return the version a pass in ``direction`` reads (forward: ``from``)."""
        return self.to_version if direction == "revert" else self.from_version

    def target_version(self, direction: Direction) -> int:
        """Return the version a pass in ``direction`` writes (forward: ``to``)."""
        return self.from_version if direction == "revert" else self.to_version

    def to_document(self) -> dict[str, Any]:
        """Return the spec as stored in the state document.

        BSON- and (bar BSON values in ``filter``) JSON-safe, keyed like the
        file (``from``/``to``, snake_case), plus ``reversible``. Off switches
        are stored as ``False`` (``transaction``, ``adaptive``) or ``None``
        (``write_concern``, ``revision_field``, ``shard_concurrency``).
        """
        return {
            "collection": self.collection,
            "field": self.field,
            "from": self.from_version,
            "to": self.to_version,
            "filter": clone_document(self.filter),
            "mode": self.mode,
            "batch_size": self.batch_size,
            "max_parallel": self.max_parallel,
            "slice_ms": self.slice_ms,
            "max_passes": self.max_passes,
            "max_conflict_retries": self.max_conflict_retries,
            "max_document_errors": self.max_document_errors,
            "max_slice_failures": self.max_slice_failures,
            "transaction": _switch_document(self.transaction),
            "write_concern": dict(self.write_concern) if self.write_concern else None,
            "revision_field": self.revision_field,
            "partitions": dataclasses.asdict(self.partitions),
            "shard_concurrency": self.shard_concurrency,
            "adaptive": _switch_document(self.adaptive),
            "throttle": dataclasses.asdict(self.throttle),
            "reversible": self.reversible,
        }

    @classmethod
    def from_document(cls, doc: Mapping[str, Any], *, name: str | None = None) -> BackgroundSpec:
        """Read back a spec stored by :meth:`to_document`.

        Tolerant of what an older or newer release stored: a missing optional
        key takes its default, an unknown key is ignored. The values that are
        there are validated as strictly as a file's.

        :param name: the migration, for error messages.
        :raises ConfigInvalidError: a value is invalid, or ``from``/``to`` (or a
            declarative spec's ``collection``) is missing.
        """
        label = name if name is not None else "(stored spec)"
        try:
            values = _read(doc, _STORED_KEYS, tolerant=True)
            reversible = values.pop("reversible")
            return _assemble(values, {}, reversible=reversible, tolerant=True)
        except _InvalidError as invalid:
            raise _config_error(label, invalid) from None


def _switch_document(settings: TransactionSettings | AdaptiveSettings | None) -> Any:
    return False if settings is None else dataclasses.asdict(settings)


@dataclass(frozen=True, slots=True)
class BackgroundFunctions:
    """The module-level functions of a background migration file (``None`` when absent).

    Declarative mode: ``migrate(doc, ctx)`` or ``migrate_batch(docs, ctx)``
    (exactly one), optionally ``revert`` or ``revert_batch`` (at most one).
    Step mode: ``step(ctx)``, optionally ``revert_step(ctx)``. Either mode may
    define ``throttle(ctx)``. :func:`resolve_spec` guarantees these rules.
    """

    migrate: Transform | None = None
    migrate_batch: Transform | None = None
    revert: Transform | None = None
    revert_batch: Transform | None = None
    step: Transform | None = None
    revert_step: Transform | None = None
    throttle: Transform | None = None

    def transforms(self, direction: Direction) -> tuple[Transform | None, Transform | None]:
        """Return ``(per_document, per_batch)`` for ``direction``; one of them is set
        for ``forward``, and for ``revert`` when the migration is reversible."""
        if direction == "revert":
            return self.revert, self.revert_batch
        return self.migrate, self.migrate_batch

    def step_for(self, direction: Direction) -> Transform | None:
        """Return the step function of ``direction`` (``None``: not a step migration,
        or no way back)."""
        return self.revert_step if direction == "revert" else self.step


# ─── Validation machinery ─────────────────────────────────────────────────────


class _InvalidError(Exception):
    """A value that does not fit; ``path`` grows as it leaves nested mappings."""

    def __init__(self, problem: str, *path: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.path = path

    def under(self, key: str) -> _InvalidError:
        self.path = (key, *self.path)
        return self


_Check: TypeAlias = Callable[[Any], Any]
#: Marks a key that is absent and whose default is computed from other keys.
_DERIVED: Final = object()


@dataclass(frozen=True, slots=True)
class _Key:
    """One key of a mapping: how to check it, and what it is when absent."""

    check: _Check
    default: Any = _DERIVED
    required: bool = False


def _got(value: Any, expected: type | tuple[type, ...]) -> str:
    """Name the type a value had when it had the wrong one (its value never)."""
    if isinstance(value, expected) and not isinstance(value, bool):
        return ""
    return f" (got {type(value).__name__})"


def _integer(low: int, high: int = _MAX_INT64) -> _Check:
    span = f">= {low}" if high == _MAX_INT64 else f"between {low} and {high}"

    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise _InvalidError(f"must be an integer {span}{_got(value, int)}")
        return int(value)

    return check


def _fraction(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, float) or not 0.0 < value < 1.0:
        raise _InvalidError(f"must be a number strictly between 0 and 1{_got(value, float)}")
    return value


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _InvalidError(f"must be True or False (got {type(value).__name__})")
    return value


def _choice(*options: str) -> _Check:
    def check(value: Any) -> str:
        if not isinstance(value, str) or value not in options:
            raise _InvalidError(f"must be one of {', '.join(map(repr, options))}{_got(value, str)}")
        return value

    return check


def _optional(check: _Check) -> _Check:
    def optional(value: Any) -> Any:
        return None if value is None else check(value)

    return optional


def _mapping(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _InvalidError(f"must be a mapping (got {type(value).__name__})")
    return value


def _switch(value: Any) -> Any:
    """Accept the raw value of an on/off-or-settings key: a bool, ``None`` or a mapping."""
    if value is None or isinstance(value, bool | Mapping):
        return value
    raise _InvalidError(f"must be True, False or a mapping (got {type(value).__name__})")


def _fits_name(value: str) -> bool:
    """Whether ``value`` is valid UTF-8 (no lone surrogates) of at most 255 bytes."""
    try:
        return len(value.encode()) <= _MAX_NAME_BYTES
    except UnicodeEncodeError:
        return False


def _field_name(value: Any) -> str:
    if (
        not isinstance(value, str)
        or not value
        or value.startswith("$")
        or "." in value
        or "\0" in value
        or not _fits_name(value)
    ):
        raise _InvalidError(
            f"must be a top-level field name (no dots, no leading $){_got(value, str)}"
        )
    if value == "_id":
        raise _InvalidError("cannot be _id")
    return value


def _collection_name(value: Any) -> str:
    if (
        not isinstance(value, str)
        or not value
        or "$" in value
        or "\0" in value
        or value.startswith(".")
        or value.endswith(".")
        or not _fits_name(value)
    ):
        raise _InvalidError(f"must be a valid collection name{_got(value, str)}")
    if value.startswith("system."):
        raise _InvalidError("cannot name a system collection")
    return value


def _w(value: Any) -> int | str:
    """Accept an acknowledged ``w``: the engine reads modified counts, ``w: 0`` has none."""
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 50:
        return int(value)
    raise _InvalidError("must be an integer between 1 and 50, 'majority' or a tag set name")


def _suggestion(key: str, known: Sequence[str]) -> str:
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", key).lower()
    close = [snake] if snake in known else difflib.get_close_matches(key, known, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _read(raw: Any, table: Mapping[str, _Key], *, tolerant: bool = False) -> dict[str, Any]:
    """Check ``raw`` against ``table``; absent keys get their default (or :data:`_DERIVED`).

    ``tolerant`` ignores keys the table does not know (stored documents).
    """
    mapping = _mapping(raw)
    if not tolerant:
        for key in mapping:
            if key not in table:
                shown = str(key)[:60]
                raise _InvalidError(
                    f"is not a known setting{_suggestion(shown, list(table))}", shown
                )
    values: dict[str, Any] = {}
    for key, entry in table.items():
        if key in mapping:
            values[key] = _within(key, entry.check, mapping[key])
        elif entry.required:
            raise _InvalidError("is required", key)
        else:
            values[key] = entry.default
    return values


def _within(key: str, check: Callable[..., Any], *args: Any) -> Any:
    """Run ``check``, naming ``key`` in the path of whatever it refuses."""
    try:
        return check(*args)
    except _InvalidError as invalid:
        raise invalid.under(key) from None


def _config_error(migration: str, invalid: _InvalidError) -> ConfigInvalidError:
    key = ".".join(invalid.path) if invalid.path else "background"
    label = f"background.{key}" if invalid.path else "background"
    return ConfigInvalidError(
        f"background migration {migration}: {label} {invalid.problem}",
        {"migration": migration, "key": key},
    )


# ─── Tables ───────────────────────────────────────────────────────────────────

_FILE_KEYS: Final[Mapping[str, _Key]] = {
    "collection": _Key(_optional(_collection_name), None),
    "field": _Key(_field_name),
    "from": _Key(_integer(0), required=True),
    "to": _Key(_integer(0), required=True),
    "filter": _Key(_mapping),
    "mode": _Key(_choice("declarative", "step"), "declarative"),
    "batch_size": _Key(_integer(1, 10_000), 500),
    "max_parallel": _Key(_integer(1, 64), 4),
    "slice_ms": _Key(_integer(*_SLICE_MS), 30_000),
    "max_passes": _Key(_integer(1, 100), 5),
    "max_conflict_retries": _Key(_integer(0, 20), 3),
    "max_document_errors": _Key(_integer(0), 0),
    "max_slice_failures": _Key(_integer(1, 1_000), 5),
    "transaction": _Key(_switch, False),
    "write_concern": _Key(_optional(_mapping), None),
    "revision_field": _Key(_optional(_field_name)),
    "partitions": _Key(_mapping),
    "shard_concurrency": _Key(_optional(_integer(1, 64)), None),
    "adaptive": _Key(_switch, False),
    "throttle": _Key(_mapping),
}
_STORED_KEYS: Final[Mapping[str, _Key]] = {**_FILE_KEYS, "reversible": _Key(_boolean, False)}

_TRANSACTION_KEYS: Final[Mapping[str, _Key]] = {
    "timeout_ms": _Key(_integer(100, 600_000), 30_000),
    "max_retries": _Key(_integer(0, 50), 8),
}
_PARTITION_KEYS: Final[Mapping[str, _Key]] = {
    "max_partitions": _Key(_integer(1, 10_000)),
    "sample_size": _Key(_integer(1, 100_000), 1_000),
    "sample_timeout_ms": _Key(_integer(100, 600_000), 5_000),
    "estimate_above": _Key(_integer(1, 1_000_000_000), 100_000),
}
_THROTTLE_KEYS: Final[Mapping[str, _Key]] = {
    "pause_ms": _Key(_integer(0, 3_600_000), 0),
    "max_lag_ms": _Key(_optional(_integer(0, 86_400_000)), None),
}
_ADAPTIVE_KEYS: Final[Mapping[str, _Key]] = {
    "min_batch_size": _Key(_integer(1, 10_000)),
    "max_batch_size": _Key(_integer(1, 10_000)),
    "increase": _Key(_integer(1, 10_000)),
    "decrease": _Key(_fraction, 0.5),
    "target_latency_ms": _Key(_integer(10, 600_000), 1_000),
    "max_pause_ms": _Key(_integer(0, 600_000), 5_000),
}
_WRITE_CONCERN_KEYS: Final[Mapping[str, _Key]] = {
    "w": _Key(_w, required=True),
    "wtimeout": _Key(_integer(0, 86_400_000)),
    "j": _Key(_boolean),
}


# ─── Assembling a spec ────────────────────────────────────────────────────────


def _assemble(
    values: Mapping[str, Any],
    declared: Mapping[str, str | None],
    *,
    reversible: bool,
    tolerant: bool,
) -> BackgroundSpec:
    """Cross-check the individually valid ``values`` and fill derived defaults."""
    mode: Mode = values["mode"]
    if values["collection"] is None and mode == "declarative":
        raise _InvalidError("is required (a string) for a declarative migration", "collection")
    field = _pinned("field", values["field"], declared, "_v")
    revision_field = _pinned("revision_field", values["revision_field"], declared, None)
    if revision_field is not None and revision_field == field:
        raise _InvalidError("must differ from background.field", "revision_field")
    if values["from"] >= values["to"]:
        raise _InvalidError("must be greater than background.from", "to")
    raw_filter = {} if values["filter"] is _DERIVED else values["filter"]
    batch_size: int = values["batch_size"]
    return BackgroundSpec(
        collection=values["collection"],
        from_version=values["from"],
        to_version=values["to"],
        field=field,
        filter=_within("filter", _query, raw_filter, mode, field, revision_field),
        mode=mode,
        batch_size=batch_size,
        max_parallel=values["max_parallel"],
        slice_ms=values["slice_ms"],
        max_passes=values["max_passes"],
        max_conflict_retries=values["max_conflict_retries"],
        max_document_errors=values["max_document_errors"],
        max_slice_failures=values["max_slice_failures"],
        transaction=_within("transaction", _transaction, values["transaction"], tolerant),
        write_concern=_within("write_concern", _write_concern, values["write_concern"], tolerant),
        revision_field=revision_field,
        partitions=_within(
            "partitions", _partitions, values["partitions"], values["max_parallel"], tolerant
        ),
        shard_concurrency=values["shard_concurrency"],
        adaptive=_within("adaptive", _adaptive, values["adaptive"], batch_size, tolerant),
        throttle=_within("throttle", _throttle, values["throttle"], tolerant),
        reversible=reversible,
    )


def _pinned(key: str, given: Any, declared: Mapping[str, str | None], fallback: Any) -> Any:
    """Return ``key``'s value: the collection's declaration wins, a different explicit one fails."""
    if key not in declared:
        return fallback if given is _DERIVED else given
    if given is not _DERIVED and given != declared[key]:
        raise _InvalidError(
            f"conflicts with the collection's declared versioning ({declared[key]!r})", key
        )
    return declared[key]


def _query(
    value: Mapping[str, Any], mode: Mode, field: str, revision_field: str | None
) -> dict[str, Any]:
    """Return ``value`` as BSON would give it back (native UUIDs as standard binary)."""
    if not all(isinstance(key, str) for key in value):
        raise _InvalidError("must have string keys")
    for name in (field, revision_field):
        if name is not None and name in value:
            raise _InvalidError(f"must not test {name!r}: the engine matches versions itself")
    if value and mode == "step":
        raise _InvalidError("must be empty in step mode: a step migration matches nothing itself")
    try:
        return bson.decode(bson.encode(value, codec_options=_FILTER_CODEC))
    except (BSONError, TypeError, ValueError, OverflowError):
        raise _InvalidError("must be a query document MongoDB can encode") from None


def _transaction(value: Any, tolerant: bool) -> TransactionSettings | None:
    if value is None or value is False:
        return None
    return TransactionSettings(
        **_read({} if value is True else value, _TRANSACTION_KEYS, tolerant=tolerant)
    )


def _write_concern(value: Mapping[str, Any] | None, tolerant: bool) -> dict[str, Any] | None:
    if value is None:
        return None
    read = _read(value, _WRITE_CONCERN_KEYS, tolerant=tolerant)
    return {key: item for key, item in read.items() if item is not _DERIVED}


def _partitions(value: Any, max_parallel: int, tolerant: bool) -> PartitionSettings:
    read = _read({} if value is _DERIVED else value, _PARTITION_KEYS, tolerant=tolerant)
    if read["max_partitions"] is _DERIVED:
        read["max_partitions"] = max(4 * max_parallel, 16)
    return PartitionSettings(**read)


def _throttle(value: Any, tolerant: bool) -> ThrottleSettings:
    return ThrottleSettings(
        **_read({} if value is _DERIVED else value, _THROTTLE_KEYS, tolerant=tolerant)
    )


def _adaptive(value: Any, batch_size: int, tolerant: bool) -> AdaptiveSettings | None:
    if value is None or value is False:
        return None
    read = _read({} if value is True else value, _ADAPTIVE_KEYS, tolerant=tolerant)
    tenth = max(1, batch_size // 10)
    if read["max_batch_size"] is _DERIVED:
        read["max_batch_size"] = batch_size
    if read["min_batch_size"] is _DERIVED:
        read["min_batch_size"] = min(tenth, read["max_batch_size"])
    if read["increase"] is _DERIVED:
        read["increase"] = tenth
    if read["min_batch_size"] > read["max_batch_size"]:
        raise _InvalidError("must not exceed background.adaptive.max_batch_size", "min_batch_size")
    return AdaptiveSettings(**read)


# ─── Resolving a migration file ───────────────────────────────────────────────


def resolve_spec(
    name: str,
    module: ModuleType | Mapping[str, Any],
    *,
    versioning: Mapping[str, Any] | None = None,
) -> tuple[BackgroundSpec, BackgroundFunctions]:
    """Validate a background migration module and return its spec and functions.

    :param name: the migration's id, used in every error.
    :param module: the imported module, any object with the same attributes,
        or a mapping of attribute names to values.
    :param versioning: the collection's declared ``{"field", "revision_field"}``
        (collection definitions), when it has one. A declared key is the
        default for the spec and must not be contradicted; keys other than
        these two are ignored.
    :raises ConfigInvalidError: anything wrong, with ``context["key"]`` naming
        the spec key (dotted for nested ones, such as ``transaction.timeout_ms``)
        or the module attribute (``migrate``, ``step``...) at fault.
    """
    export = _exporter(module)
    functions = _functions(name, export)
    try:
        declared = _declared(versioning)
        values = _read(export("background"), _FILE_KEYS)
        reversible = _reversible(values["mode"], functions)
        spec = _assemble(values, declared, reversible=reversible, tolerant=False)
    except _InvalidError as invalid:
        raise _config_error(name, invalid) from None
    _check_functions(name, spec.mode, functions)
    return spec, functions


def resolve_loaded(
    loaded: LoadedMigration, *, versioning: Mapping[str, Any] | None = None
) -> tuple[BackgroundSpec, BackgroundFunctions]:
    """Resolve the spec of a loaded migration file (see :func:`resolve_spec`)."""
    return resolve_spec(loaded.name, loaded.module, versioning=versioning)


def _exporter(module: object) -> Callable[[str], Any]:
    if isinstance(module, Mapping):
        return module.get
    return lambda attribute: getattr(module, attribute, None)


def _declared(versioning: Mapping[str, Any] | None) -> dict[str, str | None]:
    if versioning is None:
        return {}
    _mapping(versioning)
    declared: dict[str, str | None] = {}
    if "field" in versioning:
        declared["field"] = _within("field", _field_name, versioning["field"])
    if "revision_field" in versioning:
        check = _optional(_field_name)
        declared["revision_field"] = _within("revision_field", check, versioning["revision_field"])
    return declared


def _functions(name: str, export: Callable[[str], Any]) -> BackgroundFunctions:
    found: dict[str, Transform | None] = {}
    for attribute in _FUNCTION_NAMES:
        value = export(attribute)
        if value is not None and not callable(value):
            raise _function_error(name, attribute, "must be a function")
        found[attribute] = value
    return BackgroundFunctions(**found)


def _reversible(mode: Mode, functions: BackgroundFunctions) -> bool:
    if mode == "step":
        return functions.revert_step is not None
    return functions.revert is not None or functions.revert_batch is not None


def _check_functions(name: str, mode: Mode, fns: BackgroundFunctions) -> None:
    """Refuse a missing, ambiguous or wrong-mode transform."""
    foreign: tuple[str, ...]
    if mode == "step":
        foreign = ("migrate", "migrate_batch", "revert", "revert_batch")
        problem = "is for declarative migrations; a step migration defines step(ctx)"
        if fns.step is None:
            raise _function_error(name, "step", "is required: background.mode is 'step'")
    else:
        foreign = ("step", "revert_step")
        problem = "is for step migrations; set background.mode to 'step' to use it"
        if fns.migrate is None and fns.migrate_batch is None:
            raise _function_error(name, "migrate", "is required (or migrate_batch)")
        if fns.migrate is not None and fns.migrate_batch is not None:
            raise _function_error(name, "migrate_batch", "and migrate are both defined; keep one")
        if fns.revert is not None and fns.revert_batch is not None:
            raise _function_error(name, "revert_batch", "and revert are both defined; keep one")
    for attribute in foreign:
        if getattr(fns, attribute) is not None:
            raise _function_error(name, attribute, problem)


def _function_error(name: str, attribute: str, problem: str) -> ConfigInvalidError:
    return ConfigInvalidError(
        f"background migration {name}: {attribute}() {problem}",
        {"migration": name, "key": attribute},
    )


def check_slice_ms(value: Any) -> int:
    """Return ``value`` if it is a valid slice length in milliseconds (100-3600000).

    :raises ConfigInvalidError: with ``context["key"] == "slice_ms"``.
    """
    try:
        return int(_integer(*_SLICE_MS)(value))
    except _InvalidError as invalid:
        raise ConfigInvalidError(f"slice_ms {invalid.problem}", {"key": "slice_ms"}) from None


# ─── What a pass matches ──────────────────────────────────────────────────────


def match_of(spec: BackgroundSpec, direction: Direction) -> dict[str, Any]:
    """Return the query for documents a pass in ``direction`` still has to rewrite.

    The spec's filter plus the source version's :func:`version_filter`. The
    filter never tests the version field (validated), so the merge cannot
    overwrite a clause. A fresh copy: the caller may extend it.
    """
    match = clone_document(spec.filter)
    match.update(version_filter(spec.field, spec.source_version(direction)))
    return match


def exclude_bad_ids(match: Mapping[str, Any], bad_ids: Sequence[Any]) -> dict[str, Any]:
    """Return ``match`` without the documents ``bad_ids`` (those that failed before).

    ``match`` itself (copied) when there are none, so the common query stays simple.
    """
    if not bad_ids:
        return dict(match)
    return {"$and": [dict(match), {"_id": {"$nin": list(bad_ids)}}]}


def match_hash(spec: BackgroundSpec | Mapping[str, Any], direction: Direction) -> str:
    """Return a stable fingerprint of what a pass in ``direction`` matches.

    Two specs get the same hash when their passes match the same documents
    the same way: same mode, collection, version field, source version,
    revision field and filter. Settings such as ``batch_size`` do not count.
    The filter is compared in a canonical form that ignores the order of
    clauses and of operators (it means nothing to the server) but keeps the
    order of embedded documents and arrays (an equality on ``{a, b}`` does not
    match ``{b, a}``) and every BSON type. A changed hash after a repin means
    the current plan must be replaced. Stable across processes and releases.

    :param spec: a spec, or a stored spec document (read with
        :meth:`BackgroundSpec.from_document`).
    :returns: 16 lowercase hex digits of a SHA-256.
    """
    if not isinstance(spec, BackgroundSpec):
        spec = BackgroundSpec.from_document(spec)
    payload = [
        "match/1",
        spec.mode,
        spec.collection,
        spec.field,
        spec.source_version(direction),
        spec.revision_field,
        _query_form(spec.filter),
    ]
    text = json.dumps(payload, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


_LOGICAL: Final = frozenset({"$and", "$or", "$nor"})


def _query_form(query: Mapping[str, Any]) -> list[Any]:
    """A query document: its clauses are ANDed, so their order is dropped."""
    return ["query", [[key, _clause_form(key, query[key])] for key in sorted(query)]]


def _clause_form(key: str, value: Any) -> Any:
    if key in _LOGICAL and isinstance(value, list):
        return ["all", [_query_or_literal(item) for item in value]]
    if key.startswith("$"):
        return _literal_form(value)
    return _condition_form(value)


def _condition_form(value: Any) -> Any:
    """The value a field is tested with: an operator document or a literal."""
    if not _is_operators(value):
        return _literal_form(value)
    parts = []
    for operator in sorted(value):
        operand = value[operator]
        if operator == "$not":
            parts.append([operator, _condition_form(operand)])
        elif operator == "$elemMatch" and isinstance(operand, Mapping):
            form = _condition_form(operand) if _is_operators(operand) else _query_form(operand)
            parts.append([operator, form])
        else:
            parts.append([operator, _literal_form(operand)])
    return ["operators", parts]


def _query_or_literal(item: Any) -> Any:
    return _query_form(item) if isinstance(item, Mapping) else _literal_form(item)


def _is_operators(value: Any) -> bool:
    return (
        isinstance(value, Mapping)
        and len(value) > 0
        and all(isinstance(key, str) and key.startswith("$") for key in value)
    )


def _literal_form(value: Any) -> Any:
    """A value compared as is: every order and every BSON type kept."""
    if isinstance(value, Mapping):
        return ["doc", [[str(key), _literal_form(item)] for key, item in value.items()]]
    if isinstance(value, list | tuple):
        return ["array", [_literal_form(item) for item in value]]
    return ["value", json_util.dumps(value, json_options=json_util.CANONICAL_JSON_OPTIONS)]


# ─── States and transitions ───────────────────────────────────────────────────


@dataclass(frozen=True, slots=True)
class Transition:
    """Where an action takes a background migration.

    ``applied == "unchanged"`` means the migration already is where the
    action leads (``to`` is its current status): nothing to write.
    """

    to: Status
    applied: Applied


_ACTIVE: Final[tuple[Status, ...]] = ("pending", "blocked", "running")

#: action -> status -> the status it moves to, or None: already there.
#: A status that is not listed is a conflict.
_MOVES: Final[Mapping[str, Mapping[str, Status | None]]] = {
    "pause": {**dict.fromkeys(_ACTIVE, "paused"), "paused": None},
    "resume": {"paused": "pending", **dict.fromkeys(_ACTIVE, None)},
    "cancel": {
        **dict.fromkeys((*_ACTIVE, "paused", "failed"), "cancelled"),
        "cancelled": None,
    },
    "retry": {"failed": "pending", "cancelled": "pending", **dict.fromkeys(_ACTIVE, None)},
    "reopen": {"completed": "pending"},
    "plan": {"pending": "running", "running": None},
    "complete": {"pending": "completed", "running": "completed", "completed": None},
    "fail": {**dict.fromkeys(_ACTIVE, "failed"), "failed": None},
    "unblock": {"blocked": "pending", "pending": None, "running": None},
}

#: What a refused move tells the person who asked for it.
_HINTS: Final[Mapping[tuple[str, str], str]] = {
    ("retry", "paused"): "resume it instead",
    ("retry", "completed"): "reopen it to run it again",
    ("resume", "failed"): "retry it instead",
    ("resume", "cancelled"): "retry it instead",
    ("resume", "completed"): "reopen it to run it again",
    ("pause", "completed"): "it has finished",
    ("cancel", "completed"): "it has finished; roll it back with down instead",
}


def transition(status: str, action: str, *, migration: str) -> Transition:
    """Return where ``action`` takes a migration that is ``status``.

    Control actions: ``pause``, ``resume`` (to ``pending``; the caller
    refines it to ``running`` or ``blocked``), ``cancel``, ``retry`` (the
    caller turns a retry of a completed migration into ``reopen``),
    ``reopen``. The engine's moves: ``plan`` (pending → running),
    ``complete``, ``fail``, ``unblock`` (blocked → pending). Pure: the
    caller writes the move with a compare-and-set on ``status``.

    :raises BackgroundConflictError: the action does not fit the status;
        ``context`` is ``{"migration", "action", "status"}``.
    :raises ConfigInvalidError: ``action`` is not an action.
    """
    moves = _MOVES.get(action)
    if moves is None:
        raise ConfigInvalidError(
            f"background migration {migration}: unknown action {str(action)[:40]!r}, "
            f"expected one of {', '.join(_MOVES)}",
            {"migration": migration, "key": "action"},
        )
    if status not in moves:
        hint = _HINTS.get((action, status))
        raise BackgroundConflictError(
            f"cannot {action} background migration {migration}: it is {status}"
            + (f" ({hint})" if hint else ""),
            {"migration": migration, "action": action, "status": status},
        )
    target = moves[status]
    if target is None:
        return Transition(to=cast(Status, status), applied="unchanged")
    return Transition(to=target, applied="changed")


def sources_of(action: Action) -> tuple[Status, ...]:
    """Return the statuses ``action`` really moves from (for a compare-and-set), in
    :data:`STATUSES` order."""
    moves = _MOVES[action]
    return tuple(status for status in STATUSES if moves.get(status) is not None)
