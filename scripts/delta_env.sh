#!/usr/bin/env bash
# Delta Lake readers for the Delta interop tests (tests/delta/, tests/feast/historical_delta.py).
#
# Usage: scripts/delta_env.sh         prints the venv's python path on the last line of stdout
#   PY=$(scripts/delta_env.sh | tail -1)
#
# Idempotent and non-interactive. Runs scripts/feast_env.sh (the Feast 0.67 venv under
# ${FC_STATE_DIR:-<repo>/.services}/feast-venv), then pip-installs the pins below into that same
# venv, only when one of them is not installed at exactly that version; a stamp file makes repeat
# calls cheap. pip's output goes to $STATE/logs/delta-pip.log; on failure its tail is printed to
# stderr and the script exits 1.
#
# Pins (they install next to feast 0.67.0; `pip check` stays clean and feast still imports):
#   deltalake 1.6.6   newest; polars 2.x needs deltalake >=1.0,!=1.5.* and feast's own Delta
#                     code paths (FileSource schema via Schema.to_arrow) work with 1.x. Note that
#                     feast's optional "delta" extra says deltalake<1.0; that extra is not installed.
#   polars 2.1.0      read_delta / scan_delta go through deltalake.
#   duckdb 1.5.5 + duckdb-extension-delta 1.5.5: the extension wheel requires duckdb==1.5.5 and
#                     ships extensions/v1.5.5/delta.duckdb_extension, loaded by path (no download).
#   duckdb-extension-httpfs 1.5.5: provides DuckDB's S3 secret type (CREATE SECRET (TYPE S3 ...)),
#                     which delta_scan needs for s3:// tables; loaded by path the same way.
#   s3fs 2026.9.0     = the venv's fsspec version; Feast's file offline store reads s3:// sources
#                     through dask/fsspec. Its aiobotocore needs python-dateutil<3, so pip moves
#                     python-dateutil 4.0.0 back to 2.9.0.post0 (pandas only needs >=2.8.2).
#   ibis-framework[duckdb] 12.0.0 + sqlglot 30.31.0: Feast's duckdb offline store (feast 0.67.0's
#                     "duckdb" extra asks ibis-framework[duckdb]>=10.0.0; 12.0.0 is the newest;
#                     its duckdb extra needs duckdb>=0.10.3,!=1.3.0, numpy<3, pandas<4 (10.x/11.x:
#                     pandas<3), pyarrow>=10.0.1, so the venv's duckdb 1.5.5, numpy 2.4, pandas
#                     2.3.3 and pyarrow 26 stay). sqlglot is pinned because ibis only asks
#                     >=23.4,!=26.32.0 and a new sqlglot major can break ibis's compiler; 30.31.0
#                     is what pip resolved and what the Feast runs were checked with. Also brings
#                     atpublic, parsy, pyarrow-hotfix, rich (+ markdown-it-py, mdurl).
#                     ibis's DuckDB read_delta is delta_scan (the delta extension), not deltalake;
#                     tests/feast/historical_delta.py sets up the extension so ibis never downloads.
#
# The stamp file holds the pin list, so a change to PINS re-runs pip on existing venvs.
#
# Environment: FC_STATE_DIR (default <repo>/.services), plus whatever scripts/feast_env.sh reads.
set -Eeuo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${FC_STATE_DIR:-$ROOT/.services}
LOGS=$STATE/logs
LOG=$LOGS/delta-pip.log
PINS=("deltalake[pyarrow]==1.6.6" polars==2.1.0 duckdb==1.5.5 duckdb-extension-delta==1.5.5
      duckdb-extension-httpfs==1.5.5 s3fs==2026.9.0 "ibis-framework[duckdb]==12.0.0"
      sqlglot==30.31.0)

log() { printf '[delta-env] %s\n' "$*" >&2; }
fail() {
  log "ERROR: $*"
  if [[ -s $LOG ]]; then
    echo "---- last 40 lines of $LOG ----" >&2
    tail -n 40 "$LOG" >&2
  fi
  exit 1
}

# feast_env.sh logs to stderr; its stdout's last line is the interpreter.
PY=$(bash "$ROOT/scripts/feast_env.sh" | tail -n 1) || fail "scripts/feast_env.sh failed"
[[ -x $PY ]] || fail "scripts/feast_env.sh printed '$PY', which is not an interpreter"
STAMP=$(dirname "$(dirname "$PY")")/.delta-ok
mkdir -p "$LOGS"

# True when every pin is installed at exactly its version (metadata only: fast).
pins_ok() {
  "$PY" - "${PINS[@]}" <<'EOF' 2>/dev/null
import importlib.metadata as m, re, sys
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    if m.version(re.sub(r"\[.*\]", "", name)) != want:
        sys.exit(1)
EOF
}

# Full check after an install: everything imports, the DuckDB extension loads, feast still works.
imports_ok() {
  "$PY" - <<'EOF' >>"$LOG" 2>&1
import importlib, pathlib, deltalake, polars, duckdb, s3fs, feast, ibis
import ibis.backends.duckdb, feast.infra.offline_stores.duckdb  # Feast's duckdb offline store
con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
for name in ("delta", "httpfs"):
    pkg = pathlib.Path(importlib.import_module(f"duckdb_extension_{name}").__file__).parent
    con.execute(f"LOAD '{pkg}/extensions/v{duckdb.__version__}/{name}.duckdb_extension'")
print("imports ok:", deltalake.__version__, polars.__version__, duckdb.__version__, ibis.__version__,
      feast.__version__)
EOF
}

# Serialise concurrent callers on one lock file (as feast_env.sh does).
exec 9>"$STATE/delta-venv.lock"
if command -v flock >/dev/null 2>&1; then
  flock -w 900 9 || fail "timed out waiting for $STATE/delta-venv.lock"
fi

if [[ -s $STAMP && $(<"$STAMP") == "${PINS[*]}" ]] && pins_ok; then
  echo "$PY"
  exit 0
fi

rm -f "$STAMP"
: >"$LOG"
if ! pins_ok; then
  log "pip: installing ${PINS[*]} (log: $LOG)"
  PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    "$PY" -m pip install --no-input "${PINS[@]}" >>"$LOG" 2>&1 </dev/null \
    || fail "pip install ${PINS[*]} failed"
  pins_ok || fail "pins installed but their versions do not match (see $LOG)"
fi
"$PY" -m pip check >>"$LOG" 2>&1 || fail "pip check reports broken requirements (see $LOG)"
imports_ok || fail "delta packages installed but do not import/load (see $LOG)"
echo "${PINS[*]}" >"$STAMP"
echo "$PY"
