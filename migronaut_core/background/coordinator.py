"""The coordinator: plan a pass, watch its partitions drain, close it, decide what next.

One *step* runs under the migration's coordinator lock and starts from what
MongoDB says, so any number of coordinators in any number of processes may call
it; a step that finds the lock held answers ``busy``. A step answers:

- ``process`` — lanes have work (``lanes``: how many could start now);
- ``wait`` — nothing to do yet (``retry_after_ms``): leases draining, a deploy in
  progress (the file's checksum differs from the registered one), a lost plan race;
- ``done`` — completed, failed, cancelled, paused or blocked (``status``);
- ``busy`` — another coordinator holds the lock;
- ``superseded`` — a driver with rounds (Airflow) whose round is not the latest.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pendulum

from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.engine import Direction, Job
from migronaut_core.background.partition import IdRangePartitioner, Partitioner, Plan
from migronaut_core.background.runtime import Runtime
from migronaut_core.background.scrub import error_text
from migronaut_core.background.shard import (
    UNKNOWN,
    KeyedIdRangePartitioner,
    ShardPartitioner,
    sharded_version_index_key,
)
from migronaut_core.background.spec import (
    TERMINAL,
    BackgroundSpec,
    exclude_bad_ids,
    match_hash,
    match_of,
)
from migronaut_core.background.steps import STEP_SCOPE
from migronaut_core.background.store import MAX_BAD_IDS, MAX_DOC_ERRORS, STATE_SCHEMA
from migronaut_core.errors import (
    ChecksumMismatchError,
    LockAlreadyHeldError,
    MigrationFileNotFoundError,
    TransactionsUnsupportedError,
)
from migronaut_core.versioning import canonical_id_key

log = logging.getLogger("migronaut_core.background")

#: How often a driver without wake-ups looks at its lanes again.
POLL_MS = 5_000

_DEGRADED = {
    "sample-timeout": "the sample ran out of time; some ranges stay whole this pass (fewer lanes)",
    "sample-failed": "the server could not sample shard keys; partitions follow chunk boundaries",
    "ungrouped": "more runs of chunks than max_partitions; merged blocks span shards and are "
    "not capped by shard_concurrency",
}


@dataclass(frozen=True, slots=True)
class Driver:
    """Who drives a coordinator: ``local`` (this process), ``airflow`` (DAG runs), …

    Drivers with rounds hand each chain of steps a round number; a step carrying a
    round that is not the latest bows out (``superseded``). ``round=None`` asks
    for a new round.
    """

    kind: str = "local"
    ref: str | None = None
    round: int | None = None
    rounds: bool = False


@dataclass(frozen=True, slots=True)
class Answer:
    """A coordinator step's answer."""

    next: str
    status: str | None = None
    lanes: int = 0
    retry_after_ms: int = 0
    reason: str | None = None
    generation: int | None = None
    #: The current plan's token (a process answer): what the lanes of this round work.
    plan: str | None = None
    counts: dict[str, int] | None = None
    round: int | None = None
    waits_for: list[str] = field(default_factory=list)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = {
            "next": self.next,
            "status": self.status,
            "lanes": self.lanes,
            "retry_after_ms": self.retry_after_ms,
            "reason": self.reason,
            "generation": self.generation,
            "plan": self.plan,
            "counts": self.counts,
            "round": self.round,
            "waits_for": self.waits_for,
            "error": self.error,
        }
        return {key: value for key, value in data.items() if value not in (None, [])}


def _retry_soon(rt: Runtime, reason: str) -> Answer:
    return Answer("wait", reason=reason, retry_after_ms=max(1, rt.ttl_ms // 2))


# -- jobs ------------------------------------------------------------------------------


def version_index_key(spec: BackgroundSpec) -> list[tuple[str, int]]:
    return [(spec.field, 1), ("_id", 1)]


def same_index_key(live: Mapping[str, Any], wanted: Sequence[tuple[str, Any]]) -> bool:
    """Whether an index's key pattern is ``wanted``: same fields, order and directions."""
    have = list(live.items())
    if len(have) != len(wanted):
        return False
    for (name, kind), (wanted_name, wanted_kind) in zip(have, wanted, strict=True):
        if name != wanted_name or _direction(kind) != _direction(wanted_kind):
            return False
    return True


def _direction(kind: Any) -> Any:
    """An index key's direction, comparable across numeric types (``1``, ``1.0``, ``Int64(1)``)."""
    if isinstance(kind, int | float) and not isinstance(kind, bool):
        return float(kind)
    return str(kind)


def _has_index(rt: Runtime, collection: str, wanted: Sequence[tuple[str, Any]]) -> bool:
    return any(same_index_key(key, wanted) for key in rt.index_keys(collection))


def version_hint(rt: Runtime, spec: BackgroundSpec) -> list[tuple[str, int]] | None:
    """The version index to hint, when the collection has it; warn once when it does not."""
    assert spec.collection is not None
    if _has_index(rt, spec.collection, version_index_key(spec)):
        return version_index_key(spec)
    rt.warn_once(
        f"index:{spec.collection}",
        "%s has no {%s: 1, _id: 1} index: background migrations over it scan the collection "
        "(create it, or declare versioning and converge)",
        spec.collection,
        spec.field,
    )
    return None


def probe_hint(rt: Runtime, spec: BackgroundSpec) -> list[tuple[str, Any]] | None:
    """The index a drift probe (one equality on the version field) reads through.

    The version index; else any index led by the version field ascending — on a
    sharded collection, the version index that carries the shard key; else none
    (warned once, as :func:`version_hint` does).
    """
    assert spec.collection is not None
    if _has_index(rt, spec.collection, version_index_key(spec)):
        return version_index_key(spec)
    for key in rt.index_keys(spec.collection):
        first = next(iter(key.items()), None)
        if first is not None and first[0] == spec.field and _direction(first[1]) == 1.0:
            return list(key.items())
    return version_hint(rt, spec)


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

    Along the shard key (:class:`~migronaut_core.background.shard.ShardPartitioner`)
    on a sharded collection whose key can be read and whose sharded version
    index exists; by ``_id`` everywhere else — ``untargeted`` (said once per
    process) when the collection is sharded but that is not possible, with
    writes still carrying the shard key when it is known. Step migrations,
    ``background_shard_aware = "off"`` and unsharded deployments split by
    ``_id`` without asking anything of the cluster.
    """
    if spec.mode == "step":
        return Splitting(IdRangePartitioner(), None, {"mode": "off"})
    assert spec.collection is not None
    if rt.shard_aware == "off" or not rt.shards.is_sharded():
        return Splitting(IdRangePartitioner(), version_hint(rt, spec), {"mode": "off"})
    facts = rt.shards.sharding_of(f"{rt.db.name}.{spec.collection}")
    if facts is None:
        return Splitting(IdRangePartitioner(), version_hint(rt, spec), {"mode": "off"})
    if facts is UNKNOWN:
        rt.warn_once(
            f"shard-unknown:{spec.collection}",
            "%s: its shard key cannot be read (config needs clusterMonitor); background "
            "migrations over it are not shard-aware",
            spec.collection,
        )
        return Splitting(IdRangePartitioner(), version_hint(rt, spec), {"mode": "untargeted"})
    key = facts.key
    untargeted = {"mode": "untargeted", "key": key.to_document()}
    index = sharded_version_index_key(spec.field, key)
    stamped = {spec.field, spec.revision_field}
    if any(name in stamped for name in key.names):
        rt.warn_once(
            f"shard-stamp:{spec.collection}",
            "%s: its shard key holds the version or revision field; background migrations "
            "over it are not shard-aware",
            spec.collection,
        )
        return Splitting(KeyedIdRangePartitioner(key), version_hint(rt, spec), untargeted)
    if not _has_index(rt, spec.collection, index):
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


def plan_is_stale(job: Job, plan: Mapping[str, Any] | None) -> bool:
    """Whether a committed plan cannot be worked by this job: made by another
    partitioner (shard-awareness changed), or before a reshard."""
    if plan is None or job.spec.mode == "step":
        return False
    made_by = plan.get("partitioner")
    if made_by is not None and made_by != job.partitioner.id:
        return True
    return job.partitioner.stale(plan.get("epoch"))


def job_for(
    rt: Runtime, name: str, state: Mapping[str, Any], cancel: CancelToken | None = None
) -> Job:
    """The job a lane or coordinator works: the registered spec, the file's functions.

    :raises ChecksumMismatchError: the file changed since it was registered (a
        deploy in progress, or an edit that needs ``repin``).
    """
    loaded = rt.load(name, tolerant=True)
    registered = state.get("checksum")
    if registered is not None and loaded.checksum != registered:
        raise ChecksumMismatchError(
            f"background migration {name} changed on disk since it was registered; finish the "
            "deploy, or pin the new version (migronaut background repin)",
            {"migration": name},
        )
    spec = BackgroundSpec.from_document(state["spec"]) if state.get("spec") else loaded.spec
    direction: Direction = "revert" if state.get("direction") == "revert" else "forward"
    step_mode = spec.mode == "step"
    match = (
        {}
        if step_mode
        else exclude_bad_ids(match_of(spec, direction), list(state.get("bad_ids") or []))
    )
    splitting = partitioner_for(rt, spec, direction)
    return Job(
        name=name,
        spec=spec,
        fns=loaded.fns,
        direction=direction,
        match=match,
        partitioner=splitting.partitioner,
        hint=splitting.hint,
        log=logging.getLogger(f"migronaut.background.{name}"),
        generation=int(state.get("generation", 0)),
        cancel=cancel or CancelToken(),
        sharding=splitting.sharding,
        guard="pipeline" if rt.supports_pipeline_guard() else "filter",
    )


# -- a step ----------------------------------------------------------------------------


def coordinate(
    rt: Runtime, name: str, *, driver: Driver | None = None, cancel: CancelToken | None = None
) -> Answer:
    """Run one coordinator step under the migration's coordinator lock."""
    lock = rt.lock_for(name)
    try:
        lock.acquire()
    except LockAlreadyHeldError:
        return Answer("busy", retry_after_ms=max(1, rt.ttl_ms // 2))
    with lock:
        return _step(rt, name, driver or Driver(), cancel or CancelToken())


def _step(rt: Runtime, name: str, driver: Driver, cancel: CancelToken) -> Answer:
    state = rt.store.get(name)
    if state is None:
        return Answer("done", status="unregistered")
    if int(state.get("schema", 1)) > STATE_SCHEMA:
        rt.warn_once(
            f"schema:{name}",
            "%s was registered by a newer release; waiting for a process of that release",
            name,
        )
        return _retry_soon(rt, "newer-schema")
    if state["status"] in TERMINAL or state["status"] == "paused":
        return Answer("done", status=state["status"])
    if state["status"] == "blocked":
        unblocked = try_unblock(rt, state)
        if unblocked is None:
            current = rt.store.get(name) or state
            return Answer("done", status="blocked", waits_for=list(current.get("waits_for", [])))
        state = unblocked
    round_ = None
    if driver.rounds:
        current_round = state.get("round")
        if driver.round is None:
            round_ = int(current_round or 0) + 1
        elif driver.round != current_round:
            return Answer("superseded", round=driver.round)
        else:
            round_ = driver.round
    coordinator: dict[str, Any] = {"kind": driver.kind, "at": pendulum.now("UTC")}
    if driver.ref is not None:
        coordinator["ref"] = driver.ref
    rt.store.set(name, {"coordinator": coordinator, **({"round": round_} if round_ else {})})
    answer = _coordinate_pass(rt, name, state, cancel)
    if round_ is None:
        return answer
    return Answer(**{**_fields(answer), "round": round_})


def _fields(answer: Answer) -> dict[str, Any]:
    return {slot: getattr(answer, slot) for slot in Answer.__slots__}


def _coordinate_pass(
    rt: Runtime, name: str, initial: dict[str, Any], cancel: CancelToken
) -> Answer:
    state = initial
    try:
        job = job_for(rt, name, state, cancel)
    except (ChecksumMismatchError, MigrationFileNotFoundError) as exc:
        log.warning("%s: %s", name, exc.message)
        return _retry_soon(rt, "checksum")
    try:
        assert_transactions(rt, name, job.spec)
    except TransactionsUnsupportedError as exc:
        return fail_state(rt, state, exc.message)
    source_hash = match_hash(job.spec, job.direction)
    for _ in range(job.spec.max_passes + 2):
        if cancel.cancelled:
            return _retry_soon(rt, "stopping")
        # Resharded (or its shard-awareness changed) since this plan: its ranges mean
        # nothing now. Re-split the same pass; the version filter skips what is done.
        if state.get("phase") == "process" and plan_is_stale(job, state.get("plan")):
            log.warning(
                "%s: its plan no longer fits %s (resharded, or shard-awareness changed); "
                "replanning",
                name,
                job.collection,
            )
            state = (
                rt.store.cas(
                    name,
                    {"phase": "process", "plan.token": state["plan"]["token"]},
                    {"$set": {"phase": "replan"}},
                )
                or rt.store.get(name)
                or state
            )
        replanning = state.get("phase") == "replan"
        if replanning and state.get("plan") is not None:
            plan_token = state["plan"]["token"]
            rt.store.supersede(name, generation=state["generation"], plan=plan_token)
            if rt.store.live_leases(name) > 0:
                return _retry_soon(rt, "replan-draining")
            state = (
                rt.store.cas(name, {"phase": "replan"}, {"$set": {"phase": "partition"}}) or state
            )
        plan = state.get("plan")
        if state.get("phase") != "process" or plan is None or plan.get("match") != source_hash:
            planned = plan_pass(rt, job, state, source_hash, new_pass=not replanning)
            if isinstance(planned, Answer):
                return planned
            state, empty = planned
            if empty:
                closed = finalize(rt, job, state)
                if isinstance(closed, Answer):
                    return closed
                state = closed
                continue
        if state["status"] == "pending":
            moved = rt.store.move(name, from_statuses=["pending"], to="running", action="plan")
            state = moved or state
        rt.store.reap(name)
        counts = rt.store.partition_counts(
            name, generation=state["generation"], plan=state["plan"]["token"]
        )
        if counts.open > 0:
            claimable = counts.pending + (counts.running - counts.leased)
            lanes = max(0, min(claimable, job.spec.max_parallel - counts.leased))
            return Answer(
                "process",
                status=state["status"],
                lanes=lanes,
                generation=state["generation"],
                plan=state["plan"]["token"],
                counts=counts.to_dict(),
                retry_after_ms=POLL_MS,
            )
        closed = finalize(rt, job, state)
        if isinstance(closed, Answer):
            return closed
        state = closed
    return _retry_soon(rt, "passes")


def plan_pass(
    rt: Runtime, job: Job, state: dict[str, Any], source_hash: str, *, new_pass: bool = True
) -> Answer | tuple[dict[str, Any], bool]:
    """Split what still matches into partitions and commit them under a fresh plan token."""
    spec = job.spec
    if spec.mode == "step":
        plan = Plan(
            "step", estimate=0, at_least=False, partitions=[dict(STEP_SCOPE)], degraded=None
        )
    else:
        plan = job.partitioner.plan(
            rt.db[job.collection],
            match=job.match,
            hint=job.hint,
            max_parallel=spec.max_parallel,
            settings=spec.partitions,
            shard_concurrency=spec.shard_concurrency,
        )
    pass_number = int(state.get("pass", 0)) + (1 if new_pass else 0)
    expected: dict[str, Any] = {"status": {"$in": ["pending", "running"]}}
    if state.get("checksum") is not None:
        expected["checksum"] = state["checksum"]
    now = pendulum.now("UTC")
    plan_fields: dict[str, Any] = {
        "partitioner": job.partitioner.id,
        "method": plan.method,
        "estimate": plan.estimate,
        "match": source_hash,
    }
    if plan.at_least:
        plan_fields["at_least"] = True
    if plan.approximate:
        plan_fields["approximate"] = True
    if plan.degraded:
        plan_fields["degraded"] = plan.degraded
    if plan.epoch:
        plan_fields["epoch"] = plan.epoch
    sharding = None if spec.mode == "step" else sharding_of(job, plan)
    if sharding is not None:
        plan_fields["sharding"] = sharding
    committed = rt.store.commit_plan(
        state["_id"],
        generation=int(state.get("generation", 0)),
        previous_token=(state.get("plan") or {}).get("token"),
        new_pass=new_pass,
        expected=expected,
        plan=plan_fields,
        scopes=plan.partitions,
        fields={
            "pass": pass_number,
            "last_progress_at": now,
            **({} if state.get("started_at") else {"started_at": now}),
        },
    )
    if committed is None:
        return _retry_soon(rt, "plan-race")
    rt.store.drop_foreign_plans(state["_id"], committed["plan"]["token"])
    rt.emit(
        "background:partitioned",
        {
            "migration": state["_id"],
            "generation": committed["generation"],
            "pass": pass_number,
            "partitions": len(plan.partitions),
            "estimate": plan.estimate,
            "at_least": plan.at_least,
            "approximate": plan.approximate,
            "method": plan.method,
            "degraded": plan.degraded,
        },
    )
    if plan.degraded:
        log.warning("%s: %s", state["_id"], _DEGRADED.get(plan.degraded, plan.degraded))
    return committed, not plan.partitions


def _merged_bad_ids(*lists: Sequence[Any]) -> list[Any]:
    seen: set[str] = set()
    merged = []
    for ids in lists:
        for value in ids:
            key = canonical_id_key(value)
            if key not in seen:
                seen.add(key)
                merged.append(value)
    return merged[: MAX_BAD_IDS + 1]


def _roll_up(rt: Runtime, state: dict[str, Any]) -> dict[str, Any]:
    """Add a generation's counters to the totals, once (idempotent after a crash)."""
    name, generation = state["_id"], int(state["generation"])
    if int(state.get("rolled_generation", 0)) >= generation:
        return state
    rolled = rt.store.generation_totals(name, generation)
    increments = {f"totals.{key}": value for key, value in rolled.totals.items() if value}
    fields: dict[str, Any] = {
        "rolled_generation": generation,
        "bad_ids": _merged_bad_ids(state.get("bad_ids") or [], rolled.bad_ids),
        "updated_at": pendulum.now("UTC"),
    }
    if rolled.doc_errors:
        fields["doc_errors"] = [*(state.get("doc_errors") or []), *rolled.doc_errors][
            -MAX_DOC_ERRORS:
        ]
    if rolled.failed_partitions:
        fields["failed_partitions"] = rolled.failed_partitions
        fields["last_error"] = rolled.last_error
    update: dict[str, Any] = {"$set": fields}
    if increments:
        update["$inc"] = increments
    updated = rt.store.cas(name, {"rolled_generation": {"$lt": generation}}, update)
    return updated or rt.store.get(name) or state


def finalize(rt: Runtime, job: Job, state: dict[str, Any]) -> Answer | dict[str, Any]:
    """Close a pass: roll its counters up, then complete, fail, or start another pass."""
    name = state["_id"]
    generation = int(state["generation"])
    state = _roll_up(rt, state)
    if int(state.get("failed_partitions") or 0) > 0:
        return fail_state(
            rt,
            state,
            f"{state['failed_partitions']} partition(s) failed: {state.get('last_error')}",
        )
    if _remaining(rt, job, state) == 0:
        return _complete(rt, job, state, generation)
    if int(state.get("pass", 0)) >= job.spec.max_passes:
        return fail_state(
            rt,
            state,
            f"old-shape documents keep appearing after {state.get('pass')} pass(es); is an old "
            "version of the application still writing them?",
        )
    rt.emit(
        "background:pass",
        {
            "migration": name,
            "pass": state.get("pass"),
            "generation": generation,
            "totals": state.get("totals", {}),
        },
    )
    following = rt.store.cas(
        name,
        {"generation": generation, "phase": "process"},
        {"$set": {"phase": "partition", "updated_at": pendulum.now("UTC")}},
    )
    rt.store.drop_generations(name, generation - 1)
    return following or rt.store.get(name) or state


def _remaining(rt: Runtime, job: Job, state: dict[str, Any]) -> int:
    """Whether old-shape documents are left (0 or 1); a step migration has none to count."""
    if job.spec.mode == "step":
        return 0
    match = exclude_bad_ids(match_of(job.spec, job.direction), list(state.get("bad_ids") or []))
    count_options: dict[str, Any] = {"limit": 1}
    if job.hint is not None:
        count_options["hint"] = job.hint
    return rt.db[job.collection].count_documents(match, **count_options)


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


def _complete(rt: Runtime, job: Job, state: dict[str, Any], generation: int) -> Answer:
    name = state["_id"]
    completed = rt.store.move(
        name,
        from_statuses=["running", "pending"],
        to="completed",
        action="complete",
        fields={"completed_at": pendulum.now("UTC"), "phase": "process"},
    )
    rt.store.drop_generations(name, generation - 1)
    if completed is not None:
        failed_documents = len(completed.get("bad_ids") or [])
        if failed_documents:
            log.warning(
                "%s completed with %d document(s) it could not migrate (within "
                "max_document_errors); they keep the old shape",
                name,
                failed_documents,
            )
        totals = completed.get("totals") or {}
        rt.emit(
            "background:completed",
            {"migration": name, "totals": totals, "passes": completed.get("pass")},
        )
        log.info(
            "background migration %s completed: %d migrated in %s pass(es)",
            name,
            totals.get("migrated", 0),
            completed.get("pass"),
        )
        if job.direction == "forward" and rt.on_completed is not None:
            rt.on_completed(name)
    current = completed or rt.store.get(name) or {}
    return Answer("done", status=current.get("status"))


def fail_state(rt: Runtime, state: Mapping[str, Any], reason: str | BaseException) -> Answer:
    """Move a background migration to ``failed`` with a value-free reason."""
    message = error_text(reason)
    failed = rt.store.move(
        state["_id"],
        from_statuses=["running", "pending", "blocked"],
        to="failed",
        action="fail",
        fields={"last_error": message, "failed_at": pendulum.now("UTC")},
    )
    if failed is not None:
        rt.emit("background:failed", {"migration": state["_id"], "error": message})
        log.error("background migration %s failed: %s", state["_id"], message)
    return Answer("done", status="failed", error=message)


# -- requires ----------------------------------------------------------------------------


def requires_status(rt: Runtime, requires: Sequence[str]) -> list[dict[str, Any]]:
    """Where each required background migration stands: ``{migration, status, done}``.

    Done means completed in the forward direction; a completed revert is not done.
    """
    if not requires:
        return []
    states = rt.store.get_many(requires)
    rows = []
    for name in requires:
        state = states.get(name)
        if state is None:
            rows.append({"migration": name, "status": "unregistered", "done": False})
        elif state.get("direction") == "revert":
            rows.append({"migration": name, "status": "reverted", "done": False})
        else:
            status = state["status"]
            rows.append({"migration": name, "status": status, "done": status == "completed"})
    return rows


def waiting_for(rt: Runtime, requires: Sequence[str]) -> list[str]:
    return [row["migration"] for row in requires_status(rt, requires) if not row["done"]]


def try_unblock(rt: Runtime, state: Mapping[str, Any]) -> dict[str, Any] | None:
    """Move a blocked migration whose requirements are all done to ``pending``."""
    waits = waiting_for(rt, list(state.get("requires") or []))
    if waits:
        if waits != list(state.get("waits_for") or []):
            rt.store.set(state["_id"], {"waits_for": waits})
        return None
    unblocked = rt.store.move(
        state["_id"],
        from_statuses=["blocked"],
        to="pending",
        action="unblock",
        fields={"waits_for": []},
    )
    if unblocked is not None:
        rt.emit("background:unblocked", {"migration": state["_id"]})
    return unblocked
