"""``background run`` in a terminal: its progress on stderr and what Ctrl-C does.

:class:`RunProgress` listens to engine events (from any thread) and shows a live
``rich`` bar when stderr is a terminal and ``rich`` (optional) is installed, plain
lines every :data:`PLAIN_PROGRESS_SECONDS` otherwise. :func:`cancel_on_interrupt`
turns a first Ctrl-C (or SIGTERM, for ``background watch``) into a cancel (lanes
stop at their next batch) and a second into ``KeyboardInterrupt``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

from migronaut_core import CancelToken
from migronaut_core.clock import monotonic

#: Without a live bar, ``background run`` prints a progress line this often.
PLAIN_PROGRESS_SECONDS = 2.0


@contextlib.contextmanager
def cancel_on_interrupt(
    token: CancelToken,
    name: str,
    *,
    notice: str | None = None,
    signals: tuple[signal.Signals, ...] = (signal.SIGINT,),
) -> Iterator[None]:
    """Turn a first Ctrl-C (or any of ``signals``) into ``token.cancel()``; a second one
    raises KeyboardInterrupt.

    :param notice: what to say on stderr at the first one (default: ``name``'s
        lanes stop at their next batch).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    said = notice or f"{name}'s lanes stop at their next batch"

    def interrupted(signum: int, frame: FrameType | None) -> None:
        if token.cancelled:
            raise KeyboardInterrupt
        # From another thread: the main one may hold the token's lock right now.
        threading.Thread(target=token.cancel, args=("interrupted",), daemon=True).start()
        # os.write, not print: a signal handler must not re-enter buffered stderr.
        os.write(
            sys.stderr.fileno(),
            f"\n{signal.Signals(signum).name}: {said} (again to abort at once)\n".encode(),
        )

    previous = {signum: signal.signal(signum, interrupted) for signum in signals}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class RunProgress:
    """Progress of ``background run`` on stderr, fed by engine events from any thread.

    A live ``rich`` bar when stderr is a terminal and ``rich`` is installed; plain
    lines every :data:`PLAIN_PROGRESS_SECONDS` otherwise.
    """

    EVENTS = ("background:partitioned", "background:batch")

    def __init__(self, name: str, view: dict[str, Any]) -> None:
        shown = view.get("progress") or {}
        self.name = name
        self.estimate = int(shown.get("estimate") or 0)
        self.done = int(shown.get("done") or 0)
        self.migrated = 0
        self._lock = threading.Lock()
        self._printed_at = monotonic()
        self._moved = False  # any event seen: worth a last plain line
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> RunProgress:
        self._bar = _rich_progress() if sys.stderr.isatty() else None
        if self._bar is not None:
            self._bar.start()
            self._task = self._bar.add_task(self.name, total=self.estimate or None)
            self._bar.update(self._task, completed=self.done)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
        elif self._moved:
            self._print_line()

    def __call__(self, event: str, payload: dict[str, Any]) -> None:
        if payload.get("migration") != self.name:
            return
        with self._lock:
            self._moved = True
            if event == "background:partitioned":
                self.estimate, self.done = int(payload.get("estimate") or 0), 0
            else:
                counters = payload.get("counters") or {}
                self.migrated += int(counters.get("migrated", 0))
                self.done += int(counters.get("migrated", 0)) + int(counters.get("skipped", 0))
            self._show(force=event == "background:partitioned")

    def _show(self, *, force: bool) -> None:
        if self._bar is not None:
            self._bar.update(self._task, total=self.estimate or None, completed=self.done)
        elif force or monotonic() - self._printed_at >= PLAIN_PROGRESS_SECONDS:
            self._print_line()

    def _print_line(self) -> None:
        self._printed_at = monotonic()
        percent = f" ({min(100.0, 100 * self.done / self.estimate):.1f}%)" if self.estimate else ""
        print(
            f"{self.name}: {self.done}/{self.estimate or '?'} documents{percent}, "
            f"{self.migrated} migrated by this run",
            file=sys.stderr,
            flush=True,
        )


def _rich_progress() -> Any:
    """A rich progress bar on stderr, or None without ``rich`` (an optional dependency)."""
    try:
        from rich.console import Console  # noqa: PLC0415 - optional, so imported late
        from rich.progress import (  # noqa: PLC0415
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TaskProgressColumn,
            TextColumn,
            TimeRemainingColumn,
        )
    except ImportError:
        return None
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
    )
