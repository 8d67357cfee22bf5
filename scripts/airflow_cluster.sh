#!/usr/bin/env bash
# Start the production-shaped Airflow of the tests for a human: PostgreSQL, Redis, the
# api-server, scheduler, dag-processor, triggerer and two Celery workers on loopback,
# serving dags/migronaut_dags.py, until Ctrl-C (which stops everything it started).
# Arguments go to `python -m migronaut_dev.airflow_cluster` (--root DIR, --workers N,
# --concurrency N); set MIGRONAUT_MIGRATIONS_DIR and AIRFLOW_CONN_MIGRONAUT_DEFAULT to
# point its DAGs at migrations and a MongoDB.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
ensure_venv
ensure_cluster_services
cd "$ROOT"
exec "$VENV/bin/python" -m migronaut_dev.airflow_cluster "$@"
