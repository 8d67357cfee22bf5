"""A job: one background migration as a coordinator, lane, dry run or watcher works it.

A :class:`Job` joins the registered spec with the file's functions for one
direction, and carries how the collection is split and read (partitioner, index
hint, shard-awareness) and how writes are guarded. :func:`job_for` is the one
place a job is built, so every worker of a migration reads and writes alike.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.indexes import has_index, version_hint, wanted_version_index
from migronaut_core.background.planning.partition import IdRangePartitioner, Partitioner, Plan
from migronaut_core.background.planning.shard import KeyedIdRangePartitioner, ShardPartitioner
from migronaut_core.background.runtime import LoadedBackground, Runtime
from migronaut_core.background.spec import (
    BackgroundFunctions,
    BackgroundSpec,
    Direction,
    exclude_bad_ids,
    in_canary,
    match_hash,
    match_of,
    only_ids,
    read_stored,
)
from migronaut_core.background.store import PlanDocument, StateDocument
from migronaut_core.background.undo import JournalWriter, journal_writer, restore_functions
from migronaut_core.errors import ChecksumMismatchError, TransactionsUnsupportedError

Document = dict[str, Any]


@dataclass
class Job:
    """One background migration as a lane or coordinator works it, in one direction."""

    name: str
    spec: BackgroundSpec
    fns: BackgroundFunctions
    direction: Direction
    match: Document
    partitioner: Partitioner
    hint: Any | None
    log: logging.Logger
    generation: int = 0
    cancel: CancelToken = field(default_factory=CancelToken)
    #: How the collection is split, for the plan and status: ``{"mode": "off"}``
    #: unless it is sharded (see :func:`partitioner_for`).
    sharding: dict[str, Any] = field(default_factory=lambda: {"mode": "off"})
    #: How a write is guarded: ``pipeline`` (``_id`` filter, the version/revision test
    #: inside the update; MongoDB 5.0+) or ``filter`` (the test in the filter).
    guard: Literal["pipeline", "filter"] = "filter"
    #: Keeps each batch's before-images before its guarded write: set for the
    #: forward passes of a migration with ``undo = "journal"``, else ``None``.
    journal: JournalWriter | None = None
    #: Whether this job is an undo (a revert pass restoring the journal's before-images).
    undo: bool = False
    #: The token of the failed-only retry this job's pass works (its ``match`` is
    #: narrowed to that retry's documents), None for an ordinary pass.
    replay: str | None = None
    #: Whether this job's passes migrate only its canary's subset (``background.canary``,
    #: not promoted yet): ``match`` is narrowed to it.
    canary: bool = False

    def scoped(self, match: Document) -> Document:
        """``match`` narrowed as this job's passes are (to the canary's subset, if any)."""
        if not self.canary or self.spec.canary is None:
            return match
        return in_canary(match, self.spec.canary)

    @property
    def collection(self) -> str:
        """The collection a declarative job rewrites (validated present for that mode)."""
        assert self.spec.collection is not None
        return self.spec.collection

    @property
    def source(self) -> int:
        return self.spec.from_version if self.direction == "forward" else self.spec.to_version

    @property
    def target(self) -> int:
        return self.spec.to_version if self.direction == "forward" else self.spec.from_version

    @property
    def transform_one(self) -> Callable[..., Any] | None:
        return self.fns.migrate if self.direction == "forward" else self.fns.revert

    @property
    def transform_many(self) -> Callable[..., Any] | None:
        return self.fns.migrate_batch if self.direction == "forward" else self.fns.revert_batch


@dataclass(frozen=True, slots=True)
class Splitting:
    """How a job splits and reads its collection.

    :param partitioner: plans and reads the partitions.
    :param hint: the index every read goes through (``None``: none to hint).
    :param sharding: what status says: ``{"mode": "off"}``, ``{"mode":
        "untargeted", "key"?}`` or ``{"mode": "shard", "key"}``.
    """

    partitioner: Partitioner
    hint: Any | None
    sharding: dict[str, Any]


def partitioner_for(rt: Runtime, spec: BackgroundSpec, direction: Direction) -> Splitting:
    """Choose how a background migration's collection is split.

    Along the shard key (:class:`~migronaut_core.background.planning.shard.ShardPartitioner`)
    on a sharded collection whose key can be read and whose sharded version
    index exists; by ``_id`` everywhere else — ``untargeted`` (said once per
    process) when the collection is sharded but that is not possible, with
    writes still carrying the shard key when it is known. Step migrations,
    ``background_shard_aware = "off"`` and unsharded deployments split by
    ``_id`` without asking anything of the cluster. Which of these applies is
    :func:`~migronaut_core.background.indexes.wanted_version_index`'s rule, the one
    that also says which version index converge creates.
    """
    if spec.mode == "step":
        return Splitting(IdRangePartitioner(), None, {"mode": "off"})
    assert spec.collection is not None
    wanted = wanted_version_index(rt, spec.collection, spec.field, spec.revision_field)
    if wanted.sharding == "off":
        return Splitting(IdRangePartitioner(), version_hint(rt, spec), {"mode": "off"})
    facts = wanted.facts
    if facts is None:
        rt.warn_once(
            f"shard-unknown:{spec.collection}",
            "%s: its shard key cannot be read (config needs clusterMonitor); background "
            "migrations over it are not shard-aware",
            spec.collection,
        )
        return Splitting(IdRangePartitioner(), version_hint(rt, spec), {"mode": "untargeted"})
    key = facts.key
    untargeted = {"mode": "untargeted", "key": key.to_document()}
    if not wanted.shard_keyed:
        rt.warn_once(
            f"shard-stamp:{spec.collection}",
            "%s: its shard key holds the version or revision field; background migrations "
            "over it are not shard-aware",
            spec.collection,
        )
        return Splitting(KeyedIdRangePartitioner(key), version_hint(rt, spec), untargeted)
    index = wanted.key
    if not has_index(rt, spec.collection, index):
        rt.warn_once(
            f"shard-index:{spec.collection}",
            "%s is sharded but has no %s index: background migrations over it are not "
            "shard-aware (declare versioning and converge)",
            spec.collection,
            "{" + ", ".join(f"{name}: {kind!r}" for name, kind in index) + "}",
        )
        return Splitting(KeyedIdRangePartitioner(key), version_hint(rt, spec), untargeted)
    partitioner = ShardPartitioner(
        facts,
        field=spec.field,
        source=spec.source_version(direction),
        chunks=lambda: rt.shards.chunks_of(facts),
    )
    return Splitting(partitioner, index, {"mode": "shard", "key": key.to_document()})


def sharding_of(job: Job, plan: Plan) -> dict[str, Any] | None:
    """What a plan records of its shard-awareness, for status (``None`` when off)."""
    mode = job.sharding.get("mode")
    if mode in (None, "off"):
        return None
    if mode == "untargeted":
        return dict(job.sharding)
    groups = {scope["group"] for scope in plan.partitions if "group" in scope}
    return {"mode": plan.method, "key": job.sharding.get("key"), "groups": len(groups)}


def plan_is_stale(job: Job, plan: PlanDocument | None) -> bool:
    """Whether a committed plan cannot be worked by this job: made by another
    partitioner (shard-awareness changed), or before a reshard."""
    if plan is None or job.spec.mode == "step":
        return False
    made_by = plan.get("partitioner")
    if made_by is not None and made_by != job.partitioner.id:
        return True
    return job.partitioner.stale(plan.get("epoch"))


def job_for(rt: Runtime, name: str, state: StateDocument, cancel: CancelToken | None = None) -> Job:
    """The job a lane or coordinator works: the registered spec, the file's functions.

    :raises ChecksumMismatchError: the file changed since it was registered (a
        deploy in progress, or an edit that needs ``repin``).
    """
    loaded = rt.load(name, tolerant=True)
    registered = state.get("checksum")
    if registered is not None and loaded.checksum != registered:
        raise ChecksumMismatchError(
            f"background migration {name} changed on disk since it was registered "
            f"({short_checksum(registered)} registered, {short_checksum(loaded.checksum)} on "
            "disk); finish the deploy, or pin the new version (migronaut background repin)",
            {
                "migration": name,
                "registered": short_checksum(registered),
                "on_disk": short_checksum(loaded.checksum),
            },
        )
    return build_job(rt, name, loaded, state, cancel=cancel)


def short_checksum(checksum: str) -> str:
    """The first 12 hex digits of a file checksum: enough to tell two releases apart."""
    return checksum[:12]


def build_job(
    rt: Runtime,
    name: str,
    loaded: LoadedBackground,
    state: StateDocument | None,
    *,
    cancel: CancelToken | None = None,
) -> Job:
    r"""The job for a loaded file and its state (None when unregistered), checksum unchecked.

    The registered spec wins over the file's; the state's direction, bad ``_id``\ s
    and generation apply; a started failed-only retry (``replay``) narrows the match
    to its documents instead; a canary not yet promoted narrows it to its subset. An
    undo's registration (``undo: "journal"``) runs the journal's restore (:mod:`.undo`)
    instead of the file's functions; the forward passes of a migration with
    ``undo = "journal"`` journal their batches.
    :func:`job_for` is the checked way in; a dry run calls this directly, since it
    reports a changed file instead of refusing it.
    """
    spec = read_stored(state["spec"], name=name) if state and state.get("spec") else loaded.spec
    direction: Direction = "revert" if state and state.get("direction") == "revert" else "forward"
    replay = state.get("replay") if state else None
    replaying = replay is not None and "ids" in replay
    undo = direction == "revert" and state is not None and state.get("undo") == "journal"
    generation = int(state.get("generation", 0)) if state else 0
    fns = restore_functions(rt, name, spec) if undo else loaded.fns
    journal = None
    if spec.undo == "journal" and direction == "forward":
        journal = journal_writer(rt, name, spec, generation)
    bad_ids = state.get("bad_ids") if state else None
    if spec.mode == "step":
        match: Document = {}
    elif replay is not None and replaying:
        match = only_ids(match_of(spec, direction), list(replay.get("ids") or []))
    else:
        match = exclude_bad_ids(match_of(spec, direction), list(bad_ids or []))
    canary = canary_active(spec, state, direction)
    if canary and spec.canary is not None:
        match = in_canary(match, spec.canary)
    splitting = partitioner_for(rt, spec, direction)
    return Job(
        name=name,
        spec=spec,
        fns=fns,
        direction=direction,
        match=match,
        partitioner=splitting.partitioner,
        hint=splitting.hint,
        log=logging.getLogger(f"migronaut.background.{name}"),
        generation=generation,
        cancel=cancel or CancelToken(),
        sharding=splitting.sharding,
        guard="pipeline" if rt.supports_pipeline_guard() else "filter",
        journal=journal,
        undo=undo,
        replay=replay["token"] if replay is not None and replaying else None,
        canary=canary,
    )


def canary_active(spec: BackgroundSpec, state: StateDocument | None, direction: Direction) -> bool:
    """Whether a forward pass migrates only the canary's subset: the spec has a canary
    that was not promoted yet."""
    if spec.canary is None or direction != "forward":
        return False
    canary = state.get("canary") if state is not None else None
    return canary is None or canary.get("phase") != "promoted"


def pass_match(job: Job) -> str:
    """The fingerprint of what a pass of ``job`` matches (a plan's ``match``).

    A failed-only retry's pass matches its own documents, a canary's its subset: their
    fingerprints differ from an ordinary pass's, so neither plan is taken for the other.
    """
    source = match_hash(job.spec, job.direction)
    if job.canary:
        source = f"{source}:canary"
    return source if job.replay is None else f"{source}:replay:{job.replay}"


def assert_transactions(rt: Runtime, name: str, spec: BackgroundSpec) -> None:
    """A transactional migration needs a replica set or a mongos.

    :raises TransactionsUnsupportedError: the server is standalone.
    """
    if spec.transaction is None or rt.supports_transactions():
        return
    raise TransactionsUnsupportedError(
        f"background migration {name} asks for transactions, which need a replica set or a "
        "sharded cluster; this server is standalone (run it with transaction: false)",
        {"migration": name},
    )
