#!/usr/bin/env bash
# The whole test suite on a fresh machine: first the fast gate without services
# (scripts/check.sh: formatting, layout, alert rules, clippy, unit tests), then installs and
# starts the real services (scripts/services.sh), builds once, runs the integration tests
# against them. .ci/run calls exactly this.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

started=$(date +%s)
bash scripts/check.sh
if [[ ${CI:-} == true ]]; then
  # CI leaves nothing running, whether the suite passes or fails.
  trap 'bash scripts/services.sh stop' EXIT
fi
bash scripts/services.sh start
# The second Pulsar cluster of the geo-replication tests (tests/integration/geo).
bash scripts/services.sh start-geo
# shellcheck disable=SC1091
source .services/env

export PROTOC=${PROTOC:-$(command -v protoc)}
# A failing test's own message, not a backtrace per failure: CI shows only the output's tail.
export RUST_BACKTRACE=${FC_TEST_BACKTRACE:-0}

# What was down or full when the suite failed: dozens of tests timing out usually share one
# cause (e.g. the broker's disk past 99 %), which this names.
services_report() {
  echo "test.sh: services after the failure:" >&2
  bash scripts/services.sh status >&2 || true
  grep -h "out of space\|NotEnoughBookies\|OutOfMemory" .services/logs/pulsar.log 2>/dev/null |
    tail -n 3 | cut -c1-300 >&2 || true
}

# --workspace: bench/programs (the benchmark programs) is a member outside the default ones;
# building it here keeps it compiling. The test run below selects the same targets, so
# nothing is built twice.
cargo build --workspace --all-targets --locked
# The build is the suite's largest write: check the broker can still take writes after it.
if ! bash scripts/services.sh status >/dev/null; then
  echo "test.sh: a service is down or the disk is full after the build; not running the tests" >&2
  bash scripts/services.sh status >&2 || true
  exit 1
fi
cargo test --workspace --all-targets --locked -- --test-threads "${FC_TEST_THREADS:-4}" ||
  { rc=$?; services_report; exit "$rc"; }
# The chaos suite's short version (the full one is `bash scripts/chaos.sh`): SIGKILLs and
# frozen Redis, S3 and broker while 20,000 events flow; nothing lost, duplicated or stale.
PEERS_PY=$(bash bench/peers/setup_venv.sh | tail -1)
FC_CHAOS_BIN=target/debug/feature-connector "$PEERS_PY" scripts/chaos.py --events 20000 \
  --entities 2000 --rate 4000 --kills 3 --redis-freeze 3 --s3-freeze 5 --bad 5
echo "test.sh: suite finished in $(($(date +%s) - started)) s"
