# shellcheck shell=bash
# Sourced by scripts/check.sh and scripts/test.sh: one set of compiler settings for every
# cargo command of the test command, so that the tree is compiled once.
#
# clippy's lints run inside the test build: the workspace's own crates are compiled by
# clippy-driver, as `cargo clippy` does, and the dependencies by rustc, once for the lints
# and the tests both (a separate `cargo clippy` compiled every dependency a second time).
# Warnings are errors: CLIPPY_ARGS is how `cargo clippy -- -D warnings` hands them on, and
# scripts/check.sh also fails on any warning the build prints.
CLIPPY_DRIVER=${FC_CLIPPY_DRIVER:-$(command -v clippy-driver || true)}
if [[ -z $CLIPPY_DRIVER ]]; then
  echo "cargo_env.sh: clippy-driver is not on PATH (rustup component add clippy)" >&2
  exit 1
fi
export RUSTC_WORKSPACE_WRAPPER=$CLIPPY_DRIVER
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
# protoc is needed by the pulsar crate's build script.
export PROTOC=${PROTOC:-$(command -v protoc || true)}
# A fresh CI machine gains nothing from incremental compilation's caches, only their cost.
if [[ ${CI:-} == true ]]; then
  export CARGO_INCREMENTAL=0
fi
