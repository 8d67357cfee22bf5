"""The kit's old flat names, kept for one minor version as thin deprecated aliases.

Before the namespaces (``kit.runs``, ``kit.background``, ``kit.drift``) the kit
was one flat class: ``kit.up()``, ``kit.background_status(name)``,
``kit.pause_background(name)``, …. Each old name still works until 0.3: it
emits a :class:`DeprecationWarning` naming its replacement and returns what it
returned before (the JSON dicts where it returned dicts, from the typed
result's ``to_dict()``). :data:`ALIASES` lists them, old name to new.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any, Final

from migronaut_core import files
from migronaut_core.background.control.actions import ControlAction

__all__ = ["ALIASES", "REMOVED_IN", "deprecated", "deprecated_property"]

#: The version that removes the old names.
REMOVED_IN: Final = "0.3"

#: Every old name of the kit and what replaces it.
ALIASES: Final[Mapping[str, str]] = {
    "up": "runs.up",
    "down": "runs.down",
    "status": "runs.status",
    "plan_up": "runs.plan_up",
    "plan_down": "runs.plan_down",
    "baseline": "runs.baseline",
    "create": "runs.create",
    "inspect_lock": "runs.inspect_lock",
    "converge": "runs.converge",
    "converge_log": "runs.converge_log",
    "audit": "runs.audit",
    "on": "background.on",
    "coordinate_background": "background.coordinate",
    "run_background_slice": "background.run_slice",
    "run_background": "background.run",
    "runnable_background": "background.runnable",
    "stalled_background": "background.stalled",
    "background_status": "background.status",
    "background_status_view": "background.status",
    "background_status_views": "background.statuses",
    "background_names": "background.names",
    "background_partitions": "background.partitions",
    "background_history": "background.history",
    "control_background": "background.control",
    "pause_background": "background.control",
    "resume_background": "background.control",
    "cancel_background": "background.control",
    "retry_background": "background.control",
    "repin_background": "background.control",
    "unlock_background": "background.control",
    "dry_run_background": "background.dry_run",
    "audit_background": "background.audit",
    "verify_background": "drift.verify",
    "watch_background": "drift.watch",
    "background_watch_status": "drift.watch_status",
    "runner": "_runner",
    "runtime": "_runtime",
}


def _warn(old: str) -> None:
    warnings.warn(
        f"Migronaut.{old} is deprecated and will be removed in {REMOVED_IN}; "
        f"use Migronaut.{ALIASES[old]}",
        DeprecationWarning,
        stacklevel=3,
    )


def _resolve(kit: Any, path: str) -> Any:
    target = kit
    for part in path.split("."):
        target = getattr(target, part)
    return target


def deprecated(
    old: str,
    *,
    call: Callable[..., Any] | None = None,
    convert: Callable[[Any], Any] | None = None,
) -> Any:
    """A kit method named ``old`` that warns and does what its replacement does.

    :param old: the old name (a key of :data:`ALIASES`, which names the new one).
    :param call: how to call the replacement, when the arguments differ
        (``call(kit, *args, **kwargs)``); by default they are passed on as they are.
    :param convert: turns the replacement's result into what the old name returned
        (typed results into their JSON dicts).
    """
    new = ALIASES[old]

    def alias(self: Any, *args: Any, **kwargs: Any) -> Any:
        _warn(old)
        result = call(self, *args, **kwargs) if call else _resolve(self, new)(*args, **kwargs)
        return result if convert is None else convert(result)

    alias.__name__ = alias.__qualname__ = old
    alias.__doc__ = f"Deprecated (removed in {REMOVED_IN}): use :meth:`{new}`."
    return alias


def deprecated_property(old: str) -> Any:
    """A kit property named ``old`` that warns and reads its replacement."""
    new = ALIASES[old]

    def read(self: Any) -> Any:
        _warn(old)
        return _resolve(self, new)

    read.__name__ = old
    read.__doc__ = f"Deprecated (removed in {REMOVED_IN}): internal; no public replacement."
    return property(read)


# -- conversions to the old results -------------------------------------------------------


def to_dicts(results: Any) -> list[dict[str, Any]]:
    """Typed results to their JSON dicts."""
    return [result.to_dict() for result in results]


def to_dict(result: Any) -> dict[str, Any] | None:
    """A typed result (or None) to its JSON dict (or None)."""
    return None if result is None else result.to_dict()


def one_or_all(result: Any) -> Any:
    """A list of typed results, or one (or None), to JSON."""
    return to_dicts(result) if isinstance(result, list) else to_dict(result)


def background_status(kit: Any, name: str | None = None) -> Any:
    """The old ``background_status``: JSON of one migration (None if unregistered), or all."""
    if name is None:
        return to_dicts(kit.background.statuses())
    files.validate_name(name)
    return to_dict(kit.background.status(name))


def run_background(kit: Any, name: str, **options: Any) -> dict[str, Any]:
    """The old ``run_background``: the JSON status view, or ``{name, status}`` when gone."""
    view = kit.background.run(name, **options)
    return {"name": name, "status": "unregistered"} if view is None else view.to_dict()


def control_background(
    kit: Any,
    name: str,
    action: ControlAction,
    *,
    reason: str | None = None,
    actor: str | None = None,
    wait: bool = False,
    repin: bool = False,
) -> Any:
    """The old ``control_background``: ``actor`` is now ``requested_by``."""
    return kit.background.control(
        name, action, requested_by=actor, reason=reason, wait=wait, repin=repin
    )


def control_as(action: ControlAction) -> Callable[..., Any]:
    """The old ``<action>_background`` wrapper: ``background.control(name, action, …)``."""

    def call(kit: Any, name: str, **options: Any) -> Any:
        return kit.background.control(name, action, **options)

    return call


def retry_background(
    kit: Any,
    name: str,
    *,
    requested_by: str | None = None,
    reason: str | None = None,
    from_start: bool = False,
    repin: bool = False,
) -> Any:
    """The old ``retry_background``: ``from_start`` is the action ``retry_from_start``."""
    action: ControlAction = "retry_from_start" if from_start else "retry"
    return kit.background.control(
        name, action, requested_by=requested_by, reason=reason, repin=repin
    )


def unlock_result(result: Any) -> dict[str, Any]:
    """The old ``unlock_background``'s dict: ``{lock, leases}``."""
    return {"lock": result.lock, "leases": result.leases}
