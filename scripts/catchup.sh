#!/usr/bin/env bash
# Catch-up measurement (not the full benchmark): publish N sample events to a fresh topic,
# then start the release connector and time until the online and offline subscriptions are
# drained (acknowledged only after Redis answered / the Parquet file was committed).
# Usage: scripts/catchup.sh [events=200000] [entities=100000]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
events=${1:-200000}
entities=${2:-100000}
bash "$ROOT/scripts/services.sh" start >/dev/null
export PROTOC=${PROTOC:-$(command -v protoc)}
(cd "$ROOT" && cargo build --release --locked --quiet)
BIN=$ROOT/target/release/feature-connector

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
topic=catchup-$(date +%s)-$$
mkdir -p "$work/connectors" "$work/schemas"
cp "$ROOT/schemas/user_profile.avsc" "$work/schemas/"
sed -e "s#user-profile-features#$topic#" -e "s#rollover_interval: 30s#rollover_interval: 5s#" \
  "$ROOT/connectors/user_profile.yaml" >"$work/connectors/user_profile.yaml"
"$BIN" produce --root "$work" --pipeline user_profile --count "$events" --entities "$entities" 2>/dev/null

stats=http://127.0.0.1:8080/admin/v2/persistent/public/default/$topic/stats
backlogs() {
  curl -s "$stats" | python3 -c 'import json,sys
s=json.load(sys.stdin).get("subscriptions",{})
print(s.get("feature-connector-online",{}).get("msgBacklog",-1), s.get("feature-connector-offline",{}).get("msgBacklog",-1))'
}
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
start=$(date +%s.%N)
REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379} FC_HTTP_BIND=127.0.0.1:$port OFFLINE_URL=file://$work/offline \
  "$BIN" run --root "$work" >"$work/run.log" 2>&1 &
pid=$!
online=""
while kill -0 "$pid" 2>/dev/null; do
  read -r on off < <(backlogs)
  now=$(date +%s.%N)
  [[ -z $online && $on == 0 ]] && online=$(echo "$now - $start" | bc)
  if [[ $on == 0 && $off == 0 ]]; then both=$(echo "$now - $start" | bc); break; fi
  sleep 0.1
done
[[ -n ${both:-} ]] || { cat "$work/run.log"; echo "connector died" >&2; exit 1; }
read -r rss cpu < <(ps -o rss=,times= -p "$pid")
online_write=$(curl -s "http://127.0.0.1:$port/metrics" | awk '/sink_write_seconds_sum.*online/ {print $2}')
kill -TERM "$pid"; wait "$pid" || true
files=$(find "$work/offline" -name '*.parquet' | wc -l)
bytes=$(find "$work/offline" -name '*.parquet' -printf '%s\n' | awk '{s+=$1} END {print s}')
printf 'events %d, entities %d, %d cores\n' "$events" "$entities" "$(nproc)"
printf 'online drained after %.2f s (%.0f events/s, Redis writes %.2f s of it)\n' "$online" "$(echo "$events / $online" | bc -l)" "$online_write"
printf 'both drained after   %.2f s (%.0f events/s)\n' "$both" "$(echo "$events / $both" | bc -l)"
printf 'connector RSS %.0f MB, CPU %d s; Parquet %d files, %d bytes\n' "$(echo "$rss / 1024" | bc -l)" "$cpu" "$files" "$bytes"
