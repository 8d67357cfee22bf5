"""The runner's operations on the kit, ``kit.runs``: migrate, preview, baseline, converge, audit.

:class:`Runs` is the namespace of :class:`~migronaut_core.kit.Migronaut` that
works on the changelog and the run lock (``up``, ``down``, ``status``, the
plans, ``baseline``, ``create``, ``inspect_lock``), the collection
definitions' version indexes (``converge`` and its log), and the general audit,
which folds in the background findings.
"""

from __future__ import annotations

from pathlib import Path

from migronaut_core import files
from migronaut_core.audit import Finding, audit_runner
from migronaut_core.audit import fold as fold_findings
from migronaut_core.background import audit as audits
from migronaut_core.background.indexes import ConvergeReport
from migronaut_core.background.indexes import converge as converge_collections
from migronaut_core.background.store import ConvergeLog
from migronaut_core.baseline import BaselineResult
from migronaut_core.baseline import baseline as adopt
from migronaut_core.changelog import Actor
from migronaut_core.checks import check_int
from migronaut_core.kit.background import background_findings
from migronaut_core.kit.base import KitBase
from migronaut_core.kit.results import ConvergeLogEntry
from migronaut_core.lock import LockInfo
from migronaut_core.preview import RunPlan, plan_down, plan_up
from migronaut_core.runner import RunOptions, RunResult, StatusRow, with_default_user


class Runs:
    """Migrations, plans, baseline, converge and the audit: ``kit.runs``.

    :param kit: the kit whose connection and wiring every operation uses.
    """

    __slots__ = ("_kit",)

    def __init__(self, kit: KitBase) -> None:
        self._kit = kit

    def up(
        self,
        *,
        to: str | None = None,
        only: str | None = None,
        requested_by: str | None = None,
        reason: str | None = None,
        wait_for_lock_seconds: float = 0,
        allow_checksum_mismatch: bool = False,
        on_background_pending: str = "error",
        options: RunOptions | None = None,
    ) -> RunResult:
        """Apply pending migrations (all, up to ``to``, or ``only`` one)."""
        opts = options or RunOptions(
            wait_for_lock_seconds=wait_for_lock_seconds,
            actor=Actor(requested_by=requested_by, reason=reason),
            allow_checksum_mismatch=allow_checksum_mismatch,
            on_background_pending=on_background_pending,  # type: ignore[arg-type]
        )
        self._kit._checked_first()
        return self._kit._runner.up(to=to, only=only, options=opts)

    def down(
        self,
        *,
        to: str | None = None,
        requested_by: str | None = None,
        reason: str | None = None,
        wait_for_lock_seconds: float = 0,
        options: RunOptions | None = None,
    ) -> RunResult:
        """Revert the last applied migration, or all applied after ``to``."""
        opts = options or RunOptions(
            wait_for_lock_seconds=wait_for_lock_seconds,
            actor=Actor(requested_by=requested_by, reason=reason),
        )
        self._kit._checked_first()
        return self._kit._runner.down(to=to, options=opts)

    def status(self) -> list[StatusRow]:
        """Return one row per migration, oldest first."""
        return self._kit._runner.status()

    def plan_up(
        self,
        *,
        to: str | None = None,
        only: str | None = None,
        allow_checksum_mismatch: bool = False,
    ) -> RunPlan:
        """What :meth:`up` would do now, in order, and the refusal it would meet; writes
        nothing (no lock, no index). See :mod:`migronaut_core.preview`."""
        return plan_up(
            self._kit._runner, to=to, only=only, allow_checksum_mismatch=allow_checksum_mismatch
        )

    def plan_down(self, *, to: str | None = None) -> RunPlan:
        """What :meth:`down` would do now, newest first, and the refusal it would meet
        (an irreversible target); writes nothing."""
        return plan_down(self._kit._runner, to=to)

    def baseline(
        self,
        *,
        to: str,
        requested_by: str | None = None,
        reason: str | None = None,
        wait_for_lock_seconds: float = 0,
    ) -> BaselineResult:
        """Record every migration up to ``to`` as applied, adopted, without running it.

        For a database that already has them. See :mod:`migronaut_core.baseline`.

        :raises BaselineConflictError: a later migration is applied, or a background
            one up to ``to`` was registered by migronaut.
        """
        opts = RunOptions(
            wait_for_lock_seconds=wait_for_lock_seconds,
            actor=Actor(requested_by=requested_by, reason=reason),
        )
        self._kit._checked_first()
        return adopt(self._kit._runner, to=to, options=opts)

    def create(self, title: str, *, background: bool = False, update: bool = False) -> Path:
        """Create a migration file from a template; needs no database.

        ``update``: a background migration written as an update pipeline (implies
        ``background``).
        """
        return files.write_new(
            self._kit.config.migrations_dir, title, background=background, update=update
        )

    def inspect_lock(self) -> LockInfo | None:
        """Return who holds the run lock, if anyone ever took it."""
        return self._kit._runner.run_lock(Actor()).inspect()

    def converge(
        self,
        *,
        prune: bool = False,
        requested_by: str | None = None,
        reason: str | None = None,
    ) -> ConvergeReport:
        """Create the version index of every declared collection (``collections``,
        ``collections_dir``) that declares versioning.

        ``{field: 1, _id: 1}``, or on a sharded collection the variant carrying
        the shard key (see :mod:`migronaut_core.background.indexes`); idempotent.
        Every index it creates (or drops) is recorded in the converge log with
        ``requested_by`` (default: the OS user) and ``reason``. With
        ``ensure_indexes = false`` it creates nothing (and records nothing): it
        only checks that each one exists.

        :param prune: then drop the version indexes converge created that no
            declared collection wants any more — never an index it did not
            create, never one the shard key may need, never one a background
            migration not completed reads through (those are reported kept).
        :returns: what was created and what existed, collection by collection,
            and what prune dropped or kept.
        :raises ConfigInvalidError: the collection definitions do not load, or
            ``prune`` with ``ensure_indexes = false`` (before anything is done).
        :raises IndexMissingError: ``ensure_indexes = false`` and some are missing.
        """
        actor = with_default_user(Actor(requested_by=requested_by, reason=reason))
        report = converge_collections(
            self._kit._runtime,
            self._kit._files.definitions(),
            _converge_log(self._kit),
            actor=actor,
            create=self._kit.config.ensure_indexes,
            prune_undeclared=prune,
        )
        touched = [item.collection for item in report.collections]
        for collection in {*touched, *(item.collection for item in report.pruned)}:
            self._kit._runtime.forget_indexes(collection)
        return report

    def converge_log(
        self, *, collection: str | None = None, limit: int = 100
    ) -> list[ConvergeLogEntry]:
        """What converge created and dropped, newest first; reads only.

        Each entry: ``collection``, ``action`` (``created``/``dropped``),
        ``index`` (its name), ``key``, ``at``, ``by`` (requested_by, reason,
        host, pid).

        :raises ConfigInvalidError: ``limit`` is not a positive integer.
        """
        check_int("limit", limit, 1)
        entries = _converge_log(self._kit).read(collection, limit)
        return [ConvergeLogEntry.from_document(entry) for entry in entries]

    # -- audit ---------------------------------------------------------------------------

    def audit(self, *, stale_after_seconds: float = audits.STALE_AFTER_SECONDS) -> list[Finding]:
        """Everything that needs an operator's look, general then background; read-only.

        The run lock (held, or stale: a killed run), the collection definitions
        (do they load), every migration (pending, failed, its file changed since
        it was applied or gone, its file does not load), the changelog records
        (readable), and the background findings of
        :meth:`Background.audit <migronaut_core.kit.background.Background.audit>`;
        each fact once (see :mod:`migronaut_core.audit`). A finding with
        severity ``error`` is something a run would refuse or trip over.
        """
        general = audit_runner(
            lock=self.inspect_lock(),
            records=self._kit._runner.changelog.documents(),
            migrations_dir=self._kit.config.migrations_dir,
            definitions=self._kit._files.definitions,
        )
        background = background_findings(self._kit, stale_after_seconds=stale_after_seconds)
        return fold_findings(general, background)


def _converge_log(kit: KitBase) -> ConvergeLog:
    return ConvergeLog(kit.db, kit.config.background_collections.converge_log)
