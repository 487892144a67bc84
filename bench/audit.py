"""The audit's cost (run it through `bash bench/audit.sh`): release (dist) build, real
Pulsar, Redis and a local Delta table.

  1. `--events` events over `--entities` entities (round robin, event time = now - count +
     index) are drained by the connector into Redis and the table, which it then stops;
  2. `feature-connector audit --sample all` and `--sample 10000` run against them: wall
     time, CPU seconds and peak RSS of the whole process (wait4), and the outcomes;
  3. ingest with the continuous audit off, on at its default interval, and on at a stress
     interval (`--stress-interval`): the same backlog (`--drain-events`) drained from a new
     subscription into empty keys and a new table each time, the settings' order reversed
     every other round; events/s of
     each, from the first message received to every lane's acknowledgement of the last, and
     the audits that ran meanwhile (`audit_runs_total`).
Prints the tables (Markdown).
"""

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import re

from run import (BENCH, BIN, Process, connector_env, connector_metrics, connector_received, delete_topic,
                 ensure_namespace, free_port, run_measured)
from serving import acked_by_every_lane, log, matching_keys, wait_until


AUDITS = re.compile(r'^feature_connector_audit_runs_total\{[^}]*\} (\S+)$', re.M)


def produce(topic, count, entities, env):
    base_ms = int(time.time() * 1000) - count
    argv = [str(BIN), "produce", "--root", str(BENCH), "--pipeline", "bench", "--topic", topic,
            "--count", str(count), "--entities", str(entities), "--base-ms", str(base_ms),
            "--batch", "100", "--producers", "4"]
    subprocess.run(argv, env=env, capture_output=True, text=True, check=True)


def drain(topic, subscription, offline_dir, events, extra_env):
    """Runs the connector until every lane acknowledged `events`; (seconds, CPU seconds)."""
    port = free_port()
    env = connector_env(topic, subscription, offline_dir, port)
    env.update(extra_env)
    env["FC_SERVING_BIND"] = ""
    matching_keys("bench:*", "del")
    connector = Process([str(BIN), "run", "--root", str(BENCH)], env=env,
                        log_path=Path(offline_dir).parent / f"{subscription}.log")
    try:
        wait_until("the first message", lambda: connector_received(port) > 0, timeout=120, every=0.005)
        started = time.time()
        wait_until("the backlog to drain", lambda: acked_by_every_lane(port) >= events,
                   timeout=900, every=0.02)
        seconds = time.time() - started
        cpu = connector.cpu_seconds()
        audits = sum(float(n) for n in AUDITS.findall(connector_metrics(port)))
    finally:
        connector.stop()
    return seconds, cpu, int(audits)


def audit(offline_dir, sample, env):
    argv = [str(BIN), "audit", "--root", str(BENCH), "--pipeline", "bench", "--sample", sample, "--json"]
    started = time.time()
    out, cpu, rss = run_measured(argv, Path(offline_dir).parent / f"audit-{sample}.log", env=env)
    seconds = time.time() - started
    return json.loads(out), seconds, cpu, rss


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--entities", type=int, default=100_000)
    parser.add_argument("--drain-events", type=int, default=12_000_000,
                        help="long enough that an audit at the default interval (1m) falls inside the drain")
    parser.add_argument("--rounds", type=int, default=2, help="0: the audit commands only, no ingest")
    parser.add_argument("--stress-interval", default="5s")
    args = parser.parse_args()
    ensure_namespace()
    work = Path(tempfile.mkdtemp(prefix="fc-audit-bench-"))
    topic = f"persistent://public/bench/audit-{uuid.uuid4().hex[:8]}"
    offline = work / "table"
    env = connector_env(topic, "audit", offline, free_port())
    try:
        log(f"publishing {args.events:,} events over {args.entities:,} entities")
        produce(topic, args.events, args.entities, env)
        log("draining them into Redis and the table")
        drain(topic, "audit", offline, args.events, {})
        print(f"## audit ({args.events:,} events over {args.entities:,} entities, "
              f"{os.cpu_count()} cores)\n")
        print("| command | entities | outcomes | features compared: values, differing | wall s | CPU s | peak RSS MB |")
        print("|---|---:|---|---|---:|---:|---:|")
        for sample in ("all", "10000"):
            report, seconds, cpu, rss = audit(offline, sample, env)
            outcomes = ", ".join(f"{k} {v:,}" for k, v in report["outcomes"].items() if v)
            features = [f for f in report["features"] if f["compared"]]
            compared = (f"{len(features)}: {sum(f['compared'] for f in features):,}, "
                        f"{sum(f['mismatches'] for f in features):,}")
            print(f"| `audit --sample {sample}` | {report['entities']:,} | {outcomes} | {compared} | "
                  f"{seconds:.2f} | {cpu:.2f} | {rss:.0f} |")
        print()
        if args.rounds == 0:
            return

        drain_topic = f"persistent://public/bench/audit-drain-{uuid.uuid4().hex[:8]}"
        log(f"publishing the ingest backlog: {args.drain_events:,} events")
        produce(drain_topic, args.drain_events, args.entities, env)
        settings = [
            ("audit off", {}),
            ("audit on, default interval (1m)", {"FC_AUDIT": "true"}),
            (f"audit on, every {args.stress_interval}", {"FC_AUDIT": "true", "FC_AUDIT_INTERVAL": args.stress_interval}),
        ]
        results = {name: [] for name, _ in settings}
        for round_ in range(args.rounds):
            # Every other round in reverse, so that no setting always follows the same one.
            for name, extra in (settings if round_ % 2 == 0 else settings[::-1]):
                table = work / f"drain-{uuid.uuid4().hex[:6]}"
                seconds, cpu, audits = drain(drain_topic, f"d{uuid.uuid4().hex[:6]}", table, args.drain_events, extra)
                results[name].append((args.drain_events / seconds, cpu, audits))
                log(f"round {round_ + 1}, {name}: {args.drain_events / seconds:,.0f} events/s, CPU {cpu:.1f} s, "
                    f"{audits} audits")
                shutil.rmtree(table, ignore_errors=True)
        base = max(r for r, _, _ in results["audit off"])
        print(f"## ingest with the continuous audit ({args.drain_events:,} events, best of "
              f"{args.rounds} rounds, ratio to audit off)\n")
        print("| setting | events/s (each round) | best | ratio | connector CPU s | audits during the drain |")
        print("|---|---|---:|---:|---:|---:|")
        for name, _ in settings:
            rate, cpu, audits = max(results[name])
            each = " / ".join(f"{r:,.0f}" for r, _, _ in results[name])
            print(f"| {name} | {each} | {rate:,.0f} | {rate / base:.3f} | {cpu:.1f} | {audits} |")
        delete_topic(drain_topic)
    finally:
        delete_topic(topic)
        matching_keys("bench:*", "del")
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
