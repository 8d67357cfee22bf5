"""The ``migronaut`` command: a thin shell over :class:`~migronaut_core.kit.Migronaut`.

Exit status: 0 on success; a :class:`MigronautError`'s ``exit_code`` on a known
failure (2 for bad config or arguments, 8 when the lock is held, …); 1 for
anything unexpected. ``--json`` makes every command print one JSON document on
stdout (errors too, as ``{"error": {code, message, context}}``).

``migronaut background …`` inspects and controls background migrations
(``status``, ``partitions``, ``history``, ``runnable``, ``pause``, ``resume``,
``cancel``, ``retry``, ``repin``, ``unlock``) and drives one from this process
(``run``). ``background run`` exits 0 when the migration completed (or, with
``--once``, when it is still pending or running after its round);
:data:`NOT_COMPLETED_EXIT` (12) when it stopped paused, cancelled or blocked;
BackgroundFailedError's code when it failed; RunAbortedError's code after Ctrl-C
(lanes stop at their next batch; it resumes from its checkpoints next time).

``background wait NAME [--until migrated|completed|finalized] [--timeout S]`` is a
deploy gate: it reads the state until the migration reached the milestone (exit 0),
ended short of it (failed, cancelled, no longer registered: :data:`NOT_COMPLETED_EXIT`,
12) or the timeout passed (:data:`WAIT_TIMEOUT_EXIT`, 19); paused, blocked and pending
keep it waiting. It drives nothing.

``background dry-run`` previews one on a few documents and writes nothing; it
exits 0 whatever the documents would do (the report says).

``background watch`` hosts the live drift watcher (leading or standing by per
collection) until Ctrl-C or SIGTERM and exits 0 after a clean stop (a second
signal aborts: RunAbortedError's code); ``background watch-status`` prints what
the watchers recorded (leader, lag, resume state; never the resume token).

``background audit`` prints findings (changed or missing files, stalled runs,
missing version indexes, dead watchers) and exits 0 whatever it found. ``migronaut
audit`` prints the general audit (the run lock, pending and failed migrations,
changed or missing files, collection definitions, changelog records) with those
background findings folded in, and exits :data:`AUDIT_ERRORS_EXIT` (20) when a
finding is an error.

``up --plan`` and ``down --plan`` print what the run would do and write nothing;
they exit 0 when it would go, else with the code of the refusal it would meet.
``migronaut baseline --to NAME`` records migrations up to NAME as applied (adopted)
without running them.

``migronaut converge`` creates the version index of every declared collection
(``collections`` / ``collections_dir``) and reports what it created, recorded in the
converge log (``--log`` prints it); ``--prune`` also drops the version indexes
converge created that nothing declares any more (never a user's, never one a
shard key may need).

The modules:

- :mod:`.entry_point` — :func:`main`: parse, set up logging, open the kit, call the
  command's handler, turn a :class:`MigronautError` into ``Type: message`` and its code;
- :mod:`.parser` — :func:`build_parser`: every command, its arguments and its handler;
- :mod:`.runner_commands` — ``up``, ``down``, ``baseline``, ``status``, ``audit``,
  ``converge``, ``create``;
- :mod:`.background_commands` — ``background ACTION`` (views, audit, verify, watch,
  watch-status, run, dry-run and the controls);
- :mod:`.run_progress` — ``background run``'s progress on stderr and its Ctrl-C handling;
- :mod:`.output` — what several commands print: JSON, the background status table, errors.

``python -m migronaut_core.cli`` runs :func:`main`, as the ``migronaut`` script does.
"""

from __future__ import annotations

from migronaut_core.cli.background_commands import NOT_COMPLETED_EXIT, WAIT_TIMEOUT_EXIT
from migronaut_core.cli.entry_point import main
from migronaut_core.cli.parser import build_parser
from migronaut_core.cli.runner_commands import AUDIT_ERRORS_EXIT

__all__ = ["AUDIT_ERRORS_EXIT", "NOT_COMPLETED_EXIT", "WAIT_TIMEOUT_EXIT", "build_parser", "main"]
