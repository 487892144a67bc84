#!/usr/bin/env bash
# The serving benchmark (see bench/serving.py): starts the services, builds the release
# binary, the load generator and examples/serving_load, prepares Feast's venv
# (scripts/feast_env.sh), then writes 100,000 entities through the connector and reads them
# back through our /get-online-features and /v1/features, `feast serve` and Redis directly;
# prints the tables (also written to bench/results/serving-latest.md).
#
#   bash bench/serving.sh                                  # full run (about 4 minutes once built)
#   bash bench/serving.sh --duration 3s --rounds 1         # smoke
set -Eeuo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
bash scripts/services.sh start >&2
# shellcheck disable=SC1091
source .services/env
cargo build --release --quiet --bin feature-connector --bin feature-connector-loadgen --example serving_load
PY=$(bash scripts/feast_env.sh | tail -1)
exec "$PY" bench/serving.py --python "$PY" "$@"
