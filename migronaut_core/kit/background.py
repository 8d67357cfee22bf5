"""The background migrations' operations on the kit: drive, read, control, preview.

:class:`BackgroundOperations` is the part of :class:`~migronaut_core.kit.Migronaut`
that works one background migration at a time through the engine's
:class:`~migronaut_core.background.runtime.Runtime`: the coordinator step,
slices and in-process runs, the status views (reads only), the controls
(pause, resume, cancel, retry, repin, unlock) and the dry run.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import replace
from datetime import timedelta
from typing import Any, overload

from migronaut_core import files
from migronaut_core.background.cancel import CancelToken
from migronaut_core.background.control import actions as controls
from migronaut_core.background.control.actions import ControlAction, ControlResult
from migronaut_core.background.coordinator import (
    STALL_SECONDS,
    Answer,
    Driver,
    coordinate,
    stalled_for,
)
from migronaut_core.background.dry_run import DryRunReport, StepDryRunReport
from migronaut_core.background.dry_run import dry_run as preview
from migronaut_core.background.events import Listener
from migronaut_core.background.lanes.driver import drive
from migronaut_core.background.lanes.lane import SliceResult, run_slice
from migronaut_core.background.registration import runnable
from migronaut_core.background.spec import check_slice_ms
from migronaut_core.background.states import transition
from migronaut_core.background.views import (
    BackgroundStatusView,
    history_json,
    partition_json,
    read_status,
    read_statuses,
    registered_names,
)
from migronaut_core.changelog import Actor
from migronaut_core.checks import check_int, check_number
from migronaut_core.kit.base import KitBase
from migronaut_core.runner import with_default_user


class BackgroundOperations(KitBase):
    """Background migrations: coordinate, slices, runs, status views, controls, dry run."""

    def on(self, event: str, listener: Listener) -> Callable[[], None]:
        """Subscribe to engine events (``background:*``, or ``"*"``); returns an unsubscribe."""
        return self.events.on(event, listener)

    def coordinate_background(
        self, name: str, *, driver: Driver | None = None, cancel: CancelToken | None = None
    ) -> Answer:
        """One coordinator step; idempotent, safe from any number of processes."""
        files.validate_name(name)
        self._ready()
        return coordinate(self.runtime, name, driver=driver, cancel=cancel)

    def run_background_slice(
        self, name: str, *, slice_ms: int | None = None, cancel: CancelToken | None = None
    ) -> SliceResult:
        """One slice of one lane: claim a partition, work it until ``slice_ms``, release."""
        files.validate_name(name)
        if slice_ms is not None:
            check_slice_ms(slice_ms)
        self._ready()
        return run_slice(self.runtime, name, slice_ms=slice_ms, cancel=cancel)

    def run_background(
        self,
        name: str,
        *,
        concurrency: int = 1,
        slice_ms: int | None = None,
        until_done: bool = True,
        cancel: CancelToken | None = None,
    ) -> dict[str, Any]:
        """Drive a background migration from this process with up to ``concurrency`` lanes.

        :returns: its status view (completed, paused, cancelled or blocked).
        :raises BackgroundFailedError: it failed.
        :raises RunAbortedError: ``cancel`` fired (it resumes from its checkpoints later).
        """
        check_int("concurrency", concurrency, 1)
        if slice_ms is not None:
            check_slice_ms(slice_ms)
        self._registered(name)
        self._ready()
        return drive(
            self.runtime,
            name,
            concurrency=concurrency,
            slice_ms=slice_ms,
            until_done=until_done,
            cancel=cancel,
        )

    def runnable_background(self) -> list[dict[str, Any]]:
        """Background migrations with work to do, oldest first."""
        self._ready()
        return runnable(self.runtime)

    def stalled_background(self, *, stall_seconds: float = STALL_SECONDS) -> list[str]:
        """Running background migrations nothing has moved for ``stall_seconds``, oldest first.

        Nothing moved: no lane holds a live lease, and no lane's progress and no
        coordinator step was recorded in that time (a driver died or froze without
        its leases lapsing into another's hands). Their drivers should be taken
        over: a coordinator step with a new round (``Driver(round=None)``) makes the
        stuck driver's later steps ``superseded``. Reads only.

        :raises ConfigInvalidError: ``stall_seconds`` is below 1.
        """
        check_number("stall_seconds", stall_seconds, 1)
        store = self.runtime.store
        limit = timedelta(seconds=stall_seconds)
        return [
            view.name
            for view in read_statuses(store, statuses=["running"])
            if (state := store.states.get(view.name)) is not None
            and (idle := stalled_for(self.runtime, state)) is not None
            and idle >= limit
        ]

    # -- reading (no index is created, nothing is written) ---------------------------------

    @overload
    def background_status(self, name: None = None) -> list[dict[str, Any]]: ...

    @overload
    def background_status(self, name: str) -> dict[str, Any] | None: ...

    def background_status(
        self, name: str | None = None
    ) -> list[dict[str, Any]] | dict[str, Any] | None:
        """The status view of one background migration (None if unregistered), or of all."""
        if name is None:
            return [view.to_dict() for view in self.background_status_views()]
        files.validate_name(name)
        view = self.background_status_view(name)
        return None if view is None else view.to_dict()

    def background_status_view(self, name: str) -> BackgroundStatusView | None:
        """The typed status of one background migration; None when it is not registered.

        Reads only: no index is created and nothing is written (a blocked one
        is not unblocked here).
        """
        return read_status(self.runtime.store, name)

    def background_status_views(
        self,
        *,
        names: Collection[str] | None = None,
        statuses: Collection[str] | None = None,
    ) -> list[BackgroundStatusView]:
        """The typed status of every registered background migration, oldest first.

        :param names: only these migrations.
        :param statuses: only those in these statuses (empty or None: any).
        Reads only, like :meth:`background_status_view`.
        """
        return read_statuses(self.runtime.store, names=names, statuses=statuses)

    def background_names(self) -> list[str]:
        """Every registered background migration, oldest first; reads only."""
        return registered_names(self.runtime.store)

    def background_partitions(self, name: str) -> list[dict[str, Any]]:
        """The partitions of the current generation: scope, cursor, counters, lease holder."""
        state = self._registered(name)
        partitions = self.runtime.store.partitions.list_partitions(
            name, generation=state["generation"]
        )
        return [partition_json(partition) for partition in partitions]

    def background_history(self, name: str) -> list[dict[str, Any]]:
        """The control history: action, from, to, who, why, when."""
        return history_json(self._registered(name))

    # -- controls ------------------------------------------------------------------------

    def control_background(
        self,
        name: str,
        action: ControlAction,
        *,
        reason: str | None = None,
        actor: str | None = None,
        wait: bool = False,
        repin: bool = False,
    ) -> ControlResult:
        """Apply any of the :data:`~migronaut_core.CONTROL_ACTIONS` to a background migration.

        ``pause``/``cancel``: lanes stop before their next batch (``wait`` until
        they have, ``stopped`` says whether in time). ``resume``: back to
        pending, or blocked while its requirements are open. ``retry``: a failed
        or cancelled one from its checkpoints (a completed one is reopened over
        what is left); ``retry_from_start`` drops all progress; either pins the
        file on disk first with ``repin``. ``repin``: the file on disk becomes
        its version (its checksum in the changelog too; ``replan`` says whether
        its partitions are planned again). ``unlock``: clears the coordinator
        lock and every lease (``lock``, ``leases``; its status is unchanged).
        Recorded in its history with ``actor`` (default: the OS user) and ``reason``.
        ``may_run`` on the result says whether its driver should be started now.

        :raises ConfigInvalidError: an unknown action, or an option it does not take.
        :raises NotAppliedError: it is not registered.
        :raises BackgroundConflictError: the action does not fit its status.
        """
        action = controls.check_control(action, wait=wait, repin=repin)
        who = with_default_user(Actor(requested_by=actor, reason=reason))
        files.validate_name(name)
        self._ready()
        return controls.settled(action, self._apply_control(name, action, who, wait, repin))

    def _apply_control(
        self, name: str, action: ControlAction, who: Actor, wait: bool, repin: bool
    ) -> ControlResult:
        if action == "unlock":
            return controls.unlock(self.runtime, name, actor=who)
        if action == "repin":
            return self._repin(name, who)
        replan = self._repin_for_retry(name, who) if repin else None
        if action == "retry_from_start":
            result = controls.control(self.runtime, name, "retry", actor=who, from_start=True)
        else:
            result = controls.control(self.runtime, name, action, actor=who)
        if wait:
            return replace(result, stopped=controls.wait_for_lanes(self.runtime, name))
        return result if replan is None else replace(result, replan=replan)

    def _repin_for_retry(self, name: str, actor: Actor) -> bool | None:
        """Repin before a retry, once the retry is known to fit the status; answer ``replan``.

        A retry the state machine refuses raises here, so it leaves the file's pin
        (spec, checksum, changelog) as it was.
        """
        state = self.runtime.store.states.get(name)
        if state is not None:
            status = state["status"]
            transition(status, "reopen" if status == "completed" else "retry", migration=name)
        return self._repin(name, actor).replan

    def _repin(self, name: str, actor: Actor) -> ControlResult:
        result, checksum = controls.repin(self.runtime, name, actor=actor)
        self.runner.changelog.set_checksum(name, checksum)
        return result

    def pause_background(
        self,
        name: str,
        *,
        requested_by: str | None = None,
        reason: str | None = None,
        wait: bool = False,
    ) -> ControlResult:
        """Pause; lanes stop before their next batch (``wait`` until they have)."""
        return self.control_background(name, "pause", actor=requested_by, reason=reason, wait=wait)

    def resume_background(
        self, name: str, *, requested_by: str | None = None, reason: str | None = None
    ) -> ControlResult:
        """Resume a paused one (back to blocked while its requirements are open)."""
        return self.control_background(name, "resume", actor=requested_by, reason=reason)

    def cancel_background(
        self,
        name: str,
        *,
        requested_by: str | None = None,
        reason: str | None = None,
        wait: bool = False,
    ) -> ControlResult:
        """Cancel; lanes stop before their next batch (``wait`` until they have)."""
        return self.control_background(name, "cancel", actor=requested_by, reason=reason, wait=wait)

    def retry_background(
        self,
        name: str,
        *,
        requested_by: str | None = None,
        reason: str | None = None,
        from_start: bool = False,
        repin: bool = False,
    ) -> ControlResult:
        """Retry a failed or cancelled one (or reopen a completed one over what is left)."""
        action: ControlAction = "retry_from_start" if from_start else "retry"
        return self.control_background(name, action, actor=requested_by, reason=reason, repin=repin)

    def repin_background(
        self, name: str, *, requested_by: str | None = None, reason: str | None = None
    ) -> ControlResult:
        """Pin the file on disk as the migration's version (its checksum in the changelog too)."""
        return self.control_background(name, "repin", actor=requested_by, reason=reason)

    def unlock_background(
        self, name: str, *, requested_by: str | None = None, reason: str | None = None
    ) -> dict[str, Any]:
        """Clear the coordinator lock and every lease of a stuck background migration."""
        result = self.control_background(name, "unlock", actor=requested_by, reason=reason)
        return {"lock": result.lock, "leases": result.leases}

    # -- dry runs ------------------------------------------------------------------------

    def dry_run_background(
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
            self.runtime,
            name,
            sample=sample,
            first=first,
            validate=validate,
            steps=steps,
            from_start=from_start,
        )
