#!/usr/bin/env bash
# A private Python venv with Feast's SDK, for the Feast read-back tests (tests/feast/).
#
# Usage: scripts/feast_env.sh         prints the venv's python path on the last line of stdout
#   PY=$(scripts/feast_env.sh | tail -1)
#
# Idempotent and non-interactive: creates ${FC_STATE_DIR:-<repo>/.services}/feast-venv with
# `python3 -m venv` and pip-installs feast[redis]==$FEAST_VERSION only when the venv does not
# already import that exact version. pip's output goes to $STATE/logs/feast-pip.log; on failure
# its tail is printed to stderr and the script exits 1.
#
# Environment:
#   FC_STATE_DIR    state dir (default: <repo>/.services)
#   FEAST_VERSION   feast release to pin (default: 0.67.0)
#   FEAST_PYTHON    interpreter used to create the venv (default: python3)
set -Eeuo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${FC_STATE_DIR:-$ROOT/.services}
VENV=$STATE/feast-venv
LOGS=$STATE/logs
LOG=$LOGS/feast-pip.log
FEAST_VERSION=${FEAST_VERSION:-0.67.0}
BASE_PY=${FEAST_PYTHON:-python3}
PY=$VENV/bin/python

T0=$(date +%s)
log() { printf '[feast-env %3ss] %s\n' "$(($(date +%s) - T0))" "$*" >&2; }
fail() {
  log "ERROR: $*"
  if [[ -s $LOG ]]; then
    echo "---- last 40 lines of $LOG ----" >&2
    tail -n 40 "$LOG" >&2
  fi
  exit 1
}

STAMP=$VENV/.feast-ok

# Full check: the pinned feast and its redis extra import (about 3 s).
imports_ok() {
  [[ -x $PY ]] || return 1
  local v
  v=$("$PY" -c 'import importlib.metadata as m, feast, redis, google.protobuf; print(m.version("feast"))' \
        2>/dev/null) || return 1
  [[ $v == "$FEAST_VERSION" ]]
}

# Fast check for repeat calls: stamp from a passed full check + installed metadata still matches.
installed_ok() {
  [[ -x $PY && -s $STAMP && $(<"$STAMP") == "$FEAST_VERSION" ]] || return 1
  local v
  v=$("$PY" -c 'import importlib.metadata as m; m.version("redis"); print(m.version("feast"))' \
        2>/dev/null) || return 1
  [[ $v == "$FEAST_VERSION" ]]
}

mkdir -p "$LOGS"

# Serialise concurrent callers (e.g. two test jobs) on one lock file.
exec 9>"$STATE/feast-venv.lock"
if command -v flock >/dev/null 2>&1; then
  flock -w 900 9 || fail "timed out waiting for $STATE/feast-venv.lock"
fi

if installed_ok; then
  echo "$PY"
  exit 0
fi
if imports_ok; then  # installed earlier without a stamp
  echo "$FEAST_VERSION" >"$STAMP"
  echo "$PY"
  exit 0
fi

: >"$LOG"
if [[ ! -x $PY ]] || ! "$PY" -m pip --version >>"$LOG" 2>&1; then
  log "creating venv $VENV"
  rm -rf "$VENV"
  "$BASE_PY" -m venv "$VENV" >>"$LOG" 2>&1 || fail "$BASE_PY -m venv $VENV failed"
fi

log "pip: installing feast[redis]==$FEAST_VERSION (log: $LOG)"
PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
  "$PY" -m pip install --no-input "feast[redis]==$FEAST_VERSION" >>"$LOG" 2>&1 \
  </dev/null || fail "pip install feast[redis]==$FEAST_VERSION failed"

imports_ok || fail "feast $FEAST_VERSION installed but does not import (see $LOG)"
echo "$FEAST_VERSION" >"$STAMP"
log "feast $FEAST_VERSION ready"
echo "$PY"
