#!/usr/bin/env bash
# Set everything up and run the whole test suite: lint, types, import contracts, then
# unit, integration, Airflow (standalone and the Celery cluster), chaos and packaging tests,
# and, after them, the Airflow tests that need no standalone on the oldest Airflow the
# provider declares (scripts/compat.sh). Extra arguments go to pytest (e.g.
# `bash scripts/test.sh -k lock`) and skip the compatibility run.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
ensure_venv
cd "$ROOT"

# The browser test (tests/airflow/e2e/test_ui_browser.py) drives Debian's headless Chromium.
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  apt_install "the browser test needs chromium and chromium-driver" chromium chromium-driver \
    || echo "==> without them the browser test will fail" >&2
fi

# The cluster tests (tests/airflow_cluster) run Airflow on PostgreSQL and Redis.
ensure_cluster_services

echo "==> ruff"
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
echo "==> mypy"
"$VENV/bin/mypy"
echo "==> import contracts (lint-imports)"
"$VENV/bin/lint-imports"
# Worker processes (pytest-xdist): most of the suite waits on mongod, Airflow and
# subprocesses, so three workers keep two cores busy. Each test module runs whole on one
# worker; the Airflow standalone tests share one worker, the Celery-cluster tests another,
# and both go first (tests/conftest.py). MIGRONAUT_TEST_WORKERS=0 runs in this process.
workers="${MIGRONAUT_TEST_WORKERS:-3}"
echo "==> pytest ($workers workers)"
suite=0
"$VENV/bin/pytest" -n "$workers" --no-loadscope-reorder "$@" || suite=$?
# The compatibility run follows the suite: beside three busy workers, Airflow 3.2's
# in-process task runs (dag.test) starve past their time limits.
if [ "$#" -eq 0 ]; then
  echo "==> the Airflow tests on the oldest Airflow the provider declares (scripts/compat.sh)"
  compat=0
  bash "$ROOT/scripts/compat.sh" || compat=$?
  if [ "$suite" -eq 0 ] && [ "$compat" -ne 0 ]; then suite=$compat; fi
fi
exit "$suite"
