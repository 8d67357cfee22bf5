"""The background migrations' operations on the kit, ``kit.background``.

:class:`Background` is the namespace of :class:`~migronaut_core.kit.Migronaut`
that works one background migration at a time through the engine's
:class:`~migronaut_core.background.runtime.Runtime`: the coordinator step,
slices and in-process runs, the typed status views and reads (reads only), the
one control entry point (:meth:`Background.control`: pause, resume, cancel,
retry — of everything left, or of the failed documents only —, repin, unlock,
undo), the failed documents (:meth:`Background.failed`), the target-wide brake,
the dry run, the estimate, the background audit and the engine's
events.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import replace
from datetime import datetime, timedelta
from typing import cast

from migronaut_core import files
from migronaut_core.audit import Finding
from migronaut_core.background import audit as audits
from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.control import actions as controls
from migronaut_core.background.control import brake as brakes
from migronaut_core.background.control.actions import ControlAction, ControlResult
from migronaut_core.background.control.brake import BrakeLogEntry, BrakeView
from migronaut_core.background.coordinator import (
    STALL_SECONDS,
    Answer,
    Driver,
    coordinate,
    stalled_for,
)
from migronaut_core.background.dry_run import DryRunReport, StepDryRunReport
from migronaut_core.background.dry_run import dry_run as preview
from migronaut_core.background.estimate import MigrationEstimate, estimate_migration
from migronaut_core.background.events import Listener
from migronaut_core.background.failed import DEFAULT_FAILED_LIMIT, FailedDocumentsView, read_failed
from migronaut_core.background.gate import MILESTONES, Milestone, WaitResult, wait_for_milestone
from migronaut_core.background.lanes.driver import drive
from migronaut_core.background.lanes.lane import LaneBinding, SliceResult, run_slice
from migronaut_core.background.registration import runnable
from migronaut_core.background.spec import check_slice_ms
from migronaut_core.background.states import transition
from migronaut_core.background.store.gate import read_gate
from migronaut_core.background.views import (
    BackgroundStatusView,
    PartitionView,
    partition_of,
    read_status,
    read_statuses,
    registered_names,
)
from migronaut_core.changelog import Actor
from migronaut_core.checks import check_choice, check_int, check_number
from migronaut_core.errors import NotAppliedError
from migronaut_core.kit.base import KitBase
from migronaut_core.kit.results import HistoryEntry, RunnableMigration
from migronaut_core.runner import with_default_user


class Background:
    """Background migrations, ``kit.background``: drive, read, control, dry run, audit.

    Every read returns typed results (their ``to_dict()`` is the JSON shape).

    :param kit: the kit whose connection and wiring every operation uses.
    """

    __slots__ = ("_kit",)

    def __init__(self, kit: KitBase) -> None:
        self._kit = kit

    def on(self, event: str, listener: Listener) -> Callable[[], None]:
        """Subscribe to engine events (``background:*``, or ``"*"``); returns an unsubscribe."""
        return self._kit.events.on(event, listener)

    def coordinate(
        self, name: str, *, driver: Driver | None = None, cancel: CancelToken | None = None
    ) -> Answer:
        """One coordinator step; idempotent, safe from any number of processes."""
        files.validate_name(name)
        self._kit._ready()
        return coordinate(self._kit._runtime, name, driver=driver, cancel=cancel)

    def run_slice(
        self,
        name: str,
        *,
        slice_ms: int | None = None,
        cancel: CancelToken | None = None,
        binding: LaneBinding | None = None,
    ) -> SliceResult:
        """One slice of one lane: claim a partition, work it until ``slice_ms``, release.

        :param binding: the registration, generation and round of the coordinator step
            that started this lane (its ``process`` answer's); when the migration's no
            longer match, the slice answers ``superseded`` and claims nothing.
        """
        files.validate_name(name)
        if slice_ms is not None:
            check_slice_ms(slice_ms)
        self._kit._ready()
        return run_slice(
            self._kit._runtime, name, slice_ms=slice_ms, cancel=cancel, binding=binding
        )

    def run(
        self,
        name: str,
        *,
        concurrency: int = 1,
        slice_ms: int | None = None,
        until_done: bool = True,
        cancel: CancelToken | None = None,
    ) -> BackgroundStatusView | None:
        """Drive a background migration from this process with up to ``concurrency`` lanes.

        :returns: its status view (completed, paused, cancelled or blocked; with
            ``until_done=False``, after one round); None if it is no longer
            registered.
        :raises BackgroundFailedError: it failed.
        :raises RunAbortedError: ``cancel`` fired (it resumes from its checkpoints later).
        """
        check_int("concurrency", concurrency, 1)
        if slice_ms is not None:
            check_slice_ms(slice_ms)
        self._kit._registered(name)
        self._kit._ready()
        drive(
            self._kit._runtime,
            name,
            concurrency=concurrency,
            slice_ms=slice_ms,
            until_done=until_done,
            cancel=cancel,
        )
        return read_status(
            self._kit._runtime.store,
            name,
            windows=self._kit._runtime.windows,
            now=self._kit._runtime.wall_clock(),
        )

    def runnable(self) -> list[RunnableMigration]:
        """Background migrations with work to do, oldest first (blocked ones whose
        requirements are met are unblocked)."""
        self._kit._ready()
        return [RunnableMigration.from_row(row) for row in runnable(self._kit._runtime)]

    def stalled(self, *, stall_seconds: float = STALL_SECONDS) -> list[str]:
        """Running background migrations nothing has moved for ``stall_seconds``, oldest first.

        Nothing moved: no lane holds a live lease, and no lane's progress and no
        coordinator step was recorded in that time (a driver died or froze without
        its leases lapsing into another's hands). Their drivers should be taken
        over: a coordinator step with a new round (``Driver(round=None)``) makes the
        stuck driver's later steps ``superseded``. Reads only.

        :raises ConfigInvalidError: ``stall_seconds`` is below 1.
        """
        check_number("stall_seconds", stall_seconds, 1)
        store = self._kit._runtime.store
        limit = timedelta(seconds=stall_seconds)
        return [
            view.name
            for view in read_statuses(
                store, statuses=["running"], windows=self._kit._runtime.windows
            )
            if (state := store.states.get(view.name)) is not None
            and (idle := stalled_for(self._kit._runtime, state)) is not None
            and idle >= limit
        ]

    def wait(
        self,
        name: str,
        *,
        until: Milestone = "completed",
        timeout: float | None = None,
        poll_interval: float = 2.0,
        cancel: CancelToken | None = None,
        on_status: Callable[[str], None] | None = None,
    ) -> WaitResult:
        """Wait until ``name`` reaches ``until``, ends short of it, or ``timeout`` seconds pass.

        The deploy gate (see :mod:`~migronaut_core.background.gate` for the milestones:
        ``migrated``, ``completed``, ``finalized``): ``reached``; ``ended`` when it
        failed, was cancelled or is no longer registered (waiting longer cannot help);
        ``timed-out`` otherwise (also when ``cancel`` fires). Paused, blocked and
        pending keep it waiting. Reads only; drives nothing.

        :param on_status: called with each status that differs from the last seen.
        :raises NotAppliedError: it is not registered when the wait starts.
        :raises ConfigInvalidError: ``until``, ``timeout`` or ``poll_interval`` is invalid.
        """
        milestone = cast(Milestone, check_choice("until", until, MILESTONES))
        if timeout is not None:
            check_number("timeout", timeout, 0, unit="seconds")
        check_number("poll_interval", poll_interval, 0.01, 3600, unit="seconds")
        self._kit._registered(name)
        db, collections = self._kit.db, self._kit.config.background_collections
        return wait_for_milestone(
            name,
            lambda: read_gate(db, collections, name),
            until=milestone,
            timeout=timeout,
            poll_interval=poll_interval,
            cancel=cancel,
            on_status=on_status,
        )

    # -- reading (no index is created, nothing is written) ---------------------------------

    def status(self, name: str) -> BackgroundStatusView | None:
        """The status of one background migration; None when it is not registered.

        Reads only: no index is created and nothing is written (a blocked one
        is not unblocked here).
        """
        return read_status(
            self._kit._runtime.store,
            name,
            windows=self._kit._runtime.windows,
            now=self._kit._runtime.wall_clock(),
        )

    def statuses(
        self,
        *,
        names: Collection[str] | None = None,
        statuses: Collection[str] | None = None,
    ) -> list[BackgroundStatusView]:
        """The status of every registered background migration, oldest first.

        :param names: only these migrations.
        :param statuses: only those in these statuses (empty or None: any).
        Reads only, like :meth:`status`.
        """
        return read_statuses(
            self._kit._runtime.store,
            names=names,
            statuses=statuses,
            windows=self._kit._runtime.windows,
            now=self._kit._runtime.wall_clock(),
        )

    def names(self) -> list[str]:
        """Every registered background migration, oldest first; reads only."""
        return registered_names(self._kit._runtime.store)

    def partitions(self, name: str) -> list[PartitionView]:
        """The partitions of the current generation: scope, cursor, counters, lease holder."""
        state = self._kit._registered(name)
        partitions = self._kit._runtime.store.partitions.list_partitions(
            name, generation=state["generation"]
        )
        return [partition_of(partition) for partition in partitions]

    def failed(
        self, name: str, *, limit: int = DEFAULT_FAILED_LIMIT, offset: int = 0
    ) -> FailedDocumentsView:
        """A page of the documents it could not rewrite, oldest first: ``_id``, why, when.

        Each row names the document by its ``_id`` (JSON-safe), the error's kind
        (``reason``), the server's ``code`` and the value-free text the engine kept
        (an exception's type name, a write error's summary), and the ``generation``
        that recorded it; never a document's values. ``total`` counts them all; page
        with ``offset``. Reads only. ``control(name, "retry", failed_only=True)``
        retries exactly these.

        :raises ConfigInvalidError: ``limit`` outside 1 to 10,000, or a negative ``offset``.
        :raises NotAppliedError: it is not registered.
        """
        files.validate_name(name)
        view = read_failed(self._kit._runtime.store, name, limit=limit, offset=offset)
        if view is None:
            raise NotAppliedError(
                f"background migration {name} is not registered; run `migronaut up` first",
                {"migration": name},
            )
        return view

    def history(self, name: str) -> list[HistoryEntry]:
        """The control history, oldest first: action, from, to, who, why, when."""
        state = self._kit._registered(name)
        return [HistoryEntry.from_document(entry) for entry in state.get("history") or []]

    # -- controls ------------------------------------------------------------------------

    def control(
        self,
        name: str,
        action: ControlAction,
        *,
        requested_by: str | None = None,
        reason: str | None = None,
        wait: bool = False,
        repin: bool = False,
        failed_only: bool = False,
    ) -> ControlResult:
        """Apply any of the :data:`~migronaut_core.CONTROL_ACTIONS` to a background migration.

        ``pause``/``cancel``: lanes stop before their next batch (``wait`` until
        they have, ``stopped`` says whether in time). ``resume``: back to
        pending, or blocked while its requirements are open. ``retry``: a failed
        or cancelled one from its checkpoints (a completed one is reopened over
        what is left); ``retry`` with ``failed_only`` retries just the documents
        it could not rewrite (:meth:`failed`) in one pass over those, through the
        same guarded write path and error budget: those that now migrate leave the
        failed list, those that fail again stay with their new error (``failed``
        on the result: how many it takes); ``retry_from_start`` drops all
        progress; either retry pins the file on disk first with ``repin``.
        ``repin``: the file on disk becomes its version (its checksum in the
        changelog too, and ``checksum`` on the result; ``replan`` says whether its
        partitions are planned again).
        ``undo``: a migration with ``undo = "journal"`` that no longer runs
        (completed, failed or cancelled) is registered as its undo, a revert
        pass that puts back every document still exactly as it wrote it from
        its journal and leaves (and lists by ``_id``) those changed since.
        ``approve``: a canary that passed its checks and awaits approval
        (``background.canary`` with ``approval``) is promoted; the rest of the
        collection is migrated by ordinary passes (``unchanged`` once promoted).
        ``reject``: a soaking or awaiting canary is paused with ``reason`` (required);
        ``resume`` soaks it again.
        ``unlock``: clears the coordinator lock and every lease (``lock``,
        ``leases``; its status is unchanged) of any name, registered or not (a
        lock left behind by a withdrawn migration: status ``unregistered``).
        Recorded in its history with ``requested_by`` (default: the OS user) and
        ``reason``.
        ``may_run`` on the result says whether its driver should be started now.

        :raises ConfigInvalidError: an unknown action, or an option it does not take.
        :raises NotAppliedError: it is not registered (any action but ``unlock``).
        :raises BackgroundConflictError: the action does not fit its status (a
            failed-only retry: unless it is completed, failed or cancelled and has
            failed documents; an undo: :class:`~migronaut_core.errors.UndoUnavailableError`;
            approve or reject: it has no canary, or its canary is not where the action
            fits), before anything is written.
        """
        action = controls.check_control(action, wait=wait, repin=repin, failed_only=failed_only)
        who = with_default_user(Actor(requested_by=requested_by, reason=reason))
        files.validate_name(name)
        self._kit._ready()
        applied = self._apply_control(
            name, action, who, wait=wait, repin=repin, failed_only=failed_only
        )
        return controls.settled(action, applied)

    def brake(
        self,
        reason: str,
        *,
        until: datetime | None = None,
        requested_by: str | None = None,
    ) -> BrakeView:
        """Set the target-wide brake: every background lane, in every process, holds at
        its next batch boundary (outcome ``held``, signal ``brake``) until :meth:`release`
        or ``until`` (a time with a time zone). Logged with ``requested_by`` (default:
        the OS user), ``reason`` (required) and ``until``.

        :raises ConfigInvalidError: no reason, a bad ``requested_by``, or ``until``
            without a time zone or in the past; nothing was written.
        """
        who = with_default_user(Actor(requested_by=requested_by, reason=reason))
        self._kit._ready()
        return brakes.set_brake(self._kit._runtime, actor=who, until=until)

    def release(self, *, requested_by: str | None = None, reason: str | None = None) -> BrakeView:
        """Release the brake (``changed`` False when it was off); logged like :meth:`brake`."""
        who = with_default_user(Actor(requested_by=requested_by, reason=reason))
        self._kit._ready()
        return brakes.release(self._kit._runtime, actor=who)

    def brake_status(self) -> BrakeView:
        """The brake: ``on``, and as set: reason, who, since, until."""
        return brakes.brake_status(self._kit._runtime)

    def brake_log(self) -> list[BrakeLogEntry]:
        """Every setting and release of the brake kept (the last 100), oldest first."""
        return brakes.brake_log(self._kit._runtime)

    def _apply_control(
        self,
        name: str,
        action: ControlAction,
        who: Actor,
        *,
        wait: bool,
        repin: bool,
        failed_only: bool,
    ) -> ControlResult:
        if action == "unlock":
            return controls.unlock(self._kit._runtime, name, actor=who)
        if action == "repin":
            return self._repin(name, who)
        if action == "undo":
            return controls.undo(self._kit._runtime, name, actor=who)
        if action == "approve" or action == "reject":  # noqa: PLR1714 (mypy narrows this)
            return controls.canary_control(self._kit._runtime, name, action, actor=who)
        replan = self._repin_for_retry(name, who, failed_only=failed_only) if repin else None
        if action == "retry_from_start":
            result = controls.control(self._kit._runtime, name, "retry", actor=who, from_start=True)
        else:
            result = controls.control(
                self._kit._runtime, name, action, actor=who, failed_only=failed_only
            )
        if wait:
            return replace(result, stopped=controls.wait_for_lanes(self._kit._runtime, name))
        return result if replan is None else replace(result, replan=replan)

    def _repin_for_retry(self, name: str, actor: Actor, *, failed_only: bool) -> bool | None:
        """Repin before a retry, once the retry is known to fit the status; answer ``replan``.

        A retry the state machine refuses (or a failed-only retry that does not fit)
        raises here, so it leaves the file's pin (spec, checksum, changelog) as it was.
        """
        state = self._kit._runtime.store.states.get(name)
        if state is not None:
            status = state["status"]
            transition(status, "reopen" if status == "completed" else "retry", migration=name)
            if failed_only:
                controls.check_failed_only(self._kit._runtime, state)
        return self._repin(name, actor).replan

    def _repin(self, name: str, actor: Actor) -> ControlResult:
        result = controls.repin(self._kit._runtime, name, actor=actor)
        if result.checksum is not None:  # always, for a repin
            self._kit._runner.changelog.set_checksum(name, result.checksum)
        return result

    # -- dry runs ------------------------------------------------------------------------

    def dry_run(
        self,
        name: str,
        *,
        sample: int | None = None,
        first: int | None = None,
        validate: bool = False,
        steps: int | None = None,
        from_start: bool = False,
    ) -> DryRunReport | StepDryRunReport:
        """Preview a background migration, registered or not, on a few documents; write nothing.

        Picks ``sample`` random matching documents (20 when neither ``sample``
        nor ``first`` is given) or the ``first`` n by ``_id`` (1 to 10,000), runs
        the transform on copies and reports, per document, the fields the rewrite
        would set and unset (names only) or why it would fail. A registered
        migration is previewed with its registered spec, direction and excluded
        documents; its state is not touched.

        :param validate: also run the real write path in a snapshot transaction
            that is always aborted: unique indexes and validators are checked
            (failures are reported with reason ``write``).
        :param steps: for step migrations: run this many steps (default 1, at most
            100) from the last checkpoint in a transaction that is always aborted.
            User code's ``ctx.db`` and ``ctx.client`` are bound to that
            transaction (with ``validate`` too), with ``ctx.session`` or without;
            a plain preview refuses their writes, and any dry run refuses writes
            to migronaut's own collections (``DryRunRefusedError``, reported as
            the document's or the step's error).
        :param from_start: for step migrations: start from no checkpoint rather
            than the registered one.
        :raises ConfigInvalidError: ``sample`` with ``first``, a size out of
            range, or step options for a declarative migration.
        :raises TransactionsUnsupportedError: ``validate`` on a standalone server.
        """
        files.validate_name(name)
        return preview(
            self._kit._runtime,
            name,
            sample=sample,
            first=first,
            validate=validate,
            steps=steps,
            from_start=from_start,
        )

    def estimate(
        self, name: str, *, sample: int | None = None, lanes: int | None = None
    ) -> MigrationEstimate:
        """How long a background migration's pass would take from now; writes nothing.

        Counts the documents its pass matches, samples ``sample`` of them (1,000 by
        default, 10 to 10,000) to time the transform and the guarded write (in a
        transaction that is always aborted) and size the oplog, and tells the
        duration with ``lanes`` lanes (default: its ``max_parallel``) under its
        maintenance windows and the target's budget, as an expected time and a
        low-high range. Registered or only a file, like :meth:`dry_run`.

        :raises ConfigInvalidError: a bad option, or a step migration.
        :raises TransactionsUnsupportedError: a standalone server.
        """
        files.validate_name(name)
        return estimate_migration(self._kit._runtime, name, sample=sample, lanes=lanes)

    # -- audit ---------------------------------------------------------------------------

    def audit(self, *, stale_after_seconds: float = audits.STALE_AFTER_SECONDS) -> list[Finding]:
        """Findings of the background side; read-only.

        Registered migrations whose file changed (checksum) or is missing; running
        ones without progress for ``stale_after_seconds`` and without a live lease;
        declarative migrations whose collection lacks the version index; dead
        watchers (drift mode ``stream``/``both``). See
        :mod:`migronaut_core.background.audit`.
        """
        return background_findings(self._kit, stale_after_seconds=stale_after_seconds)


def background_findings(kit: KitBase, *, stale_after_seconds: float) -> list[Finding]:
    """The background audit's findings (``kit.background.audit``; ``kit.runs.audit`` folds
    them in)."""
    return audits.audit(
        kit._runtime,
        migrations_dir=kit.config.migrations_dir,
        watch=kit._watch_store() if kit.config.background_drift != "poll" else None,
        stale_after_seconds=stale_after_seconds,
    )
