#!/usr/bin/env bash
# Set everything up and run the whole test suite: lint, types, import contracts, then
# unit, integration, Airflow, chaos and packaging tests.
# Extra arguments go to pytest (e.g. `bash scripts/test.sh -k lock`).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
ensure_venv
cd "$ROOT"

# The browser test (tests/airflow/test_ui_browser.py) drives Debian's headless Chromium.
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "==> installing chromium and chromium-driver (apt-get)"
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends chromium chromium-driver >/dev/null; }; then
      echo "==> installing chromium failed: the browser test will fail" >&2
    fi
  else
    echo "==> chromium and chromium-driver are missing and cannot be installed here" \
      "(needs root and apt-get): the browser test will fail;" \
      "install them: apt-get install chromium chromium-driver" >&2
  fi
fi

echo "==> ruff"
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
echo "==> mypy"
"$VENV/bin/mypy"
echo "==> import contracts (lint-imports)"
"$VENV/bin/lint-imports"
echo "==> pytest"
"$VENV/bin/pytest" "$@"
