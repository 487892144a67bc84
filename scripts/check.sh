#!/usr/bin/env bash
# The fast gate, no services: formatting, the source layout's rules, commit subjects, the
# alert rules, clippy with warnings as errors, then the one test build of the workspace and
# its unit tests. `bash scripts/test.sh` runs it first, so a style or logic slip fails within
# minutes; the integration tests later run from the same build (nothing is compiled twice:
# every cargo command here and in test.sh selects `--workspace` with the same features).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

started=$(date +%s)
step() { echo "[check $(($(date +%s) - started)) s] $*"; }

if ! command -v cargo >/dev/null; then
  echo "check.sh: cargo is not on PATH (install Rust with rustup)" >&2
  exit 1
fi
# protoc is needed by the pulsar crate's build script.
command -v protoc >/dev/null || bash scripts/services.sh packages
export PROTOC=${PROTOC:-$(command -v protoc)}
export RUST_BACKTRACE=${FC_TEST_BACKTRACE:-0}

step "formatting (cargo fmt --check)"
cargo fmt --all --check
step "source layout (import cycles, layering, file length)"
python3 scripts/check_layout.py src
step "commit subjects (at most 72 characters)"
bash scripts/check_commits.sh
step "alert rules (promtool)"
bash scripts/check_alerts.sh
step "lints (cargo clippy --workspace --all-targets -- -D warnings)"
cargo clippy --workspace --all-targets --locked -- -D warnings
step "the test build (cargo build --workspace --all-targets)"
cargo build --workspace --all-targets --locked
step "unit tests (cargo test --workspace --lib --bins)"
cargo test --workspace --lib --bins --locked
step "passed"
