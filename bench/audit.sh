#!/usr/bin/env bash
# The audit's benchmark (see bench/audit.py): services, the dist build, then the run.
#
#   bash bench/audit.sh                                   # 1M events over 100k entities
#   bash bench/audit.sh --events 100000 --entities 10000 --drain-events 200000 --rounds 1  # smoke
set -Eeuo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
bash scripts/services.sh start >&2
# shellcheck disable=SC1091
source .services/env
cargo build --profile dist --quiet --workspace --features feature-connector/jemalloc --bin feature-connector --bin feature-connector-loadgen
exec python3 bench/audit.py "$@"
