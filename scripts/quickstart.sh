#!/usr/bin/env bash
# Quickstart on a fresh machine: build while the broker and Redis start (only what the
# quickstart uses), publish demo events, run the user_profile pipeline on the embedded defaults
# (Redis on 127.0.0.1, the offline Delta table under ./data/offline), then show what landed.
# `--follow` keeps the connector running.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

started=$(date +%s)
step() { echo "[quickstart $(($(date +%s) - started)) s] $*"; }

# Debian packages first: the build needs protoc, and apt installs one set at a time.
bash scripts/services.sh packages
export PROTOC=${PROTOC:-$(command -v protoc)}
# The broker's jars download and the services start while the connector builds.
mkdir -p data
bash scripts/services.sh start-quick >data/services.log 2>&1 &
services=$!
step "building the release profile; the broker and Redis start meanwhile (log: data/services.log)"
if ! cargo build --release --locked; then
  kill "$services" 2>/dev/null || true
  exit 1
fi
step "built"
if ! wait "$services"; then
  tail -n 30 data/services.log >&2
  echo "quickstart: the services did not start (data/services.log)" >&2
  exit 1
fi
step "broker and Redis up"
BIN=$ROOT/target/release/feature-connector
TOPIC=persistent://public/default/user-profile-features
ADMIN=http://127.0.0.1:8080/admin/v2/persistent/public/default/user-profile-features/stats

"$BIN" validate
"$BIN" produce --pipeline user_profile --count 10000 --entities 1000

mkdir -p data
"$BIN" run >data/connector.log 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true' EXIT
# The pipeline's one subscription (`delivery: shared`, the default) feeds Redis and the table;
# it is acknowledged after each table commit. So wait until the connector holds everything
# the broker has left for it (backlog = messages in flight); the stop below commits them.
SUBSCRIPTION=feature-connector
echo "connector running (pid $pid, log data/connector.log); waiting until it has received the backlog of $SUBSCRIPTION"
for _ in $(seq 1 120); do
  backlog=$(curl -s "$ADMIN" | python3 -c 'import json,sys; s=json.load(sys.stdin)["subscriptions"]; print(s.get(sys.argv[1],{}).get("msgBacklog","?"))' "$SUBSCRIPTION" 2>/dev/null || echo "?")
  in_flight=$(curl -s http://127.0.0.1:9464/metrics | awk '/^feature_connector_messages_in_flight\{.*pipeline="user_profile"/ {s += $2} END {print s + 0}')
  [[ $backlog != "?" && $backlog -le $in_flight ]] && break
  sleep 1
done
sleep 1
echo "backlog of $SUBSCRIPTION on $TOPIC: $backlog, all of it received (in flight: $in_flight)"
step "first features in Redis"

if [[ ${1:-} == --follow ]]; then
  echo "following; Ctrl-C stops the connector (it commits its last rollover and acks first)"
  trap - EXIT
  wait "$pid"
  exit $?
fi

# SIGTERM commits the open rollover to the offline table and acknowledges it.
kill -TERM "$pid"
wait "$pid" || true
trap - EXIT

echo
echo "== redis-cli HGETALL fc:user_profile:user-42"
redis-cli -h 127.0.0.1 HGETALL fc:user_profile:user-42
echo
echo "== offline Delta table data/offline/user_profile: newest commits, then data files"
find data/offline/user_profile/_delta_log -maxdepth 1 -name '*.json' -printf '%f\n' | sort | tail -3
find data/offline/user_profile -name '*.parquet' -not -path '*/_delta_log/*' -printf '%p  %s bytes\n' | sort | tail -5
