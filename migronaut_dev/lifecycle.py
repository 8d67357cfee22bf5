"""The ``with`` block every local server of the tooling shares: stopped on leaving it.

Tests and scripts rely on it that nothing a harness started outlives the block,
after a failure too. :class:`StopsOnExit` is for a server already running when it
is handed over (a replica set, a resolved server); :class:`StartsOnEnter` for one
the block itself starts (PostgreSQL, Redis, the Airflows).
"""

from __future__ import annotations

from types import TracebackType
from typing import Self


class StopsOnExit:
    """Stopped on leaving a ``with`` block, whatever the outcome; :meth:`stop` is idempotent."""

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class StartsOnEnter(StopsOnExit):
    """Started on entering a ``with`` block, and stopped on leaving it whatever the outcome."""

    def start(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self
