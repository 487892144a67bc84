#!/usr/bin/env python3
"""Checks that every metric deploy/prometheus/alerts.yaml refers to is one the connector
registers in src/metrics/.

Takes every `feature_connector_<name>` in the rules file (expressions, and annotations that
point operators at other metrics), strips the exposition suffixes `_total`, `_bucket`, `_sum`
and `_count`, and looks the base name up among the names passed to `registry.register(` in
src/metrics/ (the registry adds the `feature_connector_` prefix). Stdlib only.

    python3 scripts/check_alert_metrics.py [ALERTS_YAML [METRICS_RS]]

Exit 0 when every name is registered, 1 otherwise (each unknown name is listed).
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PREFIX = "feature_connector_"
SUFFIXES = ("_total", "_bucket", "_sum", "_count")
METRIC_RE = re.compile(r"\b" + PREFIX + r"[a-z_]+")
REGISTER_RE = re.compile(r'registry\s*\.\s*register\s*\(\s*"([a-z_:][a-z0-9_:]*)"')


def base_name(name):
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def main(argv):
    alerts = Path(argv[1]) if len(argv) > 1 else ROOT / "deploy/prometheus/alerts.yaml"
    metrics_rs = Path(argv[2]) if len(argv) > 2 else ROOT / "src/metrics"
    sources = sorted(metrics_rs.rglob("*.rs")) if metrics_rs.is_dir() else [metrics_rs]
    registered = set(REGISTER_RE.findall("".join(f.read_text() for f in sources)))
    if not registered:
        print(f"check_alert_metrics: no registry.register(\"…\") names in {metrics_rs}", file=sys.stderr)
        return 1
    used = {}
    for lineno, line in enumerate(alerts.read_text().splitlines(), 1):
        for name in METRIC_RE.findall(line):
            used.setdefault(name, lineno)
    if not used:
        print(f"check_alert_metrics: no {PREFIX}* metric in {alerts}", file=sys.stderr)
        return 1
    unknown = []
    for name, lineno in sorted(used.items()):
        base = base_name(name)[len(PREFIX):]
        if base not in registered:
            unknown.append((name, lineno, base))
    for name, lineno, base in unknown:
        print(
            f"check_alert_metrics: {alerts}:{lineno}: {name} is not registered "
            f"(no registry.register(\"{base}\", …) in {metrics_rs})",
            file=sys.stderr,
        )
    if unknown:
        return 1
    print(
        f"check_alert_metrics: OK: {len(used)} metric names in {alerts.name} "
        f"({len({base_name(n) for n in used})} metrics), all registered in {metrics_rs.name}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
