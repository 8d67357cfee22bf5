"""The kit: one object that owns a connection and runs every migronaut operation.

The CLI, the Airflow provider and user code all go through :class:`Migronaut`.
It connects lazily (creating one is free, e.g. while Airflow parses a DAG file)
and owns the client it creates; a client passed in is borrowed and left open.

The kit is the one facade, composed like pymongo's client of small namespaces
that share its connection and wiring (:class:`~migronaut_core.kit.base.KitBase`)
and return typed results (their ``to_dict()`` is the JSON shape):

- ``kit.runs`` (:mod:`~migronaut_core.kit.runs`): the runner's operations,
  plans, baseline, converge and the audit;
- ``kit.background`` (:mod:`~migronaut_core.kit.background`): the background
  migrations' operations, with the one control entry point;
- ``kit.drift`` (:mod:`~migronaut_core.kit.drift`): drift, polled and watched.

The work itself happens in the modules they call. The old flat names
(``kit.up()``, ``kit.background_status(…)``, …) are deprecated aliases
(:mod:`~migronaut_core.kit.aliases`) until 0.3.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from migronaut_core.kit import aliases
from migronaut_core.kit.aliases import deprecated, deprecated_property
from migronaut_core.kit.background import Background
from migronaut_core.kit.base import KitBase
from migronaut_core.kit.drift import Drift
from migronaut_core.kit.runs import Runs

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider
    from pymongo import MongoClient

    from migronaut_core.background.telemetry import MetricsSink
    from migronaut_core.config import Config

__all__ = ["Background", "Drift", "Migronaut", "Runs"]


class Migronaut(KitBase):
    """Runs migrations against one MongoDB database.

    ``kit.runs``, ``kit.background`` and ``kit.drift`` hold the operations;
    the kit itself holds the config, the connection (``client``, ``db``,
    :meth:`connect`, :meth:`close`; a context manager) and the engine's
    ``events``.

    :param config: settings; by default read from files and environment
        (:func:`~migronaut_core.config.load_config`) with ``overrides`` on top.
    :param client: an existing client to borrow instead of connecting.
    :param tracer_provider: where background spans go (OpenTelemetry's global by default).
    :param meter_provider: where background metrics go (OpenTelemetry's global by default).
    :param metrics_sink: also send background metrics there, StatsD-style (Airflow's
        provider passes one backed by Airflow's ``Stats``); see
        :class:`~migronaut_core.MetricsSink`.
    :param overrides: config keys, e.g. ``uri=…, database=…``.
    """

    def __init__(
        self,
        config: Config | None = None,
        *,
        client: MongoClient[dict[str, Any]] | None = None,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        metrics_sink: MetricsSink | None = None,
        **overrides: Any,
    ) -> None:
        super().__init__(
            config,
            client=client,
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
            metrics_sink=metrics_sink,
            **overrides,
        )
        #: Migrations, plans, baseline, converge, the audit.
        self.runs = Runs(self)
        #: Background migrations: drive, read, control, dry run, their audit, events.
        self.background = Background(self)
        #: Drift: verify (poll), watch (change streams), the watchers' status.
        self.drift = Drift(self)

    # -- deprecated flat names (until 0.3; see migronaut_core.kit.aliases) -----------------

    runner = deprecated_property("runner")
    runtime = deprecated_property("runtime")

    up = deprecated("up")
    down = deprecated("down")
    status = deprecated("status")
    plan_up = deprecated("plan_up")
    plan_down = deprecated("plan_down")
    baseline = deprecated("baseline")
    create = deprecated("create")
    inspect_lock = deprecated("inspect_lock")
    converge = deprecated("converge")
    converge_log = deprecated("converge_log", convert=aliases.to_dicts)
    audit = deprecated("audit")

    on = deprecated("on")
    coordinate_background = deprecated("coordinate_background")
    run_background_slice = deprecated("run_background_slice")
    run_background = deprecated("run_background", call=aliases.run_background)
    runnable_background = deprecated("runnable_background", convert=aliases.to_dicts)
    stalled_background = deprecated("stalled_background")
    background_status = deprecated("background_status", call=aliases.background_status)
    background_status_view = deprecated("background_status_view")
    background_status_views = deprecated("background_status_views")
    background_names = deprecated("background_names")
    background_partitions = deprecated("background_partitions", convert=aliases.to_dicts)
    background_history = deprecated("background_history", convert=aliases.to_dicts)
    control_background = deprecated("control_background", call=aliases.control_background)
    pause_background = deprecated("pause_background", call=aliases.control_as("pause"))
    resume_background = deprecated("resume_background", call=aliases.control_as("resume"))
    cancel_background = deprecated("cancel_background", call=aliases.control_as("cancel"))
    retry_background = deprecated("retry_background", call=aliases.retry_background)
    repin_background = deprecated("repin_background", call=aliases.control_as("repin"))
    unlock_background = deprecated(
        "unlock_background", call=aliases.control_as("unlock"), convert=aliases.unlock_result
    )
    dry_run_background = deprecated("dry_run_background")
    audit_background = deprecated("audit_background")

    verify_background = deprecated("verify_background", convert=aliases.to_dict)
    watch_background = deprecated("watch_background")
    background_watch_status = deprecated("background_watch_status", convert=aliases.one_or_all)
