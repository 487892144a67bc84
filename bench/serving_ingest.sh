#!/usr/bin/env bash
# Reads while the connector ingests (see bench/serving_ingest.py): the tail of 1-entity reads
# at 1,000/s while the connector drains a backlog of 1,000,000 events. Builds the release
# binary, the load generator and examples/serving_load first.
#
#   bash bench/serving_ingest.sh                                   # this build, 2 rounds
#   bash bench/serving_ingest.sh --threads 1,2 B B                 # serving.threads 1 against 2
#   bash bench/serving_ingest.sh /tmp/old/feature-connector B      # another build against this
# (B: target/release/feature-connector)
set -Eeuo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
bash scripts/services.sh start >&2
# shellcheck disable=SC1091
source .services/env
cargo build --release --quiet --bin feature-connector --bin feature-connector-loadgen --example serving_load
exec python3 bench/serving_ingest.py "$@"
