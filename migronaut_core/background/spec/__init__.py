"""Background migration specs: the model, its validation and what a pass matches.

- :mod:`.model`: :class:`BackgroundSpec` and its settings, :class:`BackgroundFunctions`;
- :mod:`.validation`: :func:`resolve_spec` (a migration file to a spec) and
  :func:`check_slice_ms`, every mistake a ``ConfigInvalidError`` naming the key;
- :mod:`.match`: :func:`match_of`, :func:`exclude_bad_ids`, :func:`only_ids`, :func:`match_hash`;
- :mod:`.stages`: the stages an update-pipeline migration may use, and may not
  write the stamps with.

Every public name is re-exported here. The status names and the state machine
live in :mod:`migronaut_core.background.states`.
Everything here is pure: no database, no clock, no logging.
"""

from __future__ import annotations

from migronaut_core.background.spec.match import exclude_bad_ids, match_hash, match_of, only_ids
from migronaut_core.background.spec.model import (
    HEALTH_SENSE,
    HEALTH_SIGNALS,
    MAX_CHECKPOINT_BYTES,
    REWRITING_MODES,
    UPDATE_STAGES,
    AdaptiveSettings,
    BackgroundFunctions,
    BackgroundSpec,
    Direction,
    HealthLimit,
    HealthSettings,
    HealthSignal,
    LimitSense,
    Mode,
    PartitionSettings,
    SoakSettings,
    ThrottleSettings,
    TransactionSettings,
    ValidatorKind,
    ValidatorSettings,
)
from migronaut_core.background.spec.validation import check_slice_ms, read_stored, resolve_spec

__all__ = [
    "HEALTH_SENSE",
    "HEALTH_SIGNALS",
    "MAX_CHECKPOINT_BYTES",
    "REWRITING_MODES",
    "UPDATE_STAGES",
    "AdaptiveSettings",
    "BackgroundFunctions",
    "BackgroundSpec",
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
    "check_slice_ms",
    "exclude_bad_ids",
    "match_hash",
    "match_of",
    "only_ids",
    "read_stored",
    "resolve_spec",
]
