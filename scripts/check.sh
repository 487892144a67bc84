#!/usr/bin/env bash
# The fast gate, no services: formatting, the source layout's rules, commit subjects, the
# shell and Python scripts' linters, the alert rules, then the one test build of the
# workspace with clippy's lints (warnings are errors), its unit tests and the API docs.
# `bash scripts/test.sh` runs it first, so a style or logic slip fails within minutes; the
# integration tests later run from the same build (nothing is compiled twice:
# scripts/cargo_env.sh gives every cargo command the same settings, and each selects
# `--workspace`).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

started=$(date +%s)
step() { echo "[check $(($(date +%s) - started)) s] $*"; }

if ! command -v cargo >/dev/null; then
  echo "check.sh: cargo is not on PATH (install Rust with rustup)" >&2
  exit 1
fi
{ command -v protoc && command -v shellcheck; } >/dev/null || bash scripts/services.sh packages
# shellcheck source=scripts/cargo_env.sh
source scripts/cargo_env.sh
export RUST_BACKTRACE=${FC_TEST_BACKTRACE:-0}

step "formatting (cargo fmt --check)"
cargo fmt --all --check
step "source layout (import cycles, layering, file length)"
python3 scripts/check_layout.py src
step "commit subjects (at most 72 characters)"
bash scripts/check_commits.sh
step "shell scripts (shellcheck)"
git ls-files -z '*.sh' ':!:vendor/' | xargs -0 shellcheck
step "Python scripts (ruff check, ruff.toml)"
python3 -m ruff --version >/dev/null 2>&1 ||
  python3 -m pip install -q --disable-pip-version-check "ruff==0.16.9"
git ls-files -z '*.py' ':!:vendor/' | xargs -0 python3 -m ruff check --quiet
step "alert rules (promtool)"
bash scripts/check_alerts.sh
step "lints and the test build (cargo build --workspace --all-targets, clippy-driver for our crates)"
build_log=$(mktemp)
trap 'rm -f "$build_log"' EXIT
cargo build --workspace --all-targets --locked 2>&1 | tee "$build_log"
# The same lints as `cargo clippy --workspace --all-targets -- -D warnings`; a warning that
# got through (from a vendored crate, or if clippy-driver stopped reading CLIPPY_ARGS) fails.
if grep -q '^warning' "$build_log"; then
  echo "check.sh: the build printed warnings (above); they fail the gate" >&2
  exit 1
fi
step "unit tests (cargo test --workspace --lib --bins)"
# The fuzz targets are binaries too; run as tests they would fuzz without end.
cargo test --workspace --exclude feature-connector-fuzz --lib --bins --locked
step "API docs (cargo doc --workspace --no-deps, warnings denied)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet
step "passed"
