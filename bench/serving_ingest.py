"""Reads while the connector ingests: the tail of online reads served by a connector that is
draining a backlog at full speed at the same time (run it through `bash bench/serving.sh ingest`).

Each round, for each binary given (default: the release build; give two to compare builds
or settings on the same box, their rounds alternated):
  1. 100,000 entities are written through the connector (bench/serving: Feast layout), which
     is then stopped;
  2. a backlog of 1,000,000 events over the same entities is published, and the connector
     started again: as soon as its serving listener accepts, serving_load (bench/programs)
     sends 1-entity `POST /get-online-features` requests at 1,000/s (open loop) for the window,
     while the connector drains the backlog into Redis;
  3. latency percentiles of those reads, the time the drain took (from the start of the
     reads), the connector's CPU; keys and topic are deleted.
Prints one table.
"""

import argparse
import os
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from run import BIN, Process, delete_topic, ensure_namespace, free_port
from serving import (BENCH, FEATURES, KEY, KEY_PREFIX, SERVING, VIEW, acked_by_every_lane, loadgen, log,
                     parse_seconds, project_keys, wait_until)


def accepts(port):
    with socket.create_connection(("127.0.0.1", port), timeout=0.2):
        return True


def one_round(binary, args, work, threads):
    project = f"fcingest_{uuid.uuid4().hex[:6]}"
    topic = f"persistent://public/bench/serving-ingest-{uuid.uuid4().hex[:8]}"
    http_port, serving_port = free_port(), free_port()
    env = dict(os.environ, BENCH_TOPIC=topic, BENCH_FEAST_PROJECT=project, RUST_LOG="warn",
               FC_HTTP_BIND=f"127.0.0.1:{http_port}", FC_SERVING_BIND=f"127.0.0.1:{serving_port}",
               BENCH_SERVING_THREADS=str(threads), FC_INSTANCE_ID="serving-ingest")
    config = ["--root", str(BENCH), "--connectors", str(SERVING / "connectors"),
              "--config", str(SERVING / "service.yaml")]

    def produce(count):
        subprocess.run([str(BIN), "produce", *config, "--pipeline", VIEW, "--topic", topic,
                        "--count", str(count), "--entities", str(args.entities), "--batch", "100",
                        "--producers", "4"], env=env, check=True, stdout=subprocess.DEVNULL,
                       stderr=open(work / "produce.log", "a"))

    try:
        produce(args.entities)
        connector = Process([str(binary), "run", *config], env=env, log_path=work / "first.log")
        wait_until("the entities to be written", lambda: acked_by_every_lane(http_port) >= args.entities, timeout=300)
        connector.stop()
        produce(args.events)
        connector = Process([str(binary), "run", *config], env=env, log_path=work / "drain.log")
        wait_until("the serving listener", lambda: accepts(serving_port), timeout=60, every=0.01)
        started = time.time()
        cpu_before = connector.cpu_seconds()
        reads = loadgen("feast", f"127.0.0.1:{serving_port}", 1, args, {}, args.window_s,
                        rate=args.rate, project=project)
        wait_until("the backlog to drain", lambda: acked_by_every_lane(http_port) >= args.events, timeout=600, every=0.05)
        drained = time.time() - started
        cpu = connector.cpu_seconds() - cpu_before
        connector.stop()
        return {"reads": reads, "drained_s": drained, "cpu_s": cpu}
    finally:
        project_keys(project, "del")
        delete_topic(topic)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("binaries", nargs="*", type=Path, default=[BIN])
    ap.add_argument("--threads", default="1", help="serving.threads per binary, comma-separated (one for all)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--entities", type=int, default=100_000)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--rate", type=int, default=1_000)
    ap.add_argument("--window", default="4s", help="how long the reads are sent")
    ap.add_argument("--connections", type=int, default=16)
    args = ap.parse_args()
    args.window_s = parse_seconds(args.window)
    args.warmup = "0s"
    threads = [int(t) for t in args.threads.split(",")]
    contenders = [(b, threads[i] if i < len(threads) else threads[-1]) for i, b in enumerate(args.binaries)]
    ensure_namespace()
    work = Path(tempfile.mkdtemp(prefix="fc-serving-ingest-"))
    rows = []
    for round_ in range(args.rounds):
        for binary, n in contenders:
            row = one_round(binary, args, work, n)
            r = row["reads"]
            rows.append((binary, n, row))
            log(f"round {round_ + 1}: {binary} (serving.threads {n}): p50 {r['p50_ms']} / p90 {r['p90_ms']} / "
                f"p99 {r['p99_ms']} / p99.9 {r['p999_ms']} / max {r['max_ms']} ms, {r['requests_per_s']:.0f} reads/s, "
                f"{sum(r['errors'].values()) if r['errors'] else 0} errors; "
                f"{args.events:,} events drained in {row['drained_s']:.2f} s")
    print(f"Reads during ingest: 1-entity `POST /get-online-features` × {len(FEATURES)} features "
          f"({KEY} {KEY_PREFIX}0..), {args.rate:,}/s for {args.window} from the moment the serving listener "
          f"accepts, while the connector drains {args.events:,} events over {args.entities:,} entities.\n")
    print("| binary | serving.threads | p50 / p90 / p99 / p99.9 / max ms | reads/s | errors | drained in s | connector CPU s |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for binary, n, row in rows:
        r = row["reads"]
        print(f"| `{binary}` | {n} | {r['p50_ms']:.2f} / {r['p90_ms']:.2f} / {r['p99_ms']:.2f} / {r['p999_ms']:.2f} / "
              f"{r['max_ms']:.2f} | {r['requests_per_s']:,.0f} | {sum(r['errors'].values()) if r['errors'] else 0} | "
              f"{row['drained_s']:.2f} | {row['cpu_s']:.2f} |")


if __name__ == "__main__":
    main()
