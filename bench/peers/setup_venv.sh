#!/usr/bin/env bash
# The Python venv for the benchmark's peer contenders (bench/peers/*.py).
#
# Usage: bench/peers/setup_venv.sh    prints the venv's python path on the last line of stdout
#   PY=$(bench/peers/setup_venv.sh | tail -1)
#
# Idempotent and non-interactive. Runs scripts/delta_env.sh (the Feast 0.67 venv, with the Delta readers, under
# ${FC_STATE_DIR:-<repo>/.services}/feast-venv), then pip-installs the pins below into that same
# venv, only when one of them is not installed at exactly that version. pip's output goes to
# $STATE/logs/peers-pip.log; on failure its tail is printed to stderr and the script exits 1.
#
# redis is pinned to 7.4.1, not to the newest redis-py (8.x): feast 0.67.0 declares
# `redis<8,>=4.2.2` for its redis extra, and 7.4.1 is what `feast[redis]==0.67.0` resolves to.
# Both contenders then run Feast's supported client, the same one.
#
# Environment: FC_STATE_DIR (default <repo>/.services), plus whatever scripts/delta_env.sh reads.
set -Eeuo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
STATE=${FC_STATE_DIR:-$ROOT/.services}
LOGS=$STATE/logs
LOG=$LOGS/peers-pip.log
PINS=(pulsar-client==3.13.0 fastavro==1.13.1 redis==7.4.1 psutil==7.2.2)

log() { printf '[peers-venv] %s\n' "$*" >&2; }
fail() {
  log "ERROR: $*"
  if [[ -s $LOG ]]; then
    echo "---- last 40 lines of $LOG ----" >&2
    tail -n 40 "$LOG" >&2
  fi
  exit 1
}

# delta_env.sh logs to stderr; its stdout's last line is the interpreter.
PY=$(bash "$ROOT/scripts/delta_env.sh" | tail -n 1) || fail "scripts/delta_env.sh failed"
[[ -x $PY ]] || fail "scripts/delta_env.sh printed '$PY', which is not an interpreter"
mkdir -p "$LOGS"

# True when every pin is installed at exactly its version (metadata only: fast).
pins_ok() {
  "$PY" - "${PINS[@]}" <<'EOF' 2>/dev/null
import importlib.metadata as m, sys
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    if m.version(name) != want:
        sys.exit(1)
EOF
}

# Serialise concurrent callers on one lock file (as feast_env.sh does).
exec 9>"$STATE/peers-venv.lock"
if command -v flock >/dev/null 2>&1; then
  flock -w 900 9 || fail "timed out waiting for $STATE/peers-venv.lock"
fi

if ! pins_ok; then
  log "pip: installing ${PINS[*]} (log: $LOG)"
  : >"$LOG"
  PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    "$PY" -m pip install --no-input "${PINS[@]}" >>"$LOG" 2>&1 </dev/null \
    || fail "pip install ${PINS[*]} failed"
  pins_ok || fail "pins installed but their versions do not match (see $LOG)"
  "$PY" -c 'import pulsar, fastavro, redis, psutil, pyarrow, feast' >>"$LOG" 2>&1 \
    || fail "peer packages installed but do not import (see $LOG)"
fi
echo "$PY"
