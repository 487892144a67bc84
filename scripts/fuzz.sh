#!/usr/bin/env bash
# Nightly-style fuzzing: runs each cargo-fuzz target (fuzz/fuzz_targets/) for a bounded time.
#
#   bash scripts/fuzz.sh [seconds-per-target=60] [target...]
#
# Installs what is missing (the nightly toolchain through rustup, cargo-fuzz from crates.io).
# Seeds come from the repository (the pipeline, service and schema files, sample payloads);
# the growing corpus stays in fuzz/corpus/<target>/ (not committed). A crash leaves its input
# in fuzz/artifacts/<target>/ and makes this script exit 1: copy that input into
# tests/fuzz_regressions/<target>/ so `cargo test` replays it from then on.
set -Eeuo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
SECONDS_PER_TARGET=${1:-60}
shift || true
TARGETS=("$@")
if ((${#TARGETS[@]} == 0)); then TARGETS=(payload_decoder config_loader); fi

rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
cargo +nightly fuzz --version >/dev/null 2>&1 || cargo install cargo-fuzz --locked

seed() {
  local target=$1 dir=fuzz/corpus/$1
  mkdir -p "$dir"
  case $target in
    config_loader)
      cp connectors/*.yaml config/default.yaml bench/connectors/*.yaml "$dir"/ ;;
    payload_decoder)
      cp tests/fuzz_regressions/payload_decoder/* "$dir"/ 2>/dev/null || true
      printf '{"user_id": "u-1", "event_time": 1, "purchases_30d": 2}' >"$dir/json-object" ;;
  esac
  cp tests/fuzz_regressions/"$target"/* "$dir"/ 2>/dev/null || true
}

failed=0
for target in "${TARGETS[@]}"; do
  seed "$target"
  echo "[fuzz] $target for ${SECONDS_PER_TARGET}s"
  if ! (cd fuzz && cargo +nightly fuzz run -O "$target" "corpus/$target" -- \
        -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1); then
    echo "[fuzz] $target: crash; input in fuzz/artifacts/$target/" >&2
    failed=1
  fi
done
exit $failed
