#!/usr/bin/env bash
# Set everything up and run the whole test suite: lint, types, import contracts, then
# unit, integration, Airflow (standalone and the Celery cluster), chaos and packaging tests,
# then the Airflow tests that need no standalone on the oldest Airflow the provider declares
# (scripts/compat.sh). Extra arguments go to pytest (e.g. `bash scripts/test.sh -k lock`)
# and skip that last run.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
ensure_venv
cd "$ROOT"

# The browser test (tests/airflow/test_ui_browser.py) drives Debian's headless Chromium.
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
echo "==> pytest"
"$VENV/bin/pytest" "$@"
if [ "$#" -eq 0 ]; then
  echo "==> the Airflow tests on the oldest Airflow the provider declares (scripts/compat.sh)"
  bash "$ROOT/scripts/compat.sh"
fi
