# Sourced by the scripts in this folder: a project virtualenv with the given extras.
# Usage: ensure_venv "dev,airflow"
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${MIGRONAUT_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"

ensure_venv() {
  local extras="$1"
  if [ ! -x "$VENV/bin/python" ]; then
    echo "==> creating $VENV"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
  fi
  echo "==> installing migronaut[$extras] (editable)"
  "$VENV/bin/python" -m pip install --quiet -e "$ROOT[$extras]"
}
