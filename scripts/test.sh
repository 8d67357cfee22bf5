#!/usr/bin/env bash
# Set everything up and run the whole test suite: lint, types, unit, integration, chaos.
# Extra arguments go to pytest (e.g. `bash scripts/test.sh -k lock`).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
ensure_venv "dev,airflow"
cd "$ROOT"

echo "==> ruff"
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
echo "==> mypy migronaut_core"
"$VENV/bin/mypy"
echo "==> pytest"
"$VENV/bin/pytest" "$@"
