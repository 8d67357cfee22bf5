"""The spec model: a background migration's validated settings and its functions.

:class:`BackgroundSpec` is the validated ``background = {...}`` mapping of a
migration file (DESIGN §3.1), with its settings groups
(:class:`TransactionSettings`, :class:`PartitionSettings`,
:class:`ThrottleSettings`, :class:`AdaptiveSettings`, :class:`HealthSettings`), and
:class:`BackgroundFunctions` the module-level functions beside it. A spec is
stored in the state document when the migration is registered
(:meth:`BackgroundSpec.to_document`) and read back from there by running lanes
(:func:`~.validation.read_stored`): the stored spec, not the file, is what a
registered migration runs by. Instances come validated from
:mod:`~migronaut_core.background.spec.validation`; pure data, no database.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, Literal, TypeAlias

from migronaut_core.bson_values import clone_document
from migronaut_core.clock import aware
from migronaut_core.health_limits import HealthSettings
from migronaut_core.windows import Window

Mode: TypeAlias = Literal["declarative", "step", "update"]
Direction: TypeAlias = Literal["forward", "revert"]
#: How a migration can be undone without a hand-written ``revert``: ``journal`` keeps
#: each rewritten document's before-image (``background.undo``).
UndoMode: TypeAlias = Literal["journal"]
Transform: TypeAlias = Callable[..., Any]

#: The modes whose passes rewrite a collection's documents by version (all but step):
#: what the drift watcher upgrades with and the index audit checks.
REWRITING_MODES: Final = frozenset({"declarative", "update"})

#: The stages an ``update`` pipeline may use: those MongoDB accepts in an update pipeline.
UPDATE_STAGES: Final = frozenset(
    {"$set", "$addFields", "$unset", "$replaceWith", "$replaceRoot", "$project"}
)

#: The largest checkpoint a ``step(ctx)`` may return (BSON size of ``{checkpoint: ...}``).
#: Fewest documents worth a partition of their own, unless a spec says otherwise.
MIN_PARTITION_DOCS: Final = 1_000

#: Batches an update-pipeline partition is worth at least. Its batches are large
#: (10,000 by default) and cheap, so a partition holding one partial batch spends
#: as long on its claim, unoverlapped first read and release as on its rewrite;
#: with several, the read-ahead overlaps all but the first read.
UPDATE_PARTITION_BATCHES: Final = 4

MAX_CHECKPOINT_BYTES: Final = 64 * 1024

#: How long an undo journal keeps a before-image unless ``undo_retention`` says (7 days).
DEFAULT_UNDO_RETENTION_S: Final = 7 * 86_400
#: The shortest and longest ``undo_retention`` (one hour, one year).
UNDO_RETENTION_S: Final = (3_600, 365 * 86_400)


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
    :param min_partition_docs: fewest documents worth a partition of their own
        (1-1000000000; default :data:`MIN_PARTITION_DOCS`, and
        :data:`UPDATE_PARTITION_BATCHES` batches in update mode). Every
        partition pays a claim, a first read nothing overlaps, a checkpoint and a
        release; a pass smaller than twice this is one partition.
    """

    max_partitions: int = 16
    sample_size: int = 1_000
    sample_timeout_ms: int = 5_000
    estimate_above: int = 100_000
    min_partition_docs: int = MIN_PARTITION_DOCS


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


#: How ``background.validator`` names the new shape: ``version`` (the version field
#: equals ``to``) or ``json_schema`` (a ``$jsonSchema`` document).
ValidatorKind: TypeAlias = Literal["version", "json_schema"]


@dataclass(frozen=True, slots=True)
class ValidatorSettings:
    """The validator a completed migration finalizes with (``background.validator``).

    ``validator = "version"``: documents the migration's ``filter`` matches must carry
    the version field equal to ``to`` (documents outside the filter are exempt);
    ``validator = {"json_schema": {...}}``: documents must match the ``$jsonSchema``.

    :param kind: which of the two.
    :param json_schema: the schema (``kind == "json_schema"``), BSON-normalised.
    """

    kind: ValidatorKind
    json_schema: dict[str, Any] | None = None

    def to_document(self) -> str | dict[str, Any]:
        """The key as a file spells it: ``"version"`` or ``{"json_schema": {...}}``."""
        if self.kind == "version":
            return "version"
        return {"json_schema": clone_document(self.json_schema or {})}


@dataclass(frozen=True, slots=True)
class SoakSettings:
    """How long a new validator only warns before it refuses (``background.validator_soak``).

    The soak ends when both hold: ``passes`` clean checks in a row (coordinator
    steps that found no old-shape document) and ``seconds`` since the validator
    was set to warn (or since the last old-shape document was healed).

    :param passes: clean checks in a row, 1-10000 (default 1).
    :param seconds: 0-2592000 (30 days; default 0).
    """

    passes: int = 1
    seconds: int = 0

    def started(self, now: datetime) -> dict[str, Any]:
        """A soak (re)starting at ``now``: the fields it keeps (``since``, ``until``: its
        earliest end by time, ``clean_passes``)."""
        return {"since": now, "until": now + timedelta(seconds=self.seconds), "clean_passes": 0}

    def wait_ms(
        self, clean_passes: int, until: datetime | None, now: datetime, poll_ms: int
    ) -> int | None:
        """After a clean check (``clean_passes`` in a row with it): how long until the
        next, or None when the soak is over (enough clean checks, and ``until`` passed)."""
        left_ms = 0 if until is None else int((aware(until) - now).total_seconds() * 1000)
        if clean_passes >= self.passes and left_ms <= 0:
            return None
        return max(1, poll_ms if clean_passes < self.passes else min(poll_ms, left_ms))


#: How a canary's subset is chosen (``background.canary``): a ``fraction`` of the
#: documents (by a hash of ``_id``) or a ``filter`` (a query).
CanarySubset: TypeAlias = Literal["fraction", "filter"]
#: The hash buckets a canary ``fraction`` counts in: a document is in the subset when
#: ``abs(hash(_id) mod CANARY_BUCKETS) < fraction * CANARY_BUCKETS``.
CANARY_BUCKETS: Final = 10_000


@dataclass(frozen=True, slots=True)
class CanarySettings:
    """A canary (``background.canary``): the first pass migrates only a subset, then soaks.

    Exactly one of ``fraction`` and ``filter`` is set (the spec guarantees it).

    :param fraction: 0 < f < 1: documents whose hashed ``_id`` falls in the first
        ``f`` of :data:`CANARY_BUCKETS` buckets (stable across lanes and restarts).
    :param filter: a BSON-normalised query, ANDed with the migration's ``filter``.
    :param soak: clean checks in a row and seconds before the canary passes.
    :param sample: migrated documents the idempotence check re-runs (1-1000, default 20).
    :param max_drift: the largest share of old-shape documents in the subset a check
        tolerates (and heals) before it fails the canary (0-1, default 0.01).
    :param approval: a passing canary waits for ``approve`` instead of promoting.
    """

    fraction: float | None = None
    filter: dict[str, Any] | None = None
    soak: SoakSettings = dataclasses.field(default_factory=SoakSettings)
    sample: int = 20
    max_drift: float = 0.01
    approval: bool = False

    @property
    def subset(self) -> CanarySubset:
        """How the subset is chosen."""
        return "fraction" if self.fraction is not None else "filter"

    def to_document(self) -> dict[str, Any]:
        """The key as a file spells it (and the state stores it)."""
        chosen: dict[str, Any] = (
            {"fraction": self.fraction}
            if self.fraction is not None
            else {"filter": clone_document(self.filter or {})}
        )
        return {
            **chosen,
            "soak": dataclasses.asdict(self.soak),
            "checks": {"sample": self.sample, "max_drift": self.max_drift},
            "approval": self.approval,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class BackgroundSpec:
    """The validated ``background`` mapping of a migration file.

    Build it with :func:`~.validation.resolve_spec` (from a file) or
    :func:`~.validation.read_stored` (from the state document); both guarantee
    every invariant below. Direct construction skips validation and is meant for
    tests.

    - ``collection`` is ``None`` only in step mode;
    - ``mode == "update"`` exactly when ``update`` is set: a non-empty list of
      update-pipeline stages (:data:`UPDATE_STAGES`, one operator each) that
      never set or unset ``field`` or ``revision_field`` at top level (the
      engine stamps them). ``revert_update`` is set only beside ``update``.
      Update mode runs without ``transaction``: each batch is one server-side
      ``update_many``, every document's update atomic on its own, and a
      crashed batch is settled from its intent note, so a transaction would
      add a round trip and nothing a caller could rely on. Its ``batch_size``
      defaults to 10,000, the largest allowed (500 in the other modes): no
      document crosses the wire, and fewer batches mean fewer notes, checkpoints
      and write-concern waits;
    - ``field`` and ``revision_field`` are distinct top-level field names, never ``_id``;
    - ``0 <= from_version < to_version`` (version 0: documents without the field);
    - ``filter`` is a BSON-normalised query that never tests ``field`` or
      ``revision_field`` at top level, and is empty in step mode. Treat it as
      read-only; :func:`~migronaut_core.background.spec.match.match_of` returns a
      copy to build queries from;
    - ``transaction`` / ``adaptive`` / ``health`` are ``None`` when off;
    - ``windows`` is ``None`` when the file sets none (the target's
      ``background_windows`` apply), an empty tuple for "always open"
      (:mod:`migronaut_core.windows`);
    - ``reversible`` says a way back exists (``revert``/``revert_batch``,
      ``revert_step`` in step mode, ``revert_update`` in update mode);
    - ``validator`` is ``None`` in step mode; ``validator_soak`` keeps its
      defaults when ``validator`` is ``None``;
    - ``canary`` is ``None`` in step mode (a step migration has no documents to
      sample);
    - ``undo == "journal"`` only in declarative mode and with a ``revision_field``
      (what tells the migration's write from a later one); ``undo_retention_s``
      is how long a before-image is kept (an hour to a year, default 7 days).
    """

    collection: str | None = None
    from_version: int
    to_version: int
    field: str = "_v"
    filter: dict[str, Any] = dataclasses.field(default_factory=dict)
    mode: Mode = "declarative"
    batch_size: int = 500
    max_parallel: int = 4
    slice_ms: int = 120_000
    #: This migration's weight in the target's write budget (``background_budget``).
    priority: int = 1
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
    health: HealthSettings | None = dataclasses.field(default_factory=HealthSettings)
    windows: tuple[Window, ...] | None = None
    reversible: bool = False
    update: list[dict[str, Any]] | None = None
    revert_update: list[dict[str, Any]] | None = None
    validator: ValidatorSettings | None = None
    validator_soak: SoakSettings = dataclasses.field(default_factory=SoakSettings)
    undo: UndoMode | None = None
    undo_retention_s: int = DEFAULT_UNDO_RETENTION_S
    canary: CanarySettings | None = None

    def pipeline(self, direction: Direction) -> list[dict[str, Any]] | None:
        """Return a copy of the user's update stages for ``direction`` (``None``:
        not update mode, or no ``revert_update``)."""
        stages = self.revert_update if direction == "revert" else self.update
        return None if stages is None else [clone_document(stage) for stage in stages]

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
        are stored as ``False`` (``transaction``, ``adaptive``, ``health``) or ``None``
        (``write_concern``, ``revision_field``, ``shard_concurrency``,
        ``update``, ``revert_update``, ``validator``): running lanes take an update
        migration's pipelines from here, not from the file.
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
            "priority": self.priority,
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
            "health": False if self.health is None else self.health.to_document(),
            "windows": (None if self.windows is None else [w.to_document() for w in self.windows]),
            "reversible": self.reversible,
            "update": _stages_document(self.update),
            "revert_update": _stages_document(self.revert_update),
            "validator": None if self.validator is None else self.validator.to_document(),
            "validator_soak": dataclasses.asdict(self.validator_soak),
            "undo": self.undo,
            "undo_retention": self.undo_retention_s,
            "canary": None if self.canary is None else self.canary.to_document(),
        }


def _stages_document(stages: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    return None if stages is None else [clone_document(stage) for stage in stages]


def _switch_document(settings: TransactionSettings | AdaptiveSettings | None) -> Any:
    return False if settings is None else dataclasses.asdict(settings)


@dataclass(frozen=True, slots=True)
class BackgroundFunctions:
    """The module-level functions of a background migration file (``None`` when absent).

    Declarative mode: ``migrate(doc, ctx)`` or ``migrate_batch(docs, ctx)``
    (exactly one), optionally ``revert`` or ``revert_batch`` (at most one).
    Step mode: ``step(ctx)``, optionally ``revert_step(ctx)``. Update mode
    (``background.update``) defines no transform: the pipeline is one. Every
    mode may define ``throttle(ctx)``; a migration with a ``canary`` may define
    ``check(ctx)``.
    :func:`~migronaut_core.background.spec.validation.resolve_spec` guarantees these rules.
    """

    migrate: Transform | None = None
    migrate_batch: Transform | None = None
    revert: Transform | None = None
    revert_batch: Transform | None = None
    step: Transform | None = None
    revert_step: Transform | None = None
    throttle: Transform | None = None
    #: A canary's own check, ``check(ctx) -> bool | (bool, reason)`` (``background.canary``).
    check: Transform | None = None

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
