#!/usr/bin/env bash
# Nightly-style fuzzing: runs each cargo-fuzz target (fuzz/fuzz_targets/) for a bounded time.
#
#   bash scripts/fuzz.sh [seconds-per-target=60] [target...]
#   FUZZ_RUNS=10000000 bash scripts/fuzz.sh 0 [target...]      # a number of executions instead
#   FUZZ_RUNS=10000000 bash scripts/fuzz.sh 3600 [target...]   # whichever comes first
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

# 0 seconds is no time limit (libFuzzer's own meaning of -max_total_time=0).
limit=(-max_total_time="$SECONDS_PER_TARGET")
if [[ -n ${FUZZ_RUNS:-} ]]; then limit+=(-runs="$FUZZ_RUNS"); fi

# The longest input each target is given: payloads of feature rows are well under 4 KB, and
# pipeline and service files under 16 KB. Longer inputs find nothing new and are slower per
# execution (a 200 KB YAML input is parsed again after each problem it repairs). Committed
# regression inputs longer than this are replayed whole by `cargo test`.
max_len() {
  case $1 in
    payload_decoder) echo 4096 ;;
    config_loader) echo 16384 ;;
    *) echo 4096 ;;
  esac
}

# Exit status: 0 clean, 1 a crash (its input saved), 2 a target that does not build or a
# fuzzer that stopped without saving an input.
status=0
for target in "${TARGETS[@]}"; do
  seed "$target"
  if ! (cd fuzz && cargo +nightly fuzz build -O "$target"); then
    echo "[fuzz] $target: the target does not build (see the compiler's errors above)" >&2
    status=2
    continue
  fi
  artifacts=fuzz/artifacts/$target
  mkdir -p "$artifacts"
  before=$(find "$artifacts" -type f | wc -l)
  echo "[fuzz] $target: ${limit[*]} -max_len=$(max_len "$target")"
  if (cd fuzz && cargo +nightly fuzz run -O "$target" "corpus/$target" -- \
        "${limit[@]}" -max_len="$(max_len "$target")" -rss_limit_mb=2048 -timeout=10 \
        -print_final_stats=1); then
    continue
  fi
  if (($(find "$artifacts" -type f | wc -l) > before)); then
    newest=$(find "$artifacts" -type f -printf '%T@ %p\n' | sort -n | tail -1 | cut -d' ' -f2-)
    echo "[fuzz] $target: crash; input in $newest" >&2
    ((status == 2)) || status=1
  else
    echo "[fuzz] $target: the fuzzer stopped with an error and saved no input (see above)" >&2
    status=2
  fi
done
exit $status
