#!/usr/bin/env bash
# Offline start-up and commit benchmark (see bench/offline_startup.py): starts the services,
# builds the dist binary (whole-program optimisation) and offline_history (bench/programs), and runs it.
#
#   bash bench/offline_startup.sh                                 # 100 and 10,000 rollovers
#   bash bench/offline_startup.sh --rollovers 100,1000 --starts 3 # quicker
set -Eeuo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
bash scripts/services.sh start >&2
# shellcheck disable=SC1091
source .services/env
cargo build --profile dist --quiet --workspace --features feature-connector/jemalloc --bin feature-connector --bin offline_history
exec python3 bench/offline_startup.py "$@"
