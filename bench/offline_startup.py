"""Offline start-up and commit benchmark (run it through bench/offline_startup.sh).

For each history size N (default 100 and 10,000 committed rollovers), in a bucket of its own
on the local S3 server:
  1. offline_history (bench/programs) commits N rollovers through the connector's own
     offline sink (4 topic partitions, --rows rows each) and reports each commit's latency;
  2. the release binary starts on a pipeline whose offline table is that table (online off,
     a fresh topic), --starts times; each time: process start -> /readyz 200, then the
     offline store requests made so far (offline_store_requests_total from /metrics: by
     operation, and by target `log` = the table's _delta_log, `data` = data files or listings
     outside the log).
Prints a table and writes it to bench/results/offline-startup.md.
"""

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "target/dist/feature-connector"
HISTORY = ROOT / "target/dist/offline_history"
ENDPOINT = os.environ.get("S3_ENDPOINT", "http://127.0.0.1:9000")
SCHEMA = {"type": "record", "name": "History", "fields": [
    {"name": "user_id", "type": "string"},
    {"name": "event_time", "type": "long"},
    {"name": "value", "type": "double"}]}


def log(message):
    print(f"[offline-startup {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def project(store, port):
    work = Path(tempfile.mkdtemp(prefix="fc-startup-"))
    (work / "connectors").mkdir()
    (work / "schemas").mkdir()
    (work / "schemas/history.avsc").write_text(json.dumps(SCHEMA))
    (work / "config.yaml").write_text(f"""pulsar:
  url: {os.environ.get('PULSAR_URL', 'pulsar://127.0.0.1:6650')}
  admin_url: {os.environ.get('PULSAR_ADMIN_URL', 'http://127.0.0.1:8080')}
redis:
  url: {os.environ.get('REDIS_URL', 'redis://127.0.0.1:6379')}
object_store:
  default_url: {store}
  options:
    aws_endpoint: {ENDPOINT}
    aws_region: us-east-1
    aws_allow_http: "true"
    aws_virtual_hosted_style_request: "false"
http:
  bind: 127.0.0.1:{port}
shutdown_timeout: 10s
""")
    (work / "connectors/history.yaml").write_text(f"""name: history
source:
  topic: persistent://public/default/startup-{uuid.uuid4().hex[:12]}
  subscription: startup
schema:
  file: schemas/history.avsc
entity:
  keys: [user_id]
  event_time: event_time
online:
  enabled: false
offline:
  rollover_interval: 1h
""")
    return work


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return None, ""


def start_once(work, port):
    env = dict(os.environ, RUST_LOG="warn")
    started = time.perf_counter()
    process = subprocess.Popen([str(BIN), "run", "--root", str(work), "--config", str(work / "config.yaml")],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    ready = None
    while time.perf_counter() - started < 60:
        status, _ = get(f"http://127.0.0.1:{port}/readyz")
        if status == 200:
            ready = time.perf_counter() - started
            break
        if process.poll() is not None:
            break
        time.sleep(0.02)
    _, metrics = get(f"http://127.0.0.1:{port}/metrics")
    requests = {}
    for line in metrics.splitlines():
        match = re.match(r'feature_connector_offline_store_requests_total\{(.*)\} (\d+)', line)
        if match:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
            requests[f"{labels['operation']} {labels['target']}"] = int(match.group(2))
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=30)
    if ready is None:
        raise SystemExit(f"not ready: {stderr.decode()[-2000:]}")
    return ready, requests


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rollovers", default="100,10000")
    parser.add_argument("--rows", type=int, default=20)
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--paced", type=int, default=200,
                        help="commits measured after the history, one every --pace-ms")
    parser.add_argument("--pace-ms", type=int, default=500)
    args = parser.parse_args()
    results = []
    for n in [int(x) for x in args.rollovers.split(",")]:
        # A bucket of its own, as a table has in production (the test server's listings
        # slow down with every key of a bucket).
        bucket = f"fc-bench-{n}-{uuid.uuid4().hex[:8]}"
        urllib.request.urlopen(urllib.request.Request(f"{ENDPOINT}/{bucket}", method="PUT"), timeout=10)
        store = f"s3://{bucket}/offline"
        log(f"committing {n} rollovers to {store}")
        built = time.perf_counter()
        out = subprocess.run([str(HISTORY), "--store", store, "--pipeline", "history",
                              "--rollovers", str(n), "--rows", str(args.rows),
                              "--paced", str(args.paced), "--pace-ms", str(args.pace_ms)],
                             check=True, capture_output=True, text=True)
        history = json.loads(out.stdout.strip().splitlines()[-1])
        log(f"{n} rollovers in {time.perf_counter() - built:.0f} s: {history}")
        port = free_port()
        work = project(store, port)
        times, requests = [], {}
        for _ in range(args.starts):
            ready, requests = start_once(work, port)
            times.append(ready)
        results.append({"rollovers": n, "history": history, "ready_s": times, "requests": requests})
        log(f"{n} rollovers: start -> ready {statistics.median(times):.3f} s (runs {[round(t, 3) for t in times]}), requests {requests}")
    base = statistics.median(results[0]["ready_s"])
    lines = ["| committed rollovers | start → /readyz 200 (median of runs) | ratio to first | commit p50 / p99 / max ms, back to back | then paced: p50 / p99 / max ms | store requests at ready |",
             "|---:|---:|---:|---|---|---|"]
    for r in results:
        ready = statistics.median(r["ready_s"])
        c = r["history"]["commit_ms"]
        p = r["history"].get("paced_commit_ms") or {"p50": 0, "p99": 0, "max": 0}
        reqs = ", ".join(f"{k}: {v}" for k, v in sorted(r["requests"].items()))
        lines.append(f"| {r['rollovers']:,} | {ready:.3f} s ({', '.join(f'{t:.3f}' for t in r['ready_s'])}) | "
                     f"{ready / base:.2f} | {c['p50']:.1f} / {c['p99']:.1f} / {c['max']:.1f} | "
                     f"{p['p50']:.1f} / {p['p99']:.1f} / {p['max']:.1f} | {reqs} |")
    table = "\n".join(lines)
    print(table)
    out = ROOT / "bench/results/offline-startup.md"
    out.write_text(f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, `bench/offline_startup.sh "
                   f"--rollovers {args.rollovers} --rows {args.rows} --starts {args.starts} --paced {args.paced} "
                   f"--pace-ms {args.pace_ms}`\n\n{table}\n")
    log(f"written {out}")


if __name__ == "__main__":
    main()
