#!/usr/bin/env bash
# Windowed aggregations benchmark (bench/aggregations.py): ingest with and without them,
# Redis memory per entity, reads of aggregated features; then the aggregations sink's
# freshness against the online sink's (bench/aggregations_freshness.py). Writes the reports
# to stdout and to bench/results/aggregations-latest.md and aggregations-freshness-latest.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/services.sh start >/dev/null
# shellcheck disable=SC1091
source .services/env
cargo build --profile dist --quiet --workspace --features feature-connector/jemalloc --bin feature-connector \
  --bin feature-connector-loadgen --bin serving_load --bin tile_memory
PY=$(bash bench/peers/setup_venv.sh | tail -1)
"$PY" bench/aggregations.py "$@" | tee bench/results/aggregations-latest.md
"$PY" bench/aggregations_freshness.py | tee bench/results/aggregations-freshness-latest.md
