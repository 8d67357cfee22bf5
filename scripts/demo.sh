#!/usr/bin/env bash
# Set everything up and run the demo: apply the sample migrations in
# examples/demo against MIGRONAUT_MONGODB_URI, or against a local mongod
# started for the demo (and stopped afterwards) when no URI is configured.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
ensure_venv "devserver"
cd "$ROOT/examples/demo"

started_here=""
devserver() { "$VENV/bin/python" -m migronaut_core.devserver "$@" --state-dir "$ROOT/.migronaut"; }
if [ -z "${MIGRONAUT_MONGODB_URI:-}" ]; then
  if ! devserver uri >/dev/null 2>&1; then
    echo "==> no MIGRONAUT_MONGODB_URI: starting a local mongod"
    devserver start >/dev/null
    started_here=1
  fi
  MIGRONAUT_MONGODB_URI="$(devserver uri)"
  export MIGRONAUT_MONGODB_URI
fi
cleanup() {
  if [ -n "$started_here" ] && [ -z "${MIGRONAUT_DEMO_KEEP_SERVER:-}" ]; then
    devserver stop >/dev/null
  fi
}
trap cleanup EXIT

export MIGRONAUT_DATABASE="${MIGRONAUT_DATABASE:-migronaut_demo}"
M="$VENV/bin/migronaut"
echo "==> migronaut status (database $MIGRONAUT_DATABASE)"
"$M" status
echo "==> migronaut up"
"$M" up --reason "demo"
echo "==> migronaut status --json"
"$M" status --json
echo "==> what the migrations did"
"$VENV/bin/python" - <<'PY'
import os
from pymongo import MongoClient

with MongoClient(os.environ["MIGRONAUT_MONGODB_URI"]) as client:
    db = client[os.environ["MIGRONAUT_DATABASE"]]
    print("users:", db.users.count_documents({}), "documents")
    print("indexes:", sorted(db.users.index_information()))
    print("sample:", db.users.find_one({}, {"_id": 0}))
PY
echo "==> demo done"
