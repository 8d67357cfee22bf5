"""Validating a background migration file: every key checked before anything is written.

:func:`resolve_spec` turns a file's ``background = {...}`` mapping and its
module-level functions into a :class:`~.model.BackgroundSpec` and a
:class:`~.model.BackgroundFunctions`; :func:`read_stored` reads a stored spec
back as strictly (but tolerant of keys another release added or left out).
Every mistake is a :class:`ConfigInvalidError` whose ``context`` is
``{"migration": <name>, "key": <key>}`` and whose message names the key and
what it expects, never the value it got. Filters go through a BSON round trip
on the way in, so a spec read back from MongoDB equals the one resolved from
the file (and has the same match hash). Pure: no database, no clock, no logging.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Final, TypeAlias, get_args

import bson
from bson.binary import UuidRepresentation
from bson.codec_options import CodecOptions
from bson.errors import BSONError

from migronaut_core.background.spec.model import (
    DEFAULT_UNDO_RETENTION_S,
    MIN_PARTITION_DOCS,
    UNDO_RETENTION_S,
    UPDATE_PARTITION_BATCHES,
    AdaptiveSettings,
    BackgroundFunctions,
    BackgroundSpec,
    CanarySettings,
    Mode,
    PartitionSettings,
    SoakSettings,
    ThrottleSettings,
    TransactionSettings,
    Transform,
    UndoMode,
    ValidatorSettings,
)
from migronaut_core.background.spec.stages import StageError, checked_stages, stamp_problem
from migronaut_core.checks import (
    MAX_INT64,
    check_int,
    choice_problem,
    collection_name_problem,
    duration_problem,
    duration_seconds,
    field_name_problem,
    int_problem,
    number_problem,
    wrong_type,
)
from migronaut_core.errors import ConfigInvalidError
from migronaut_core.health_limits import (
    DEFAULT_HEALTH,
    HealthLimitError,
    HealthSettings,
    parse_health,
)
from migronaut_core.windows import Window, WindowError, parse_windows

_SLICE_MS: Final = (100, 3_600_000)
#: The largest ``priority``: a migration's weight in the target's write budget.
MAX_PRIORITY: Final = 1_000
_FILTER_CODEC: Final[CodecOptions[dict[str, Any]]] = CodecOptions(
    uuid_representation=UuidRepresentation.STANDARD
)
#: An update-pipeline migration's default ``batch_size``, the largest a spec may
#: set: no document crosses the wire, so a batch's cost is the server's rewrite,
#: and every batch adds an id read, a durable intent note, a checkpoint and a
#: wait for its write concern; fewer, larger batches pay those less often. At the
#: default AIMD target (1 s) a healthy server rewrites 10,000 documents well
#: within it, so adaptive sizing does not shrink it back unless the server slows.
UPDATE_BATCH_SIZE: Final = 10_000
_FUNCTION_NAMES: Final = (
    "migrate",
    "migrate_batch",
    "revert",
    "revert_batch",
    "step",
    "revert_step",
    "throttle",
    "check",
)


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


def _checked(problem_of: Callable[[Any], str | None]) -> _Check:
    """A check that refuses what ``problem_of`` (a rule of :mod:`migronaut_core.checks`) finds."""

    def check(value: Any) -> Any:
        problem = problem_of(value)
        if problem is not None:
            raise _InvalidError(problem)
        return value

    return check


def _integer(low: int, high: int = MAX_INT64) -> _Check:
    check = _checked(lambda value: int_problem(value, low, high))
    return lambda value: int(check(value))


def _fraction(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, float) or not 0.0 < value < 1.0:
        raise _InvalidError(f"must be a number strictly between 0 and 1{wrong_type(value, float)}")
    return value


def _share(value: Any) -> float:
    """A share from 0 to 1, both ends included (an int 0 or 1 too)."""
    problem = number_problem(value, 0.0, 1.0)
    if problem is not None:
        raise _InvalidError(problem)
    return float(value)


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _InvalidError(f"must be True or False (got {type(value).__name__})")
    return value


def _choice(literal: Any) -> _Check:
    options = get_args(literal)
    return _checked(lambda value: choice_problem(value, options))


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


_field_name: Final = _checked(field_name_problem)
_collection_name: Final = _checked(collection_name_problem)


def _windows(value: Any) -> tuple[Window, ...]:
    """Maintenance windows (:func:`~migronaut_core.windows.parse_windows`); ``[]``: always open."""
    try:
        return parse_windows(value)
    except WindowError as error:
        raise _InvalidError(error.problem, *error.path) from None


def _w(value: Any) -> int | str:
    """Accept an acknowledged ``w``: the engine reads modified counts, ``w: 0`` has none."""
    if isinstance(value, str) and value:
        return value
    if int_problem(value, 1, 50) is None:
        return int(value)
    raise _InvalidError("must be an integer between 1 and 50, 'majority' or a tag set name")


def _stages(value: Any) -> list[dict[str, Any]]:
    try:
        return checked_stages(value, _FILTER_CODEC)
    except StageError as error:
        raise _InvalidError(
            f"{error}{wrong_type(value, list) if 'non-empty' in str(error) else ''}"
        ) from None


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


_VALIDATOR_KEYS: Final[Mapping[str, _Key]] = {"json_schema": _Key(_mapping, required=True)}


def _validator(value: Any) -> ValidatorSettings:
    """``"version"`` or ``{"json_schema": {...}}`` (a non-empty, BSON-encodable mapping)."""
    if value == "version":
        return ValidatorSettings("version")
    if not isinstance(value, Mapping):
        raise _InvalidError(
            "must be 'version' or a mapping {'json_schema': {...}}"
            f" (got {type(value).__name__ if not isinstance(value, str) else 'another string'})"
        )
    schema = _read(value, _VALIDATOR_KEYS)["json_schema"]
    if not schema:
        raise _InvalidError("must not be empty: an empty schema refuses nothing", "json_schema")
    try:
        normalised = bson.decode(bson.encode({"s": schema}, codec_options=_FILTER_CODEC))["s"]
    except (BSONError, TypeError, ValueError, OverflowError):
        raise _InvalidError("must be a document MongoDB can encode", "json_schema") from None
    return ValidatorSettings("json_schema", json_schema=normalised)


def _retention(value: Any) -> int:
    """``undo_retention``: seconds, or text such as ``"7d"`` (an hour to a year)."""
    problem = duration_problem(value, *UNDO_RETENTION_S)
    if problem is not None:
        raise _InvalidError(problem)
    seconds = duration_seconds(value)
    assert seconds is not None
    return seconds


# ─── Tables ───────────────────────────────────────────────────────────────────

_FILE_KEYS: Final[Mapping[str, _Key]] = {
    "collection": _Key(_optional(_collection_name), None),
    "field": _Key(_field_name),
    "from": _Key(_integer(0), required=True),
    "to": _Key(_integer(0), required=True),
    "filter": _Key(_mapping),
    "mode": _Key(_choice(Mode)),
    "batch_size": _Key(_integer(1, 10_000)),
    "max_parallel": _Key(_integer(1, 64), 4),
    "slice_ms": _Key(_integer(*_SLICE_MS), 120_000),
    "priority": _Key(_integer(1, MAX_PRIORITY), 1),
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
    "health": _Key(_switch, True),
    "windows": _Key(_optional(_windows), None),
    "update": _Key(_optional(_stages), None),
    "revert_update": _Key(_optional(_stages), None),
    "validator": _Key(_optional(_validator), None),
    "validator_soak": _Key(_mapping),
    "undo": _Key(_optional(_choice(UndoMode)), None),
    "undo_retention": _Key(_retention, DEFAULT_UNDO_RETENTION_S),
    "canary": _Key(_optional(_mapping), None),
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
    "min_partition_docs": _Key(_integer(1, 1_000_000_000)),
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
#: What each health limit may be (``None`` switches it off; flow control: ``True``/``None``).
_SOAK_KEYS: Final[Mapping[str, _Key]] = {
    "passes": _Key(_integer(1, 10_000), 1),
    "seconds": _Key(_integer(0, 2_592_000), 0),
}
_CANARY_KEYS: Final[Mapping[str, _Key]] = {
    "fraction": _Key(_optional(_fraction), None),
    "filter": _Key(_optional(_mapping), None),
    "shard": _Key(lambda value: value, None),
    "soak": _Key(_mapping),
    "checks": _Key(_mapping),
    "approval": _Key(_boolean, False),
}
_CANARY_CHECK_KEYS: Final[Mapping[str, _Key]] = {
    "sample": _Key(_integer(1, 1_000), 20),
    "max_drift": _Key(_share, 0.01),
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
    target_health: HealthSettings | None = DEFAULT_HEALTH,
) -> BackgroundSpec:
    """Cross-check the individually valid ``values`` and fill derived defaults."""
    mode = _mode_of(values)
    if values["collection"] is None and mode != "step":
        raise _InvalidError(f"is required (a string) for a {mode} migration", "collection")
    field = _pinned("field", values["field"], declared, "_v")
    revision_field = _pinned("revision_field", values["revision_field"], declared, None)
    if revision_field is not None and revision_field == field:
        raise _InvalidError("must differ from background.field", "revision_field")
    for key in ("update", "revert_update"):
        if values[key] is not None:
            _within(key, _stamps_untouched, values[key], field, revision_field)
    if values["from"] >= values["to"]:
        raise _InvalidError("must be greater than background.from", "to")
    raw_filter = {} if values["filter"] is _DERIVED else values["filter"]
    batch_size: int = values["batch_size"]
    if batch_size is _DERIVED:
        batch_size = UPDATE_BATCH_SIZE if mode == "update" else 500
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
        priority=values["priority"],
        max_passes=values["max_passes"],
        max_conflict_retries=values["max_conflict_retries"],
        max_document_errors=values["max_document_errors"],
        max_slice_failures=values["max_slice_failures"],
        transaction=_within("transaction", _transaction, values["transaction"], tolerant),
        write_concern=_within("write_concern", _write_concern, values["write_concern"], tolerant),
        revision_field=revision_field,
        partitions=_within(
            "partitions",
            _partitions,
            values["partitions"],
            values["max_parallel"],
            UPDATE_PARTITION_BATCHES * batch_size if mode == "update" else MIN_PARTITION_DOCS,
            tolerant,
        ),
        shard_concurrency=values["shard_concurrency"],
        adaptive=_within("adaptive", _adaptive, values["adaptive"], batch_size, tolerant),
        throttle=_within("throttle", _throttle, values["throttle"], tolerant),
        health=_within("health", _health, values["health"], tolerant, target_health),
        windows=values["windows"],
        reversible=reversible or values["revert_update"] is not None,
        update=values["update"],
        revert_update=values["revert_update"],
        validator=_finalizing(values["validator"], values["validator_soak"], mode, tolerant),
        validator_soak=_within("validator_soak", _soak, values["validator_soak"], tolerant),
        undo=_undo(values["undo"], mode, revision_field),
        undo_retention_s=values["undo_retention"],
        canary=_within("canary", _canary, values["canary"], mode, field, revision_field, tolerant),
    )


def _undo(undo: UndoMode | None, mode: Mode, revision_field: str | None) -> UndoMode | None:
    """``undo = "journal"`` journals Python rewrites only, and needs a revision to tell
    the migration's write from a later one."""
    if undo is None:
        return None
    if mode != "declarative":
        raise _InvalidError(
            f"is not supported in {mode} mode: only a declarative migration's documents are "
            "journaled (an update pipeline is written by the server without reading them; a "
            "step migration has no documents to journal)",
            "undo",
        )
    if revision_field is None:
        raise _InvalidError(
            "needs background.revision_field: the revision tells a document the migration "
            "wrote from one changed since",
            "undo",
        )
    return undo


def _mode_of(values: Mapping[str, Any]) -> Mode:
    """Return the mode: ``update`` is implied by an ``update`` pipeline and needs one."""
    given = values["mode"]
    if values["update"] is not None:
        if given not in (_DERIVED, "update"):
            raise _InvalidError("must be 'update' (or absent) beside background.update", "mode")
        if values["transaction"] not in (None, False):
            raise _InvalidError(
                "is not supported in update mode: each batch is one server-side update_many",
                "transaction",
            )
        return "update"
    if given == "update":
        raise _InvalidError(
            "is required (a list of stages) when background.mode is 'update'", "update"
        )
    if values["revert_update"] is not None:
        raise _InvalidError("needs background.update beside it", "revert_update")
    return "declarative" if given is _DERIVED else given


def _stamps_untouched(stages: list[dict[str, Any]], field: str, revision_field: str | None) -> None:
    problem = stamp_problem(stages, [name for name in (field, revision_field) if name is not None])
    if problem is not None:
        raise _InvalidError(problem)


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


def _finalizing(
    validator: ValidatorSettings | None, soak: Any, mode: Mode, tolerant: bool
) -> ValidatorSettings | None:
    """The validator, refused in step mode; a soak needs a validator beside it (in a file)."""
    if validator is not None and mode == "step":
        raise _InvalidError(
            "is not supported in step mode: a step migration has no version to validate",
            "validator",
        )
    if validator is None and soak is not _DERIVED and not tolerant:
        raise _InvalidError("needs background.validator beside it", "validator_soak")
    return validator


def _canary(
    value: Mapping[str, Any] | None,
    mode: Mode,
    field: str,
    revision_field: str | None,
    tolerant: bool,
) -> CanarySettings | None:
    """A canary: exactly one of ``fraction`` and ``filter``; ``shard`` is refused."""
    if value is None:
        return None
    if mode == "step":
        raise _InvalidError(
            "is not supported in step mode: a step migration has no documents to canary"
        )
    read = _read(value, _CANARY_KEYS, tolerant=tolerant)
    if read["shard"] is not None:
        raise _InvalidError(
            "is not supported yet: choose the canary by fraction or filter (a filter on "
            "the shard key's range reaches one shard's chunks)",
            "shard",
        )
    chosen = [key for key in ("fraction", "filter") if read[key] is not None]
    if len(chosen) != 1:
        raise _InvalidError(
            "needs exactly one of fraction (0 < f < 1) or filter (a query)"
            + (f" (got {' and '.join(chosen)})" if chosen else "")
        )
    subset = None
    if read["filter"] is not None:
        subset = _within("filter", _query, read["filter"], mode, field, revision_field)
        if not subset:
            raise _InvalidError("must not be empty: it would choose every document", "filter")
    checks = _within("checks", _read, _or_empty(read["checks"]), _CANARY_CHECK_KEYS)
    return CanarySettings(
        fraction=read["fraction"],
        filter=subset,
        soak=_within("soak", _soak, read["soak"], tolerant),
        sample=checks["sample"],
        max_drift=checks["max_drift"],
        approval=read["approval"],
    )


def _or_empty(value: Any) -> Any:
    return {} if value is _DERIVED else value


def _soak(value: Any, tolerant: bool) -> SoakSettings:
    return SoakSettings(**_read({} if value is _DERIVED else value, _SOAK_KEYS, tolerant=tolerant))


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


def _partitions(
    value: Any, max_parallel: int, min_partition_docs: int, tolerant: bool
) -> PartitionSettings:
    read = _read({} if value is _DERIVED else value, _PARTITION_KEYS, tolerant=tolerant)
    if read["max_partitions"] is _DERIVED:
        read["max_partitions"] = max(4 * max_parallel, 16)
    if read["min_partition_docs"] is _DERIVED:
        read["min_partition_docs"] = min_partition_docs
    return PartitionSettings(**read)


def _throttle(value: Any, tolerant: bool) -> ThrottleSettings:
    return ThrottleSettings(
        **_read({} if value is _DERIVED else value, _THROTTLE_KEYS, tolerant=tolerant)
    )


def _health(value: Any, tolerant: bool, base: HealthSettings | None) -> HealthSettings | None:
    """``True``/``None``: ``base`` (the target's); ``False``: off; a mapping: per-signal
    overrides of ``base`` (:func:`~migronaut_core.health_limits.parse_health`)."""
    try:
        return parse_health(value, base=base, tolerant=tolerant)
    except HealthLimitError as error:
        raise _InvalidError(error.problem, *error.path) from None


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
    target_health: HealthSettings | None = DEFAULT_HEALTH,
) -> tuple[BackgroundSpec, BackgroundFunctions]:
    """Validate a background migration module and return its spec and functions.

    :param name: the migration's id, used in every error.
    :param module: the imported module, any object with the same attributes,
        or a mapping of attribute names to values.
    :param versioning: the collection's declared ``{"field", "revision_field"}``
        (collection definitions), when it has one. A declared key is the
        default for the spec and must not be contradicted; keys other than
        these two are ignored.
    :param target_health: the target's ``background_health``: what the file's
        ``health`` starts from (``None``: the target switched health off).
    :raises ConfigInvalidError: anything wrong, with ``context["key"]`` naming
        the spec key (dotted for nested ones, such as ``transaction.timeout_ms``)
        or the module attribute (``migrate``, ``step``...) at fault.
    """
    export = _exporter(module)
    functions = _functions(name, export)
    try:
        declared = _declared(versioning)
        values = _read(export("background"), _FILE_KEYS)
        reversible = _reversible(_mode_of(values), functions)
        spec = _assemble(
            values, declared, reversible=reversible, tolerant=False, target_health=target_health
        )
    except _InvalidError as invalid:
        raise _config_error(name, invalid) from None
    _check_functions(name, spec.mode, functions)
    if functions.check is not None and spec.canary is None:
        raise _function_error(name, "check", "is a canary's check; set background.canary")
    return spec, functions


def read_stored(doc: Mapping[str, Any], *, name: str | None = None) -> BackgroundSpec:
    """Read back a spec stored by :meth:`BackgroundSpec.to_document`.

    Tolerant of what an older or newer release stored: a missing optional key
    takes its default, an unknown key is ignored. The values that are there are
    validated as strictly as a file's.

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
    if mode == "update":
        return False
    return functions.revert is not None or functions.revert_batch is not None


def _check_functions(name: str, mode: Mode, fns: BackgroundFunctions) -> None:
    """Refuse a missing, ambiguous or wrong-mode transform."""
    foreign: tuple[str, ...]
    if mode == "update":
        foreign = ("migrate", "migrate_batch", "revert", "revert_batch", "step", "revert_step")
        problem = "cannot be defined beside background.update: the pipeline is the transform"
    elif mode == "step":
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
    return check_int("slice_ms", value, *_SLICE_MS)
