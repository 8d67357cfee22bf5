#!/usr/bin/env bash
# Set everything up and run the whole test suite: lint, types, import contracts, then
# unit, integration, Airflow (standalone and the Celery cluster), chaos and packaging tests,
# and, in the suite's tail, the Airflow tests that need no standalone on the oldest Airflow
# the provider declares (scripts/compat.sh). Extra arguments go to pytest (e.g.
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

# The compatibility run's environment is set up meanwhile (scripts/compat.sh --prepare);
# the run itself comes in the suite's tail, below.
if [ "$#" -eq 0 ]; then
  scratch="$(mktemp -d)"
  trap 'rm -rf "$scratch"' EXIT
  bash "$ROOT/scripts/compat.sh" --prepare >"$scratch/compat-prepare.log" 2>&1 &
  prepare_pid=$!
fi

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
if [ "$#" -ne 0 ]; then
  echo "==> pytest ($workers workers)"
  exec "$VENV/bin/pytest" -n "$workers" --no-loadscope-reorder "$@"
fi

# The compatibility run (scripts/compat.sh) starts in the suite's tail: once every work
# unit is handed out and at most one worker is still busy (the scheduler in
# tests/conftest.py creates the flag file then), usually on the long e2e chain that
# mostly waits on Airflow. Started beside three busy workers instead, Airflow 3.2's
# in-process task runs starve. Its output is kept apart and printed after the suite's.
echo "==> $(date -u +%T) pytest ($workers workers)"
MIGRONAUT_TEST_TAIL_FLAG="$scratch/tail" "$VENV/bin/pytest" -n "$workers" --no-loadscope-reorder &
suite_pid=$!
while kill -0 "$suite_pid" 2>/dev/null && [ ! -e "$scratch/tail" ]; do sleep 2; done
echo "==> $(date -u +%T) the suite's tail: the Airflow tests on the oldest Airflow the provider declares start (scripts/compat.sh)"
wait "$prepare_pid" || true  # a failed set-up fails again, with its output, just below
compat=0
bash "$ROOT/scripts/compat.sh" >"$scratch/compat.log" 2>&1 || compat=$?
suite=0
wait "$suite_pid" || suite=$?
echo "==> $(date -u +%T) both done; the compatibility run's output (scripts/compat.sh, exit $compat)"
cat "$scratch/compat.log"
if [ "$suite" -eq 0 ]; then suite=$compat; fi
exit "$suite"
