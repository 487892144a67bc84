#!/usr/bin/env bash
# Training-set benchmark (bench/training.py): `offline training-set` against pandas on the
# same table and entity file. Writes the report to stdout and bench/results/training-latest.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/services.sh start >/dev/null
# shellcheck disable=SC1091
source .services/env
cargo build --profile dist --quiet --workspace --features feature-connector/jemalloc --bin feature-connector \
  --bin feature-connector-loadgen
PY=$(bash bench/peers/setup_venv.sh | tail -1)
DELTA_PY=$(bash scripts/delta_env.sh | tail -1)
"$PY" bench/training.py --python "$DELTA_PY" "$@" | tee bench/results/training-latest.md
