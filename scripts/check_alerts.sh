#!/usr/bin/env bash
# Checks the Prometheus alert rules in deploy/prometheus/: every metric they use is one
# src/metrics/ registers, `promtool check rules` accepts them, and the unit tests in
# alerts_test.yaml pass. Installs promtool (Debian's `prometheus` package) when missing.
# Runs from any directory; exits non-zero on any failure.
#
#     bash scripts/check_alerts.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RULES="$ROOT/deploy/prometheus/alerts.yaml"
TESTS="$ROOT/deploy/prometheus/alerts_test.yaml"

fail() {
    echo "check_alerts: FAIL: $*" >&2
    exit 1
}

install_promtool() {
    command -v apt-get >/dev/null 2>&1 \
        || fail "promtool is not installed and apt-get is not available; install Prometheus' promtool"
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || fail "promtool is missing and installing it needs root"
        sudo=(sudo)
    fi
    # Was a prometheus server running before we installed anything? Then it is not ours.
    local had_server=0
    if pgrep -x prometheus >/dev/null 2>&1; then
        had_server=1
    fi
    echo "check_alerts: promtool not found; installing Debian's prometheus package" >&2
    "${sudo[@]}" apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
        prometheus >&2
    # Only promtool is wanted: stop the server if the package started one.
    if [ "$had_server" -eq 0 ]; then
        if command -v systemctl >/dev/null 2>&1 \
            && systemctl is-active --quiet prometheus 2>/dev/null; then
            echo "check_alerts: stopping the prometheus service the package started" >&2
            "${sudo[@]}" systemctl stop prometheus || true
            "${sudo[@]}" systemctl disable prometheus >/dev/null 2>&1 || true
        fi
        local pids
        pids="$(pgrep -x prometheus || true)"
        if [ -n "$pids" ]; then
            echo "check_alerts: stopping the prometheus server the package started (pid $pids)" >&2
            for pid in $pids; do
                "${sudo[@]}" kill "$pid" || true
            done
        fi
    fi
}

PROMTOOL="$(command -v promtool || true)"
if [ -z "$PROMTOOL" ]; then
    install_promtool
    PROMTOOL="$(command -v promtool || true)"
    [ -n "$PROMTOOL" ] || fail "promtool still not found after installing the prometheus package"
fi

command -v python3 >/dev/null 2>&1 || fail "python3 is needed for scripts/check_alert_metrics.py"
python3 "$ROOT/scripts/check_alert_metrics.py" "$RULES" "$ROOT/src/metrics" \
    || fail "alerts.yaml uses a metric src/metrics/ does not register"

"$PROMTOOL" check rules "$RULES" || fail "promtool check rules $RULES"

# promtool resolves the test file's rule_files relative to the test file.
"$PROMTOOL" test rules "$TESTS" || fail "promtool test rules $TESTS"

rules="$(grep -c '^[[:space:]]*- alert:' "$RULES" || true)"
echo "check_alerts: OK: $rules alert rules: metric names registered, rules valid, unit tests pass ($("$PROMTOOL" --version 2>&1 | head -1))"
