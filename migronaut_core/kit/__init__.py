"""The kit: one object that owns a connection and runs every migronaut operation.

The CLI, the Airflow provider and user code all go through :class:`Migronaut`.
It connects lazily (creating one is free, e.g. while Airflow parses a DAG file)
and owns the client it creates; a client passed in is borrowed and left open.

The kit is the one facade: it wires the runner and the background engine's
:class:`~migronaut_core.background.runtime.Runtime` and calls each operation
with them; the work itself happens in the modules it calls. Being the whole
public surface with its docstrings, it is split by what the operations work
on, each part a mixin over one shared base, so a reader finds an operation by
its subject and every part sees the same typed state:

- :mod:`~migronaut_core.kit.base`: config, connection, lifecycle, wiring;
- :mod:`~migronaut_core.kit.runs`: the runner's operations, converge, the audits;
- :mod:`~migronaut_core.kit.background`: the background migrations' operations;
- :mod:`~migronaut_core.kit.drift`: drift, polled and watched.
"""

from __future__ import annotations

from migronaut_core.kit.background import BackgroundOperations
from migronaut_core.kit.drift import DriftOperations
from migronaut_core.kit.runs import RunnerOperations

__all__ = ["Migronaut"]


class Migronaut(RunnerOperations, BackgroundOperations, DriftOperations):
    """Runs migrations against one MongoDB database.

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
