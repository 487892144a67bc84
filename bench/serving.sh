#!/usr/bin/env bash
# The serving benchmark (see bench/serving.py): starts the services, builds the dist
# binary, the load generator, serving_load and http_floor (bench/programs), prepares Feast's
# venv (scripts/feast_env.sh), then writes 100,000 entities through the connector and reads
# them back through our /get-online-features and /v1/features, `feast serve` and Redis
# directly; prints the tables (also written to bench/results/serving-latest.md).
#
#   bash bench/serving.sh                                  # full run (about 4 minutes once built)
#   bash bench/serving.sh --duration 3s --rounds 1         # smoke
#   bash bench/serving.sh --sizes 50 --log-rates 1,0.01    # cached reads unlogged against
#                                                          # feature logging at 100 % and 1 %
#
# `ingest` runs bench/serving_ingest.py instead: 1-entity reads at 1,000/s while the
# connector drains a backlog of 1,000,000 events (B: target/dist/feature-connector):
#
#   bash bench/serving.sh ingest                           # this build, 2 rounds
#   bash bench/serving.sh ingest --threads 1,2 B B         # serving.threads 1 against 2
#   bash bench/serving.sh ingest /tmp/old/feature-connector B   # another build against this
set -Eeuo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
bash scripts/services.sh start >&2
# shellcheck disable=SC1091
source .services/env
cargo build --profile dist --quiet --workspace --features feature-connector/jemalloc --bin feature-connector --bin feature-connector-loadgen \
  --bin serving_load --bin http_floor
if [[ "${1:-}" == ingest ]]; then
  shift
  exec python3 bench/serving_ingest.py "$@"
fi
PY=$(bash scripts/feast_env.sh | tail -1)
exec "$PY" bench/serving.py --python "$PY" "$@"
