"""Pacing between batches: what keeps a background migration polite.

A background migration rewrites a collection the application is using, so each
lane waits before every batch for:

- the fixed pause of the spec (``throttle.pause_ms``);
- the user's ``throttle(ctx)`` function, whose result is extra milliseconds;
- the adaptive controller's pause (:mod:`.adaptive`);
- replication lag: with ``throttle.max_lag_ms``, a lane waits while the slowest
  secondary is further behind the primary than that (:mod:`.lag`);
- MongoDB's own health (``health``: flow control, majority commit lag, cache,
  tickets, oplog window; :mod:`.health`): past a soft limit a lane slows down,
  past a hard one it stops at the batch boundary and holds;
- the target's write budget (``background_budget``, shared by every process by
  the migrations' ``priority``) and its brake (:mod:`.budget`).

:mod:`.pacing` holds the :class:`Throttle` of one lane, which adds these up;
:mod:`.registry` the controllers and lag probes the lanes of one runtime share
(one controller per migration and shard group, whose state is stored on the
partition so a later lane resumes from it), freed when a migration ends.
Overload is judged by :func:`migronaut_core.server_errors.is_overload`.
Log lines carry migration names and numbers, never documents.
"""

from migronaut_core.background.throttle.adaptive import (
    AdaptiveController,
    ThrottleChange,
)
from migronaut_core.background.throttle.budget import BRAKE_BREACH, BRAKE_SIGNAL, TargetBudget
from migronaut_core.background.throttle.health import (
    HealthBreach,
    HealthProbe,
    HealthReading,
    ServerHealthProbe,
    first_breach,
    oplog_headroom_key,
    oplog_headroom_s,
    shared_health_probe,
)
from migronaut_core.background.throttle.lag import (
    LagProbe,
    LagSource,
    replication_lag_ms,
)
from migronaut_core.background.throttle.pacing import (
    PacedJob,
    Throttle,
    ThrottleContext,
    warning_keys,
)
from migronaut_core.background.throttle.registry import ThrottleRegistry

__all__ = [
    "BRAKE_BREACH",
    "BRAKE_SIGNAL",
    "AdaptiveController",
    "HealthBreach",
    "HealthProbe",
    "HealthReading",
    "LagProbe",
    "LagSource",
    "PacedJob",
    "ServerHealthProbe",
    "TargetBudget",
    "Throttle",
    "ThrottleChange",
    "ThrottleContext",
    "ThrottleRegistry",
    "first_breach",
    "oplog_headroom_key",
    "oplog_headroom_s",
    "replication_lag_ms",
    "shared_health_probe",
    "warning_keys",
]
