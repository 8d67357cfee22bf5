"""Development tooling of this repository: never shipped in a wheel.

- :mod:`migronaut_dev.mongod` — real MongoDB servers for tests, benchmarks and the
  demo (``python -m migronaut_dev.mongod start|uri|stop``).
- :mod:`migronaut_dev.airflow_standalone` — ``airflow standalone`` on loopback,
  driven through its REST API (end-to-end tests and the demo).
- :mod:`migronaut_dev.airflow_cluster` — a production-shaped Airflow on loopback:
  Celery workers, PostgreSQL, Redis (``python -m migronaut_dev.airflow_cluster``);
  :mod:`migronaut_dev.services` starts the two servers, :mod:`migronaut_dev.airflow_api`
  is the REST driving both harnesses share.
- :mod:`migronaut_dev.demo` — the Airflow half of ``scripts/demo.sh``.
- :mod:`migronaut_dev.endpoints` — a free loopback port, and the Airflow ``mongo``
  connection of a MongoDB URI (the demo, the tests and the benchmarks share both).
- :mod:`migronaut_dev.errors` — :class:`~migronaut_dev.errors.ServerUnavailableError`,
  raised when no server can be found or started (never by the shipped packages).
- :mod:`migronaut_dev.lifecycle` — the ``with`` block every local server above
  shares: whatever the outcome, stopped on leaving it.

Tests, benchmarks and scripts import these modules by name; the development
install (the top-level ``pyproject.toml``) puts this package on the path. Unlike
``migronaut_core`` and ``migronaut_airflow``, it may know the repository's layout
(:data:`REPO_ROOT`).
"""

from __future__ import annotations

from pathlib import Path

#: The checkout this package lives in (``dags/``, ``examples/`` …).
REPO_ROOT = Path(__file__).resolve().parents[1]

__all__ = ["REPO_ROOT"]
