#!/usr/bin/env bash
# Set everything up and run the demo: apply the sample migrations in
# examples/demo against MIGRONAUT_MONGODB_URI, or against a local mongod
# started for the demo (and stopped afterwards) when no URI is configured.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
ensure_venv "devserver"
cd "$ROOT/examples/demo"

started_here=""
if [ -z "${MIGRONAUT_MONGODB_URI:-}" ]; then
  echo "==> no MIGRONAUT_MONGODB_URI: starting a local mongod"
  "$VENV/bin/python" -m migronaut_core.devserver start --state-dir "$ROOT/.migronaut" >/dev/null
  MIGRONAUT_MONGODB_URI="$("$VENV/bin/python" -m migronaut_core.devserver uri --state-dir "$ROOT/.migronaut")"
  export MIGRONAUT_MONGODB_URI
  started_here=1
fi
cleanup() {
  if [ -n "$started_here" ] && [ -z "${MIGRONAUT_DEMO_KEEP_SERVER:-}" ]; then
    "$VENV/bin/python" -m migronaut_core.devserver stop --state-dir "$ROOT/.migronaut" >/dev/null
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
