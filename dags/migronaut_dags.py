"""migronaut's DAGs, ready to drop into an Airflow dags folder.

Builds, for the default target and every target ``[migronaut] targets`` lists,
without touching MongoDB (a named target's DAG ids carry its name:
``migronaut_<target>__up``, …):

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

Every DAG is created unpaused: migration DAGs run only when something starts them.

Configure in Airflow's configuration (docs/configuration.md lists every key), e.g.
``AIRFLOW__MIGRONAUT__CONN_ID`` (a ``mongo`` connection whose schema is the
database; default ``migronaut_default``), ``AIRFLOW__MIGRONAUT__MIGRATIONS_DIR``
(default: ``migrations/`` beside this file), ``AIRFLOW__MIGRONAUT__LANE_POOL``,
``AIRFLOW__MIGRONAUT__STALL_SECONDS``, ``AIRFLOW__MIGRONAUT__DRIFT_SCHEDULE``; the
``MIGRONAUT_*`` variables of earlier versions still set the default target. For
DAG arguments (owner, callbacks, tags, queues, pools), copy this file and pass
them to ``build_all_dags`` (or ``build_dags(target=…)``, one file per target, so
one target's broken settings never hide another's DAGs).
"""

from __future__ import annotations

from pathlib import Path

from migronaut_airflow.dags.factory import build_all_dags

globals().update(build_all_dags(base_folder=Path(__file__).parent))
