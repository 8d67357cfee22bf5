"""The coordinator: plan a pass, watch its partitions drain, close it, decide what next.

One *step* runs under the migration's coordinator lock and starts from what
MongoDB says, so any number of coordinators in any number of processes may call
it; a step that finds the lock held answers ``busy``. A step answers:

- ``process`` — lanes have work (``lanes``: how many could start now);
- ``wait`` — nothing to do yet (``retry_after_ms``): leases draining, a deploy in
  progress (the file's checksum differs from the registered one), a validator's soak
  (``validator-soak``: :mod:`~migronaut_core.background.validator`), a canary's soak
  or its wait for an approval (``canary-soak``, ``canary-approval``:
  :mod:`~migronaut_core.background.canary`), a lost plan race,
  or the step was stopped (``stopping``: its caller's cancel token fired, or its
  coordinator lock was lost mid-step — then it commits no plan and closes no pass);
- ``done`` — completed, failed, cancelled, paused or blocked (``status``; a canary
  whose check failed: paused, reason ``canary-failed``);
- ``busy`` — another coordinator holds the lock;
- ``superseded`` — a driver with rounds (Airflow) whose round is not the latest.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from migronaut_core.background import canary
from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.engine.steps import STEP_SCOPE
from migronaut_core.background.gauges import publish_status
from migronaut_core.background.job import (
    Job,
    assert_transactions,
    canary_active,
    job_for,
    pass_match,
    plan_is_stale,
    sharding_of,
)
from migronaut_core.background.lifecycle import fail_state, try_unblock
from migronaut_core.background.planning.partition import Plan
from migronaut_core.background.runtime import Runtime
from migronaut_core.background.spec import (
    BackgroundSpec,
    exclude_bad_ids,
    match_of,
)
from migronaut_core.background.states import TERMINAL, sources
from migronaut_core.background.store import (
    MAX_BAD_IDS,
    MAX_DOC_ERRORS,
    StateDocument,
    newer_schema,
)
from migronaut_core.background.telemetry import (
    ATTR_DRIVER,
    ATTR_LANES,
    ATTR_OUTCOME,
    ATTR_REASON,
    ATTR_STATUS,
    SPAN_COORDINATE,
)
from migronaut_core.background.validator import Confirm, SoakStep, begin, soak
from migronaut_core.bson_values import canonical_id_key
from migronaut_core.clock import aware, utc_now
from migronaut_core.errors import (
    ChecksumMismatchError,
    LockAlreadyHeldError,
    LockLostError,
    MigrationFileNotFoundError,
    TransactionsUnsupportedError,
)
from migronaut_core.json_shape import json_field, to_json_dict

log = logging.getLogger("migronaut_core.background")

#: How often a driver without wake-ups looks at its lanes again.
POLL_MS = 5_000
#: A running migration nothing moved for this long is stalled (the seeds' ``stallMs``).
STALL_SECONDS = 15 * 60.0

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


#: What a coordinator step tells its driver to do next: start ``lanes`` lanes
#: (``process``), step again after ``retry_after_ms`` (``wait``, ``busy``), or stop
#: driving (``done``: nothing left or a final status; ``superseded``: a newer round drives).
NextStep = Literal["process", "wait", "busy", "done", "superseded"]


@dataclass(frozen=True, slots=True)
class Answer:
    """A coordinator step's answer."""

    next: NextStep
    status: str | None = field(default=None, metadata=json_field(omit="none"))
    lanes: int = 0
    retry_after_ms: int = 0
    reason: str | None = field(default=None, metadata=json_field(omit="none"))
    generation: int | None = field(default=None, metadata=json_field(omit="none"))
    #: The current plan's token (a process answer): what the lanes of this round work.
    plan: str | None = field(default=None, metadata=json_field(omit="none"))
    #: The registration the lanes of a process answer work for (bind them to it, with
    #: ``generation`` and ``round``: a :class:`~migronaut_core.LaneBinding`).
    registration: str | None = field(default=None, metadata=json_field(omit="none"))
    counts: dict[str, int] | None = field(default=None, metadata=json_field(omit="none"))
    round: int | None = field(default=None, metadata=json_field(omit="none"))
    waits_for: list[str] = field(default_factory=list, metadata=json_field(omit="empty"))
    error: str | None = field(default=None, metadata=json_field(omit="none"))

    @property
    def ends_driving(self) -> bool:
        """Nothing for this driver to do: the migration is done (or final), or a newer round
        drives it."""
        return self.next in ("done", "superseded")

    @property
    def steps_again_later(self) -> bool:
        """Step again after ``retry_after_ms``: waiting on something, or the lock is held."""
        return self.next in ("wait", "busy")

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


@dataclass(frozen=True, slots=True)
class Planned:
    """A committed plan: the state after its commit, and whether it has no partitions
    (nothing matched: the pass closes at once)."""

    state: StateDocument
    empty: bool


@dataclass(frozen=True, slots=True)
class NextPass:
    """A pass closed with old-shape documents left: the next one is planned from ``state``."""

    state: StateDocument


def stalled_for(
    rt: Runtime, state: StateDocument, *, now: datetime | None = None
) -> timedelta | None:
    """How long a running migration has been stuck, or None while something moves it.

    Stuck: no lane holds a live lease, and no partition write (a claim, a batch's
    checkpoint, a release), no lane's progress and no coordinator step was recorded
    since. A driver that finds it stuck for longer
    than its stall time takes it over with a new round, which the stuck driver's
    later steps then find ``superseded``.
    """
    if state.get("status") != "running":
        return None
    name = str(state["_id"])
    if rt.store.leases.has_live_lease(name):
        return None
    since = last_activity(state, rt.store.partitions.last_partition_write(name))
    if since is None:
        return None
    idle = (now or utc_now()) - since
    return idle if idle > timedelta(0) else None


def last_activity(state: StateDocument, last_partition_write: Any) -> datetime | None:
    """The latest of a state's progress, its coordinator step, a partition write and a
    lane's confirmation of a hold (a maintenance window's opening, if later): what
    :func:`stalled_for` measures from (the async stall watch too). Lanes that hold on
    purpose are not stalled, nor are those waiting for a window until it opens, nor a
    canary awaiting a person's approval (None: nothing to measure from)."""
    canary = state.get("canary")
    if canary is not None and canary.get("phase") == "awaiting_approval":
        return None
    mark = state.get("coordinator")
    hold: Mapping[str, Any] = state.get("hold") or {}
    seen = [
        aware(value)
        for value in (
            state.get("last_progress_at"),
            mark.get("at") if mark else None,
            last_partition_write,
            hold.get("at"),
            hold.get("until"),
        )
        if isinstance(value, datetime)
    ]
    return max(seen) if seen else None


def _retry_soon(
    rt: Runtime, reason: str | None = None, *, next: Literal["wait", "busy"] = "wait"
) -> Answer:
    """Ask again in half a lock TTL: ``wait`` (with why) or ``busy`` (another holds the lock)."""
    return Answer(next, reason=reason, retry_after_ms=max(1, rt.ttl_ms // 2))


# -- a step ----------------------------------------------------------------------------


def coordinate(
    rt: Runtime, name: str, *, driver: Driver | None = None, cancel: CancelToken | None = None
) -> Answer:
    """Run one coordinator step under the migration's coordinator lock."""
    lock = rt.lock_for(name)
    try:
        lock.acquire()
    except LockAlreadyHeldError:
        return _retry_soon(rt, next="busy")
    driver = driver or Driver()
    # The step stops as a cancelled one does when its lock is lost mid-step (it lapsed,
    # was taken over or unlocked): whatever it would still write is no longer guarded.
    step = (cancel or CancelToken()).child()
    lock.on_lost(lambda: step.cancel("coordinator lock lost"))
    # The span opens once the lock is held: a busy coordinator makes none.
    with lock, rt.telemetry.span(SPAN_COORDINATE, name, {ATTR_DRIVER: driver.kind}) as span:
        answer = _step(rt, name, driver, step, lock.assert_held)
        publish_status(rt, name)
        span.set(ATTR_OUTCOME, answer.next)
        span.set(ATTR_STATUS, answer.status)
        span.set(ATTR_REASON, answer.reason)
        span.set(ATTR_LANES, answer.lanes if answer.next == "process" else None)
        return answer


def _step(rt: Runtime, name: str, driver: Driver, cancel: CancelToken, confirm: Confirm) -> Answer:
    state = rt.store.states.get(name)
    if state is None:
        return Answer("done", status="unregistered")
    if newer_schema(state):
        rt.warn_once(
            f"schema:{name}",
            "%s was registered by a newer release; waiting for a process of that release",
            name,
        )
        return _retry_soon(rt, "newer-schema")
    if state["status"] in TERMINAL:
        rt.forget_migration(name)  # also a cancel, or an end another process saw first
    if state["status"] in TERMINAL or state["status"] == "paused":
        return Answer("done", status=state["status"])
    if state["status"] == "blocked":
        unblocked = try_unblock(rt, state)
        if unblocked is None:
            current = rt.store.states.get(name) or state
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
    coordinator: dict[str, Any] = {"kind": driver.kind, "at": utc_now()}
    if driver.ref is not None:
        coordinator["ref"] = driver.ref
    rt.store.states.set(name, {"coordinator": coordinator, **({"round": round_} if round_ else {})})
    answer = _coordinate_pass(rt, name, state, cancel, confirm)
    if round_ is None:
        return answer
    return Answer(**{**_fields(answer), "round": round_})


def _fields(answer: Answer) -> dict[str, Any]:
    return {slot: getattr(answer, slot) for slot in Answer.__slots__}


def _job(rt: Runtime, name: str, state: StateDocument, cancel: CancelToken) -> Job | Answer:
    """The job of this step, or a ``wait`` while the file on disk is not the registered one."""
    try:
        return job_for(rt, name, state, cancel)
    except (ChecksumMismatchError, MigrationFileNotFoundError) as exc:
        log.warning("%s: %s", name, exc.message)
        return _retry_soon(rt, "checksum")


def _coordinate_pass(
    rt: Runtime, name: str, initial: StateDocument, cancel: CancelToken, confirm: Confirm
) -> Answer:
    state = _start_replay(rt, initial)
    job = _job(rt, name, state, cancel)
    if isinstance(job, Answer):
        return job
    if job.spec.collection is not None:
        rt.telemetry.collection_of(name, job.spec.collection)
    try:
        assert_transactions(rt, name, job.spec)
    except TransactionsUnsupportedError as exc:
        return _failed(rt, state, exc.message)
    source_hash = pass_match(job)
    for _ in range(job.spec.max_passes + 2):
        if cancel.cancelled:
            return _retry_soon(rt, "stopping")
        soaked = _soak_step(rt, job, state, confirm)
        if isinstance(soaked, Answer):
            return soaked
        state = state if soaked is None else soaked.state
        if job.canary and not canary_active(job.spec, state, job.direction):
            # Promoted: the rest of the collection is an ordinary pass, of a job built afresh.
            return _coordinate_pass(rt, name, state, cancel, confirm)
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
                rt.store.states.cas(
                    name,
                    {"phase": "process", "plan.token": state["plan"]["token"]},
                    {"$set": {"phase": "replan"}},
                )
                or rt.store.states.get(name)
                or state
            )
        replanning = state.get("phase") == "replan"
        if replanning and state.get("plan") is not None:
            plan_token = state["plan"]["token"]
            rt.store.partitions.supersede(name, generation=state["generation"], plan=plan_token)
            if rt.store.leases.live_leases(name) > 0:
                return _retry_soon(rt, "replan-draining")
            state = (
                rt.store.states.cas(name, {"phase": "replan"}, {"$set": {"phase": "partition"}})
                or state
            )
        plan = state.get("plan")
        if state.get("phase") != "process" or plan is None or plan.get("match") != source_hash:
            planned = plan_pass(rt, job, state, source_hash, new_pass=not replanning)
            if isinstance(planned, Answer):
                return planned
            state = planned.state
            if planned.empty:
                closed = finalize(rt, job, state, confirm)
                if isinstance(closed, Answer):
                    return closed
                state = closed.state
                if job.replay is not None:
                    return _after_replay(rt, name, state, cancel, confirm)
                continue
        if state["status"] == "pending":
            moved = rt.store.states.move(
                name, from_statuses=sources("plan"), to="running", action="plan"
            )
            state = moved or state
        rt.telemetry.leases_reclaimed(name, rt.store.leases.reap(name))
        counts = rt.store.partitions.partition_counts(
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
                registration=state.get("registration"),
                counts=counts.to_dict(),
                retry_after_ms=POLL_MS,
            )
        closed = finalize(rt, job, state, confirm)
        if isinstance(closed, Answer):
            return closed
        state = closed.state
        if job.replay is not None:
            return _after_replay(rt, name, state, cancel, confirm)
    return _retry_soon(rt, "passes")


def _after_replay(
    rt: Runtime, name: str, state: StateDocument, cancel: CancelToken, confirm: Confirm
) -> Answer:
    """Go on after a failed-only retry's pass left old-shape documents besides its own
    (a migration that failed mid-pass): the next passes are ordinary ones, planned by a
    job built afresh (the retry's job matches only its documents)."""
    replay = state.get("replay")
    if replay is not None and "ids" in replay:  # not closed by this step: the next one sees
        return _retry_soon(rt, "replay")
    return _coordinate_pass(rt, name, state, cancel, confirm)


def _start_replay(rt: Runtime, state: StateDocument) -> StateDocument:
    """Start a failed-only retry a control asked for: its documents leave ``bad_ids``.

    A pass the failure cut short is rolled up first (its counters and failures
    count once), then, in one compare-and-set on the request's token, the failed
    ids move to the retry (``replay.ids``), with the generation its pass will have;
    the roll-up of that generation ends the retry (:func:`_roll_up`). Runs under the
    coordinator lock; a state without a request is returned as it is.
    """
    replay = state.get("replay")
    if replay is None or "ids" in replay:
        return state
    state = _roll_up(rt, state)
    name = state["_id"]
    started = rt.store.states.cas(
        name,
        {
            "replay.token": replay["token"],
            "replay.ids": {"$exists": False},
            "rolled_generation": state.get("rolled_generation"),
        },
        {
            "$set": {
                "replay.ids": list(state.get("bad_ids") or []),
                "replay.generation": int(state.get("generation", 0)) + 1,
                "bad_ids": [],
                "failed_partitions": 0,
                "phase": "partition",
                "updated_at": utc_now(),
            }
        },
    )
    if started is not None:
        log.info("%s: retrying %d failed document(s)", name, len(state.get("bad_ids") or []))
    return started or rt.store.states.get(name) or state


def plan_pass(
    rt: Runtime, job: Job, state: StateDocument, source_hash: str, *, new_pass: bool = True
) -> Answer | Planned:
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
        )
    if job.cancel.cancelled:
        # Stopped, or the coordinator lock was lost, while planning: commit nothing.
        return _retry_soon(rt, "stopping")
    # A failed-only retry's pass is not a sweep of the collection: max_passes counts sweeps.
    pass_number = int(state.get("pass", 0)) + (1 if new_pass and job.replay is None else 0)
    expected: dict[str, Any] = {"status": {"$in": ["pending", "running"]}}
    if state.get("checksum") is not None:
        expected["checksum"] = state["checksum"]
    now = utc_now()
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
    committed = rt.store.partitions.commit_plan(
        state["_id"],
        generation=int(state.get("generation", 0)),
        previous_token=stored.get("token") if (stored := state.get("plan")) else None,
        new_pass=new_pass,
        expected=expected,
        plan=plan_fields,
        scopes=plan.partitions,
        fields={
            "pass": pass_number,
            "last_progress_at": now,
            **({} if state.get("started_at") else {"started_at": now}),
            **({"pass_started_at": now} if new_pass else {}),
        },
    )
    if committed is None:
        return _retry_soon(rt, "plan-race")
    rt.store.partitions.drop_foreign_plans(state["_id"], committed["plan"]["token"])
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
    return Planned(committed, not plan.partitions)


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


def _roll_up(rt: Runtime, state: StateDocument) -> StateDocument:
    """Add a generation's counters to the totals, once (idempotent after a crash).

    Rolling up a failed-only retry's generation ends the retry: every document that
    failed before was retried, so its failures and their errors replace the old ones.
    """
    name, generation = state["_id"], int(state["generation"])
    if int(state.get("rolled_generation", 0)) >= generation:
        return state
    rolled = rt.store.partitions.generation_totals(name, generation)
    increments = {f"totals.{key}": value for key, value in rolled.totals.items() if value}
    replay = state.get("replay")
    replayed = replay is not None and replay.get("generation") == generation
    fields: dict[str, Any] = {
        "rolled_generation": generation,
        "bad_ids": _merged_bad_ids(state.get("bad_ids") or [], rolled.bad_ids),
        "updated_at": utc_now(),
    }
    if rolled.doc_errors or replayed:
        kept = [] if replayed else list(state.get("doc_errors") or [])
        fields["doc_errors"] = [*kept, *rolled.doc_errors][-MAX_DOC_ERRORS:]
    if rolled.failed_partitions:
        fields["failed_partitions"] = rolled.failed_partitions
        fields["last_error"] = rolled.last_error
    update: dict[str, Any] = {"$set": fields}
    if increments:
        update["$inc"] = increments
    if replayed:
        update["$unset"] = {"replay": ""}
    updated = rt.store.states.cas(name, {"rolled_generation": {"$lt": generation}}, update)
    return updated or rt.store.states.get(name) or state


def finalize(rt: Runtime, job: Job, state: StateDocument, confirm: Confirm) -> Answer | NextPass:
    """Close a pass: roll its counters up, then complete, fail, or start another pass
    (``confirm`` renews the coordinator's lock before a finalize ``collMod``)."""
    name = state["_id"]
    generation = int(state["generation"])
    state = _roll_up(rt, state)
    if int(state.get("failed_partitions") or 0) > 0:
        return _failed(
            rt,
            state,
            f"{state['failed_partitions']} partition(s) failed: {state.get('last_error')}",
        )
    remaining = _remaining(rt, job, state)
    if job.cancel.cancelled:
        # Stopped, or the coordinator lock was lost, while counting: decide nothing.
        return _retry_soon(rt, "stopping")
    if remaining == 0 and job.canary:
        return _canary_step(rt, job, state, canary.begin)
    if remaining == 0 and job.spec.validator is not None and job.direction == "forward":
        soaked = _finalizing(rt, job, state, begin, confirm)
        return soaked if isinstance(soaked, Answer) else NextPass(soaked.state)
    if remaining == 0:
        return _complete(rt, job, state, generation)
    if int(state.get("pass", 0)) >= job.spec.max_passes:
        return _failed(
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
    following = rt.store.states.cas(
        name,
        {"generation": generation, "phase": "process"},
        {"$set": {"phase": "partition", "updated_at": utc_now()}},
    )
    rt.store.partitions.drop_generations(name, generation - 1)
    return NextPass(following or rt.store.states.get(name) or state)


def _finalizing(
    rt: Runtime,
    job: Job,
    state: StateDocument,
    step: Callable[[Runtime, BackgroundSpec, StateDocument, Confirm], SoakStep],
    confirm: Confirm,
) -> Answer | NextPass:
    """One finalize step (``begin`` the soak, or ``soak``): wait, heal with a new pass, or
    complete once the validator is enforced. A lock lost before its ``collMod`` stops the
    step as a lost lock stops any other (``stopping``): the validation is unchanged."""
    state = _running(rt, state)
    try:
        done = step(rt, job.spec, state, confirm)
    except LockLostError:
        job.cancel.cancel("coordinator lock lost")
        return _retry_soon(rt, "stopping")
    if done.outcome == "enforced":
        return _complete(rt, job, done.state, int(done.state["generation"]))
    if done.outcome == "heal":
        return NextPass(done.state)
    return Answer(
        "wait",
        status=done.state.get("status"),
        reason="validator-soak",
        retry_after_ms=done.retry_after_ms,
    )


def _soak_step(
    rt: Runtime, job: Job, state: StateDocument, confirm: Confirm
) -> Answer | NextPass | None:
    """The step of a soaking migration (a canary's, a validator's); None when none soaks."""
    if state.get("phase") == "canary" and job.spec.canary is not None:
        return _canary_step(rt, job, state, canary.soak)
    if state.get("phase") == "finalize":
        return _finalizing(rt, job, state, soak, confirm)
    return None


def _canary_step(
    rt: Runtime,
    job: Job,
    state: StateDocument,
    step: Callable[[Runtime, Job, StateDocument], canary.CanaryStep],
) -> Answer | NextPass:
    """One canary step (:func:`.canary.begin` the soak, or :func:`.canary.soak`): wait
    (soaking, awaiting approval), stop (a failed check paused it), or go on with a pass
    (a heal over the subset, or the rest once promoted)."""
    state = _running(rt, state)
    done = step(rt, job, state)
    if done.outcome in ("soaking", "awaiting"):
        return Answer(
            "wait",
            status=done.state.get("status"),
            reason=done.reason,
            retry_after_ms=done.retry_after_ms,
        )
    if done.outcome == "paused":
        return Answer("done", status=done.state.get("status"), reason=done.reason)
    return NextPass(done.state)


def _running(rt: Runtime, state: StateDocument) -> StateDocument:
    """A pending migration whose step soaks (a finalize or a canary) is running."""
    if state["status"] != "pending":
        return state
    moved = rt.store.states.move(
        state["_id"], from_statuses=sources("plan"), to="running", action="plan"
    )
    return moved or state


def _remaining(rt: Runtime, job: Job, state: StateDocument) -> int:
    """Whether old-shape documents are left (0 or 1); a step migration has none to count."""
    if job.spec.mode == "step":
        return 0
    match = exclude_bad_ids(match_of(job.spec, job.direction), list(state.get("bad_ids") or []))
    match = job.scoped(match)
    count_options: dict[str, Any] = {"limit": 1}
    if job.hint is not None:
        count_options["hint"] = job.hint
    return rt.db[job.collection].count_documents(match, **count_options)


def _failed(rt: Runtime, state: StateDocument, reason: str | BaseException) -> Answer:
    return Answer("done", status="failed", error=fail_state(rt, state, reason))


def _complete(rt: Runtime, job: Job, state: StateDocument, generation: int) -> Answer:
    name = state["_id"]
    completed = rt.store.states.move(
        name,
        from_statuses=sources("complete"),
        to="completed",
        action="complete",
        fields={"completed_at": utc_now(), "phase": "process"},
    )
    rt.store.partitions.drop_generations(name, generation - 1)
    if completed is not None:
        rt.forget_migration(name)
        failed_documents = len(completed.get("bad_ids") or [])
        if failed_documents and job.undo:
            log.warning(
                "%s: its undo completed and left %d document(s) changed since the migration "
                "wrote them; they keep the new shape (listed by _id in its status)",
                name,
                failed_documents,
            )
        elif failed_documents:
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
    current = completed or rt.store.states.get(name)
    return Answer("done", status=None if current is None else current.get("status"))
