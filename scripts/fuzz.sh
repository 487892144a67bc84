#!/usr/bin/env bash
# Nightly-style fuzzing: runs each cargo-fuzz target (fuzz/fuzz_targets/) for a bounded time.
#
#   bash scripts/fuzz.sh [seconds-per-target=60] [target...]
#   FUZZ_RUNS=10000000 bash scripts/fuzz.sh 0 [target...]      # a number of executions instead
#   FUZZ_RUNS=10000000 bash scripts/fuzz.sh 3600 [target...]   # whichever comes first
#   FUZZ_JOBS=2 ...          # fuzzer processes per target, sharing the corpus (default 1)
#   FUZZ_SANITIZER=address   # build with AddressSanitizer (default none, see below)
#   FUZZ_TRACE_COMPARES=0    # build without comparison tracing (see below)
#
# FUZZ_RUNS counts the executions of a target in all its processes together. The targets are
# safe Rust: a bug shows as a panic, a hang (-timeout) or a runaway allocation (-rss_limit_mb),
# which libFuzzer catches without a sanitizer. AddressSanitizer only adds checks for the
# unsafe code of dependencies, at about ten times the cost per execution (payload_decoder:
# about 300 executions/s with it, 3,200 without, on the 2-core test box). Changing the
# sanitizer rebuilds every dependency of the targets.
#
# Comparison tracing lets libFuzzer put the constants a target compares with into its inputs;
# it took 47 % of config_loader's time (perf: the YAML scanner compares every byte), so a run
# whose corpus already holds the keys and values (the seeds are the shipped files) can do
# about twice the executions without it. Changing it also rebuilds every dependency.
#
# Installs what is missing (the nightly toolchain through rustup, cargo-fuzz from crates.io).
# Seeds come from the repository (the pipeline, service and schema files, sample payloads);
# the growing corpus stays in fuzz/corpus/<target>/ (not committed), the fuzzers' logs in
# fuzz/logs/<target>/. A crash leaves its input in fuzz/artifacts/<target>/ and makes this
# script exit 1: copy that input into tests/fuzz_regressions/<target>/ so `cargo test`
# replays it from then on.
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

JOBS=${FUZZ_JOBS:-1}
SANITIZER=${FUZZ_SANITIZER:-none}
build_flags=(-O -s "$SANITIZER")
if [[ ${FUZZ_TRACE_COMPARES:-1} == 0 ]]; then build_flags+=(--no-trace-compares); fi
# 0 seconds is no time limit (libFuzzer's own meaning of -max_total_time=0).
limit=(-max_total_time="$SECONDS_PER_TARGET")
if [[ -n ${FUZZ_RUNS:-} ]]; then limit+=(-runs="$(((FUZZ_RUNS + JOBS - 1) / JOBS))"); fi

# The longest input each target is given: payloads of feature rows and pipeline and service
# files are well under 4 KB (config/default.yaml, the longest, is 3.3 KB). Longer inputs find
# nothing new and are slower per execution (a long YAML input is parsed again after each
# problem it repairs). Committed regression inputs longer than this are replayed whole by
# `cargo test`.
MAX_LEN=4096

# The sum of a statistic over a target's fuzzer logs.
total() {
  sed -n "s/^stat::$1: *//p" "$2"/fuzz-*.log | awk '{ s += $1 } END { print s + 0 }'
}

# `cargo fuzz build -O` uses the release profile, which builds what the events do not pass
# through at opt-level 0 or 1 (Cargo.toml), among them the YAML parser and the Avro schema
# checks the targets run millions of times. Cargo settings in fuzz/.cargo/config.toml (read
# as the builds run in fuzz/) take precedence over Cargo.toml's: every lowered package is
# raised back to 3 there, written from Cargo.toml's list each run.
mkdir -p fuzz/.cargo
{
  echo "# Written by scripts/fuzz.sh from Cargo.toml; not committed."
  sed -n 's/^\[profile\.release\.package\.\(.*\)\]$/[profile.release.package.\1]\nopt-level = 3/p' \
    Cargo.toml
} >fuzz/.cargo/config.toml

# Exit status: 0 clean, 1 a crash (its input saved), 2 a target that does not build or a
# fuzzer that stopped without saving an input.
status=0
binaries=target/$(rustc -vV | sed -n 's/^host: //p')/release
for target in "${TARGETS[@]}"; do
  seed "$target"
  if ! (cd fuzz && cargo +nightly fuzz build "${build_flags[@]}" "$target"); then
    echo "[fuzz] $target: the target does not build (see the compiler's errors above)" >&2
    status=2
    continue
  fi
  artifacts=$ROOT/fuzz/artifacts/$target
  logs=fuzz/logs/$target
  mkdir -p "$artifacts" "$logs"
  rm -f "$logs"/fuzz-*.log
  before=$(find "$artifacts" -type f | wc -l)
  echo "[fuzz] $target: $JOBS process(es), ${limit[*]} -max_len=$MAX_LEN, build ${build_flags[*]}"
  echo "[fuzz] $target: progress in $logs/fuzz-*.log"
  started=$SECONDS
  rc=0
  # -jobs runs the processes in the logs' folder, each writing its own fuzz-N.log.
  (cd "$logs" && "$ROOT/$binaries/$target" "$ROOT/fuzz/corpus/$target" \
      -jobs="$JOBS" -workers="$JOBS" "${limit[@]}" -max_len="$MAX_LEN" -rss_limit_mb=2048 \
      -timeout=10 -print_final_stats=1 -artifact_prefix="$artifacts/" >/dev/null 2>&1) || rc=$?
  elapsed=$((SECONDS - started))
  if (($(find "$artifacts" -type f | wc -l) > before)); then
    newest=$(find "$artifacts" -type f -printf '%T@ %p\n' | sort -n | tail -1 | cut -d' ' -f2-)
    grep -h -m1 -A12 -E '^==[0-9]+==|panicked at' "$logs"/fuzz-*.log >&2 || true
    echo "[fuzz] $target: crash; input in $newest" >&2
    ((status == 2)) || status=1
    continue
  fi
  if ((rc != 0)); then
    tail -n 20 "$logs"/fuzz-*.log >&2 || true
    echo "[fuzz] $target: the fuzzer stopped with an error and saved no input (see above)" >&2
    status=2
    continue
  fi
  executions=$(total number_of_executed_units "$logs")
  # Coverage of the corpus the run leaves, all processes' finds together: one pass over it.
  coverage=$("$binaries/$target" "fuzz/corpus/$target" -runs=0 -max_len="$MAX_LEN" 2>&1 |
    sed -n 's/.*INITED \(cov: [0-9]* ft: [0-9]* corp: [^ ]*\).*/\1/p' | tail -1)
  echo "[fuzz] $target: $executions executions in ${elapsed} s" \
    "($((executions / (elapsed > 0 ? elapsed : 1))) per s), no crash; corpus $coverage"
done
exit $status
