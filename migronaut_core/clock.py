"""The one clock migronaut reads on the client: wall time in UTC and monotonic time.

What is stored (``updated_at``, history entries, ``applied_at``) takes
:func:`utc_now`; a deadline or a duration takes :func:`monotonic` and
:func:`elapsed_ms`; a document error's ``at_epoch`` takes :func:`epoch_seconds`.
Lease and lock expiry are judged by the server's clock (``$$NOW``), never by
this one, so clock skew between machines cannot let two holders write.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pendulum

__all__ = ["aware", "elapsed_ms", "epoch_seconds", "monotonic", "utc_now"]


def utc_now() -> pendulum.DateTime:
    """The current time in UTC (time-zone aware)."""
    return pendulum.now("UTC")


def monotonic() -> float:
    """Seconds on a clock that never goes back: for deadlines and durations only."""
    return time.monotonic()


def elapsed_ms(started: float) -> float:
    """Milliseconds since ``started``, a :func:`monotonic` value."""
    return (time.monotonic() - started) * 1000


def epoch_seconds() -> float:
    """Seconds since the Unix epoch, as a number (a document error's ``at_epoch``)."""
    return time.time()


def aware(value: datetime) -> datetime:
    """``value`` with its time zone: a naive one (read by a client without ``tz_aware``) is UTC."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
