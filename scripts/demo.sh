#!/usr/bin/env bash
# Set everything up and run the demo through Airflow: apply the sample migrations
# of examples/demo — 20,000 seeded users, two regular migrations, then a background
# migration that splits names on parallel lanes — with `airflow standalone` on
# loopback (its own AIRFLOW_HOME in .migronaut/airflow, wiped each run), against
# MIGRONAUT_MONGODB_URI, or against a local mongod started for the demo (and
# stopped afterwards) when no URI is configured. The demo database
# (MIGRONAUT_DATABASE, default migronaut_demo) is reset at each run.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
ensure_venv
cd "$ROOT/examples/demo"

started_here=""
mongod() { "$VENV/bin/python" -m migronaut_dev.mongod "$@" --state-dir "$ROOT/.migronaut"; }
cleanup() {
  if [ -n "$started_here" ] && [ -z "${MIGRONAUT_DEMO_KEEP_SERVER:-}" ]; then
    echo "==> stopping the local mongod"
    mongod stop >/dev/null 2>&1 || echo "demo: could not stop the local mongod" >&2
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -z "${MIGRONAUT_MONGODB_URI:-}" ]; then
  if ! mongod uri >/dev/null 2>&1; then
    echo "==> no MIGRONAUT_MONGODB_URI: starting a local mongod"
    started_here=1
    mongod start >/dev/null
  fi
  MIGRONAUT_MONGODB_URI="$(mongod uri)"
  export MIGRONAUT_MONGODB_URI
fi
export MIGRONAUT_DATABASE="${MIGRONAUT_DATABASE:-migronaut_demo}"
export MIGRONAUT_DEMO_AIRFLOW_HOME="${MIGRONAUT_DEMO_AIRFLOW_HOME:-$ROOT/.migronaut/airflow}"

"$VENV/bin/python" -m migronaut_dev.demo "$@"
