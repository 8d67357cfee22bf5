"""migronaut's DAGs, ready to drop into an Airflow dags folder.

Builds, without touching MongoDB:

- ``migronaut_bg__<name>`` for every background migration file (a run is one
  coordinator round: coordinate → mapped lanes + a deferrable sensor → continue);
- ``migronaut_drift`` (every 10 minutes): verify completed migrations, then start
  the DAGs of migrations that have work and no active run;
- ``migronaut_drift_events``: scheduled on each migrated collection's asset, whose
  change-stream trigger fires when old-shape documents are written after the
  migration completed: reopen (or report), then start the migration's DAG;
- ``migronaut_stalls``: scheduled on migronaut's state-collection asset, whose
  trigger fires as soon as a running migration stood still for the stall time
  (15 minutes by default): take its stuck run over with a new round;
- ``migronaut_control``: a trigger form to pause, resume, cancel, retry, repin, unlock;
- ``migronaut_up``: apply regular migrations, register background ones, start them.

Configure with environment variables (or copy this file and call ``build_dags``
with arguments):

- ``MIGRONAUT_MIGRATIONS_DIR``: the migration files (default: ``migrations/``
  beside this file);
- ``MIGRONAUT_CONN_ID``: a ``mongo`` connection whose schema is the database
  (default ``migronaut_default``);
- ``MIGRONAUT_DRIFT_SCHEDULE``: a cron expression or preset for the drift DAG;
- ``MIGRONAUT_LANE_POOL``: the Airflow pool every lane task runs in (default
  ``default_pool``);
- ``MIGRONAUT_STALL_SECONDS``: how long a running migration may stand still before
  its run is taken over (default 900).
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from migronaut_airflow.dags.factory import build_dags

_migrations = os.environ.get("MIGRONAUT_MIGRATIONS_DIR") or str(
    Path(__file__).with_name("migrations")
)

globals().update(
    build_dags(
        _migrations,
        mongo_conn_id=os.environ.get("MIGRONAUT_CONN_ID", "migronaut_default"),
        drift_schedule=os.environ.get("MIGRONAUT_DRIFT_SCHEDULE") or timedelta(minutes=10),
    )
)
