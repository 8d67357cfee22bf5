"""The limits of MongoDB's own health signals: what they are, and how they are written.

A background migration's ``health`` and a target's ``background_health`` share one
shape: ``True``/``None`` for the defaults, ``False`` for off, or a mapping of
per-signal overrides ``{signal: {"soft": …, "hard": …} | False}``. A target's
setting is the base a migration file's ``health`` starts from, so a platform team
can tighten (or switch off) a signal for every migration of a database without
touching the files; a file's mapping still overrides it signal by signal.

Pure data and checks, below the config and the spec (like
:mod:`migronaut_core.windows`): :func:`parse_health` checks a raw value with the
rules of :mod:`migronaut_core.checks` and raises :class:`HealthLimitError` naming
the path at fault, never the value; callers turn that into their typed error.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias, get_args

from migronaut_core.checks import NestedSettingError, int_problem, number_problem

__all__ = [
    "DEFAULT_HEALTH",
    "HEALTH_SENSE",
    "HEALTH_SIGNALS",
    "HealthLimit",
    "HealthLimitError",
    "HealthSettings",
    "HealthSignal",
    "LimitSense",
    "parse_health",
]

#: The MongoDB health signals lanes watch, in the order they are judged: the
#: first breached one is the one a hold names.
HealthSignal: TypeAlias = Literal[
    "flow_control",
    "majority_lag_ms",
    "cache_dirty",
    "cache_used",
    "write_tickets",
    "queued_operations",
    "oplog_window_s",
]
HEALTH_SIGNALS: Final[tuple[HealthSignal, ...]] = get_args(HealthSignal)
#: How a signal's reading breaches a limit: ``above`` it, ``below`` it, or
#: ``flag``: the reading is true and the limit is ``True``.
LimitSense: TypeAlias = Literal["above", "below", "flag"]
HEALTH_SENSE: Final[dict[HealthSignal, LimitSense]] = {
    "flow_control": "flag",
    "majority_lag_ms": "above",
    "cache_dirty": "above",
    "cache_used": "above",
    "write_tickets": "below",
    "queued_operations": "above",
    "oplog_window_s": "below",
}
#: Each numeric signal's accepted range, and whether it takes whole numbers only.
_BOUNDS: Final[Mapping[HealthSignal, tuple[float, float, bool]]] = {
    "majority_lag_ms": (0, 86_400_000, True),
    "cache_dirty": (0.0, 1.0, False),
    "cache_used": (0.0, 1.0, False),
    "write_tickets": (0.0, 1.0, False),
    "queued_operations": (0, 1_000_000, True),
    "oplog_window_s": (0, 2_592_000, True),
}
_LIMIT_KEYS: Final = ("soft", "hard")


class HealthLimitError(NestedSettingError):
    """A health setting that does not fit: ``problem`` (words after the key) at ``path``.

    Callers turn it into their typed error naming the key (``health.cache_dirty.soft``).
    """


@dataclass(frozen=True, slots=True)
class HealthLimit:
    """One signal's limits: past ``soft`` lanes slow down, past ``hard`` they hold.

    ``None`` switches a limit off. ``flow_control`` takes ``True``/``None``
    (its reading is whether the primary's flow control says it is lagged);
    every other signal a number in its reading's unit (see
    :class:`HealthSettings`).
    """

    soft: float | bool | None = None
    hard: float | bool | None = None


@dataclass(frozen=True, slots=True)
class HealthSettings:
    """The limits of MongoDB's own health signals.

    A soft breach slows the lanes down (the adaptive controller takes it for an
    overload; without one a lane pauses 250 ms before the batch). A hard breach
    makes each lane stop at its next batch boundary, release its partition and
    hold until the signal clears; the status names the signal and its reading.
    The defaults are MongoDB's own thresholds where it has one (WiredTiger's
    eviction triggers, Atlas's oplog window alert); docs/performance.md says why.

    :param flow_control: the primary's flow control is throttling writes because
        the majority commit point lags (default: soft).
    :param majority_lag_ms: how far the majority commit point is behind the
        primary's last applied write, in ms (default: soft 2000, hard 30000).
    :param cache_dirty: dirty bytes / the WiredTiger cache's size (default: soft
        0.15, hard 0.20: where application threads start evicting).
    :param cache_used: bytes in cache / its size (default: soft 0.90, hard 0.95:
        WiredTiger's eviction trigger).
    :param write_tickets: write tickets available / their total, breached
        *below* the limit (default: soft 0.25, hard 0.05).
    :param queued_operations: operations queued for a lock or ticket (default:
        soft 32, no hard limit).
    :param oplog_window_s: seconds the oplog covers (first to last entry),
        breached *below* the limit and judged only once the oplog is full
        (default: soft 7200, hard 3600).
    """

    flow_control: HealthLimit = HealthLimit(soft=True)
    majority_lag_ms: HealthLimit = HealthLimit(soft=2_000, hard=30_000)
    cache_dirty: HealthLimit = HealthLimit(soft=0.15, hard=0.20)
    cache_used: HealthLimit = HealthLimit(soft=0.90, hard=0.95)
    write_tickets: HealthLimit = HealthLimit(soft=0.25, hard=0.05)
    queued_operations: HealthLimit = HealthLimit(soft=32)
    oplog_window_s: HealthLimit = HealthLimit(soft=7_200, hard=3_600)

    def limits(self) -> dict[HealthSignal, HealthLimit]:
        """Each signal's limits, in :data:`HEALTH_SIGNALS` order."""
        return {signal: getattr(self, signal) for signal in HEALTH_SIGNALS}

    def to_document(self) -> dict[str, dict[str, Any]]:
        """The settings as stored in the state document (``{signal: {soft, hard}}``)."""
        return {
            signal: {"soft": limit.soft, "hard": limit.hard}
            for signal, limit in self.limits().items()
        }


#: The limits a migration gets when neither its file nor its target says otherwise.
DEFAULT_HEALTH: Final = HealthSettings()


def parse_health(
    value: Any, *, base: HealthSettings | None = DEFAULT_HEALTH, tolerant: bool = False
) -> HealthSettings | None:
    """Check a raw ``health`` value; ``None`` in the result means "off".

    :param value: ``True``/``None``: ``base``; ``False``: off; a mapping: ``base``
        with the signals it names replaced (a signal's missing ``soft`` or ``hard``
        keeps ``base``'s; ``False`` switches the signal off).
    :param base: what the value starts from: a target's ``background_health``, by
        default :data:`DEFAULT_HEALTH`. ``None`` (the target switched health off)
        leaves ``True`` off too, and a mapping starts from the defaults.
    :param tolerant: ignore signals and keys this release does not know (what an
        older or newer release stored).
    :raises HealthLimitError: naming the signal and key at fault, never the value.
    """
    start = DEFAULT_HEALTH if base is None else base
    if value is False:
        return None
    if value is None or value is True:
        return base
    if not isinstance(value, Mapping):
        raise HealthLimitError(f"must be True, False or a mapping (got {type(value).__name__})")
    given: dict[str, HealthLimit] = {}
    for key, raw in value.items():
        if key in HEALTH_SIGNALS:
            given[key] = _limit(key, raw, getattr(start, key), tolerant)
        elif not tolerant:
            shown = str(key)[:60]
            close = difflib.get_close_matches(shown, HEALTH_SIGNALS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise HealthLimitError(f"is not a known setting{hint}", shown)
    return dataclasses.replace(start, **given)


def _limit(signal: HealthSignal, raw: Any, default: HealthLimit, tolerant: bool) -> HealthLimit:
    if raw is False or raw is None:
        return HealthLimit()
    if not isinstance(raw, Mapping):
        raise HealthLimitError(f"must be a mapping (got {type(raw).__name__})", signal)
    for key in raw:
        if key not in _LIMIT_KEYS and not tolerant:
            shown = str(key)[:60]
            close = difflib.get_close_matches(shown, _LIMIT_KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise HealthLimitError(f"is not a known setting{hint}", signal, shown)
    soft = _one(signal, "soft", raw["soft"]) if "soft" in raw else default.soft
    hard = _one(signal, "hard", raw["hard"]) if "hard" in raw else default.hard
    if soft is not None and hard is not None and soft is not True:
        above = HEALTH_SENSE[signal] == "above"
        if soft > hard if above else soft < hard:
            side = "exceed" if above else "be below"
            raise HealthLimitError(f"must not {side} the hard limit", signal, "soft")
    return HealthLimit(soft=soft, hard=hard)


def _one(signal: HealthSignal, key: str, value: Any) -> float | bool | None:
    """One limit's value: ``True`` (flow control only) or a number in range; falsy is off."""
    if value is None or value is False:
        return None
    if signal == "flow_control":
        if value is True:
            return True
        raise HealthLimitError(
            f"must be True, False or None (got {type(value).__name__})", signal, key
        )
    low, high, whole = _BOUNDS[signal]
    problem = int_problem(value, int(low), int(high)) if whole else number_problem(value, low, high)
    if problem is not None:
        raise HealthLimitError(problem, signal, key)
    return int(value) if whole else float(value)
