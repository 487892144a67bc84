#!/usr/bin/env bash
# The chaos suite (scripts/chaos.py): events flow while the connector is SIGKILLed and
# restarted, Redis and S3 are frozen and the broker restarts; then nothing may be lost, duplicated
# or stale. Prints the figures as JSON and exits 1 on any loss.
#
#   bash scripts/chaos.sh                 # 1,000,000 events, 20 kills, Redis 30 s / S3 60 s frozen, a broker restart
#   bash scripts/chaos.sh --events 100000 --kills 5 --redis-freeze 5 --s3-freeze 8
set -Eeuo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
bash scripts/services.sh start >&2
# shellcheck disable=SC1091
source .services/env
cargo build --release --quiet --bin feature-connector --bin feature-connector-loadgen
PY=$(bash bench/peers/setup_venv.sh | tail -1)
exec "$PY" scripts/chaos.py "$@"
