"""Background migration specs: the model, its validation and what a pass matches.

- :mod:`.model`: :class:`BackgroundSpec` and its settings, :class:`BackgroundFunctions`;
- :mod:`.validation`: :func:`resolve_spec` (a migration file to a spec) and
  :func:`check_slice_ms`, every mistake a ``ConfigInvalidError`` naming the key;
- :mod:`.match`: :func:`match_of`, :func:`exclude_bad_ids`, :func:`only_ids`,
  :func:`canary_subset`, :func:`in_canary`, :func:`match_hash`;
- :mod:`.stages`: the stages an update-pipeline migration may use, and may not
  write the stamps with.

Every public name is re-exported here. The status names and the state machine
live in :mod:`migronaut_core.background.states`.
Everything here is pure: no database, no clock, no logging.
"""

from __future__ import annotations

from migronaut_core.background.spec.match import (
    canary_subset,
    exclude_bad_ids,
    in_canary,
    match_hash,
    match_of,
    only_ids,
)
from migronaut_core.background.spec.model import (
    CANARY_BUCKETS,
    MAX_CHECKPOINT_BYTES,
    REWRITING_MODES,
    UPDATE_STAGES,
    AdaptiveSettings,
    BackgroundFunctions,
    BackgroundSpec,
    CanarySettings,
    Direction,
    Mode,
    PartitionSettings,
    SoakSettings,
    ThrottleSettings,
    TransactionSettings,
    ValidatorKind,
    ValidatorSettings,
)
from migronaut_core.background.spec.validation import check_slice_ms, read_stored, resolve_spec
from migronaut_core.health_limits import (
    HEALTH_SENSE,
    HEALTH_SIGNALS,
    HealthLimit,
    HealthSettings,
    HealthSignal,
    LimitSense,
)

__all__ = [
    "CANARY_BUCKETS",
    "HEALTH_SENSE",
    "HEALTH_SIGNALS",
    "MAX_CHECKPOINT_BYTES",
    "REWRITING_MODES",
    "UPDATE_STAGES",
    "AdaptiveSettings",
    "BackgroundFunctions",
    "BackgroundSpec",
    "CanarySettings",
    "Direction",
    "HealthLimit",
    "HealthSettings",
    "HealthSignal",
    "LimitSense",
    "Mode",
    "PartitionSettings",
    "SoakSettings",
    "ThrottleSettings",
    "TransactionSettings",
    "ValidatorKind",
    "ValidatorSettings",
    "canary_subset",
    "check_slice_ms",
    "exclude_bad_ids",
    "in_canary",
    "match_hash",
    "match_of",
    "only_ids",
    "read_stored",
    "resolve_spec",
]
