"""How a drift watcher runs: its settings, checked before anything connects.

:func:`watch_settings` validates every option and names the bad one;
:func:`require_change_streams` refuses a deployment that has no change streams.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from migronaut_core.background.drift.verify import OnDrift, check_on_drift
from migronaut_core.background.runtime import Runtime
from migronaut_core.checks import check_int, check_number
from migronaut_core.deployment import is_standalone
from migronaut_core.errors import ConfigInvalidError

__all__ = ["WatchSettings", "require_change_streams", "watch_settings"]


@dataclass(frozen=True, slots=True)
class WatchSettings:
    """How a watcher runs; built and checked by :func:`watch_settings`.

    :param collections: only these collections (default: every collection with a
        completed forward background migration).
    :param on_drift: what to do with old-shape documents the watcher cannot
        upgrade itself (found by the probe of a fresh start, or whose upgrade
        failed): ``reopen`` the migration (its lanes take them) or only ``report``.
    :param batch_size: upgrade at most this many documents at once.
    :param batch_ms: wait at most this long for more events before upgrading.
    :param refresh_seconds: how often the set of migrations and collections is
        read again.
    :param leader_retry_seconds: how often a standby tries to take the lead.
    :param checkpoint_seconds: how often an idle leader saves its position.
    """

    collections: tuple[str, ...] | None = None
    on_drift: OnDrift = "reopen"
    batch_size: int = 100
    batch_ms: int = 200
    refresh_seconds: float = 10.0
    leader_retry_seconds: float = 10.0
    checkpoint_seconds: float = 2.0


def watch_settings(
    *,
    ttl_seconds: float,
    collections: Sequence[str] | None = None,
    on_drift: str = "reopen",
    batch_size: int = 100,
    batch_ms: int = 200,
    refresh_seconds: float = 10.0,
    leader_retry_seconds: float | None = None,
    checkpoint_seconds: float = 2.0,
) -> WatchSettings:
    """Check the watcher's options (before anything connects) and fill in defaults.

    ``leader_retry_seconds`` defaults to half the lock TTL (0.5 s to 10 s), so a
    standby takes over within about one TTL of a leader's death.

    :raises ConfigInvalidError: naming the option.
    """
    checked = check_on_drift(on_drift)
    names: tuple[str, ...] | None = None
    if collections is not None:
        if isinstance(collections, str) or not all(
            isinstance(name, str) and name for name in collections
        ):
            raise ConfigInvalidError(
                "collections must be a list of collection names", {"key": "collections"}
            )
        names = tuple(dict.fromkeys(collections))
    check_int("batch_size", batch_size, 1, 10_000)
    check_int("batch_ms", batch_ms, 1, 60_000)
    retry = leader_retry_seconds
    if retry is None:
        retry = min(10.0, max(0.5, ttl_seconds / 2))
    for key, value in (
        ("refresh_seconds", refresh_seconds),
        ("leader_retry_seconds", retry),
        ("checkpoint_seconds", checkpoint_seconds),
    ):
        check_number(key, value, 0.05, 3600, unit="seconds")
    return WatchSettings(
        collections=names,
        on_drift=checked,
        batch_size=batch_size,
        batch_ms=batch_ms,
        refresh_seconds=float(refresh_seconds),
        leader_retry_seconds=float(retry),
        checkpoint_seconds=float(checkpoint_seconds),
    )


def require_change_streams(rt: Runtime) -> None:
    """Refuse a deployment without change streams (a standalone server).

    :raises ConfigInvalidError: telling the user to keep ``background_drift`` at ``poll``.
    """
    if not is_standalone(rt.client):
        return
    raise ConfigInvalidError(
        "the live drift watcher needs change streams, which a standalone server does not "
        "have (a replica set or a sharded cluster does); keep background_drift = 'poll' "
        "here and run kit.drift.verify (the migronaut_drift DAG) on a schedule",
        {"key": "background_drift", "mode": "poll"},
    )
