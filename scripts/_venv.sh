# Sourced by the scripts in this folder: the project virtualenv, set up and up to date.
# Usage: ensure_venv
#
# .venv/ at the repository root gets uv (from pip), then, through uv and from the
# index pip is configured with: both distributions editable (distributions/core with
# its `rich` extra, distributions/airflow) and the development project (the top-level
# pyproject.toml: migronaut_dev and the test tools).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${MIGRONAUT_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"

# uv reads its own settings; hand it pip's index when pip has one configured, so both
# install from the same registry (exported: the wheel test runs uv too).
pip_index_url() {
  if [ -n "${PIP_INDEX_URL:-}" ]; then
    echo "$PIP_INDEX_URL"
    return
  fi
  "$VENV/bin/python" -m pip config get global.index-url 2>/dev/null \
    || "$VENV/bin/python" -m pip config get install.index-url 2>/dev/null \
    || true
}

ensure_venv() {
  if [ ! -x "$VENV/bin/python" ]; then
    echo "==> creating $VENV"
    "$PYTHON" -m venv "$VENV"
  fi
  if [ ! -x "$VENV/bin/uv" ]; then
    echo "==> installing uv (pip)"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check uv
  fi
  if [ -z "${UV_INDEX_URL:-}" ]; then
    UV_INDEX_URL="$(pip_index_url)"
    if [ -n "$UV_INDEX_URL" ]; then export UV_INDEX_URL; else unset UV_INDEX_URL; fi
  fi
  echo "==> installing migronaut-core, migronaut-airflow and the dev tools (editable, uv)"
  "$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" \
    -e "$ROOT/distributions/core[rich]" \
    -e "$ROOT/distributions/airflow" \
    -e "$ROOT"
}
