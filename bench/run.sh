#!/usr/bin/env bash
# The side-by-side benchmark (see bench/run.py): starts the services, builds the dist
# binaries (whole-program optimisation) and the probes in one cargo run, prepares the peers'
# Python venv and the Java client contender, runs every contender on the same events and
# prints the tables (also written to
# bench/results/latest.md).
#
#   bash bench/run.sh                      # full run (about 5 minutes on 2 cores once built)
#   bash bench/run.sh --events 20000 --feast-events 5000 --schedule 2000:5s,20000:3s   # smoke
set -Eeuo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
bash scripts/services.sh start >&2
# shellcheck disable=SC1091
source .services/env
# --workspace: the probes are binaries of bench/programs, a member outside the default ones.
cargo build --profile dist --quiet --workspace --features feature-connector/jemalloc --bin feature-connector --bin feature-connector-loadgen \
  --bin freshness_probe --bin raw_consume --bin tuned_consume --bin hset_baseline
PY=$(bash bench/peers/setup_venv.sh | tail -1)
JAVA_CP=$(bash bench/peers/java-consumer/build.sh | tail -1)
exec "$PY" bench/run.py --python "$PY" --java-classpath "$JAVA_CP" "$@"
