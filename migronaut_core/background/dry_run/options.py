"""How a dry run is asked for: its limits, and the checks of its options.

The checks run before anything is read, so a bad option costs no round trip.
"""

from __future__ import annotations

from typing import Any, Final

from migronaut_core.background.dry_run.report import Method
from migronaut_core.background.spec import BackgroundSpec
from migronaut_core.checks import check_int
from migronaut_core.errors import ConfigInvalidError

__all__ = [
    "DEFAULT_SAMPLE",
    "MAX_DOCUMENTS",
    "MAX_DRY_STEPS",
    "check_mode",
    "check_options",
    "check_steps",
]

#: Documents a dry run looks at when neither ``sample`` nor ``first`` is given.
DEFAULT_SAMPLE: Final = 20
#: The most documents one dry run looks at.
MAX_DOCUMENTS: Final = 10_000
#: The most steps one dry run of a step migration runs.
MAX_DRY_STEPS: Final = 100


def _count_option(value: Any, key: str) -> int:
    return check_int(key, value, 1, MAX_DOCUMENTS, label=f"dry run: {key}")


def check_options(*, sample: int | None, first: int | None) -> tuple[Method, int]:
    """Validate how a dry run picks documents; return the method and how many.

    :raises ConfigInvalidError: ``sample`` and ``first`` together, or a size out
        of 1..:data:`MAX_DOCUMENTS`.
    """
    if sample is not None and first is not None:
        raise ConfigInvalidError(
            "dry run: give sample or first, not both", {"key": "sample", "conflicts": "first"}
        )
    if first is not None:
        return "first", _count_option(first, "first")
    if sample is not None:
        return "sample", _count_option(sample, "sample")
    return "sample", DEFAULT_SAMPLE


def check_steps(steps: int | None) -> int:
    """How many steps a step dry run runs (default 1).

    :raises ConfigInvalidError: ``steps`` outside 1..:data:`MAX_DRY_STEPS`.
    """
    count = _count_option(1 if steps is None else steps, "steps")
    if count > MAX_DRY_STEPS:
        raise ConfigInvalidError(f"steps must be at most {MAX_DRY_STEPS}", {"key": "steps"})
    return count


def check_mode(name: str, spec: BackgroundSpec, *, steps: int | None, from_start: bool) -> None:
    """Refuse step options for a declarative migration."""
    if spec.mode == "step":
        return
    if steps is not None or from_start:
        key = "steps" if steps is not None else "from_start"
        raise ConfigInvalidError(
            f"dry run of {name}: {name} is declarative; dry-run it on a sample (sample, first), "
            f"not by steps (`{key}`)",
            {"migration": name, "key": key},
        )
