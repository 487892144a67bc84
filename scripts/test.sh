#!/usr/bin/env bash
# The whole test suite on a fresh machine. The services and their one-time installs (the
# broker's and proxy's jars, ORY Hydra built from Go, moto, the Python peers) start in the
# background while the fast gate (scripts/check.sh: formatting, layout, alert rules, clippy,
# the one test build, unit tests) runs; then the integration tests run against the real
# services from that same build, and the chaos suite's short version. .ci/run calls exactly
# this. The `[test.sh N s]` stamps give the breakdown.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

started=$(date +%s)
stamp() { echo "[test.sh $(($(date +%s) - started)) s] $*"; }
STATE=${FC_STATE_DIR:-$ROOT/.services}
mkdir -p "$STATE/logs"
SERVICES_LOG=$STATE/logs/test-services.log

# Debian packages first, in the foreground: apt installs one set at a time.
bash scripts/services.sh packages
if [[ ${CI:-} == true ]]; then
  # CI leaves nothing running, whether the suite passes or fails.
  trap 'bash scripts/services.sh stop >/dev/null 2>&1 || true' EXIT
fi
stamp "starting the services in the background (log: $SERVICES_LOG)"
# Its own process group, so that a failing gate can stop it whole. The script is in single
# quotes on purpose: the child shell expands it.
# shellcheck disable=SC2016
setsid bash -c 'set -e
  started=$(date +%s)
  bash scripts/services.sh start
  # The second Pulsar cluster of the geo-replication tests (tests/integration/geo).
  bash scripts/services.sh start-geo
  # The Python peers (Feast, deltalake, Polars, DuckDB, the Pulsar client) the tests and the
  # chaos suite run.
  bash bench/peers/setup_venv.sh >/dev/null
  echo "services: all up and installed in $(($(date +%s) - started)) s"' \
  </dev/null >"$SERVICES_LOG" 2>&1 &
services=$!

if ! bash scripts/check.sh; then
  kill -- -"$services" 2>/dev/null || true
  exit 1
fi
stamp "gate passed; waiting for the services"
if ! wait "$services"; then
  tail -n 40 "$SERVICES_LOG" >&2
  echo "test.sh: the services did not start ($SERVICES_LOG)" >&2
  exit 1
fi
stamp "$(tail -n 1 "$SERVICES_LOG")"
# shellcheck disable=SC1091
source "$STATE/env"

# The gate's compiler settings: the integration tests run from its build.
# shellcheck source=scripts/cargo_env.sh
source scripts/cargo_env.sh
# A failing test's own message, not a backtrace per failure: CI shows only the output's tail.
export RUST_BACKTRACE=${FC_TEST_BACKTRACE:-0}

# What was down or full when the suite failed: dozens of tests timing out usually share one
# cause (e.g. the broker's disk past 99 %), which this names.
services_report() {
  echo "test.sh: services after the failure:" >&2
  bash scripts/services.sh status >&2 || true
  grep -h "out of space\|NotEnoughBookies\|OutOfMemory" "$STATE/logs/pulsar.log" 2>/dev/null |
    tail -n 3 | cut -c1-300 >&2 || true
}

# The build is the suite's largest write: check the broker can still take writes after it.
if ! bash scripts/services.sh status >/dev/null; then
  echo "test.sh: a service is down or the disk is full after the build; not running the tests" >&2
  bash scripts/services.sh status >&2 || true
  exit 1
fi
# The integration tests, from the gate's build (same selection and features: nothing is
# compiled again; the unit tests already ran in the gate).
cargo test --workspace --test '*' --locked -- --test-threads "${FC_TEST_THREADS:-4}" ||
  { rc=$?; services_report; exit "$rc"; }
stamp "integration tests passed"
# The chaos suite's short version (the full one is `bash scripts/chaos.sh`): SIGKILLs and
# frozen Redis, S3 and broker while 20,000 events flow; nothing lost, duplicated or stale.
PEERS_PY=$(bash bench/peers/setup_venv.sh | tail -1)
FC_CHAOS_BIN=target/debug/feature-connector "$PEERS_PY" scripts/chaos.py --events 20000 \
  --entities 2000 --rate 4000 --kills 3 --redis-freeze 3 --s3-freeze 5 --bad 5
stamp "suite finished"
