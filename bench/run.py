"""Side-by-side benchmark on real services (run it through bench/run.sh).

One run, same events, same Redis:
  1. closed loop: N Zipf-keyed events pre-published; each contender drains them:
     the connector (release build, both sinks), a plain Python consumer
     (pulsar-client + redis + pyarrow), Feast's write_to_online_store, and the ceilings:
     redis-benchmark pipelined HSET of the same 12 fields, the broker's produce rate
     (our producer) and consume+ack rate (pulsar-rs, no processing);
  2. open loop: the connector running while events arrive at a fixed rate, then a 10x
     burst, then the base rate again; freshness (send time and Pulsar publish time -> value
     visible in Redis) is read back by an independent probe (examples/freshness_probe.rs),
     which reads the topic on its own subscription to learn the publish times.
Prints a table and writes it to bench/results/latest.md.
"""

import argparse
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
BIN = ROOT / "target/release/feature-connector"
EXAMPLES = ROOT / "target/release/examples"
ADMIN = os.environ.get("PULSAR_ADMIN_URL", "http://127.0.0.1:8080")
PULSAR = os.environ.get("PULSAR_URL", "pulsar://127.0.0.1:6650")
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")
# The load generator's batching (set from --batch/--producers in main).
LOAD_FLAGS = ["--batch", "100", "--producers", "4"]
CORES = os.cpu_count()
TICKS = os.sysconf("SC_CLK_TCK")


def log(message):
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def ensure_namespace():
    """Events must outlive the first contender's acknowledgements: infinite retention."""
    base = f"{ADMIN}/admin/v2/namespaces/public/bench"
    try:
        urllib.request.urlopen(urllib.request.Request(base, method="PUT"), timeout=10)
    except urllib.error.HTTPError as e:
        if e.code != 409:
            raise
    request = urllib.request.Request(
        f"{base}/retention", method="POST", headers={"Content-Type": "application/json"},
        data=json.dumps({"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}).encode())
    urllib.request.urlopen(request, timeout=10)


def delete_topic(topic):
    request = urllib.request.Request(
        f"{ADMIN}/admin/v2/persistent/{topic.removeprefix('persistent://')}?force=true", method="DELETE")
    try:
        urllib.request.urlopen(request, timeout=30)
    except Exception as e:
        log(f"could not delete {topic}: {e}")


def admin_json(path):
    with urllib.request.urlopen(f"{ADMIN}/admin/v2/persistent/{path}", timeout=10) as r:
        return json.load(r)


def topic_stats(topic):
    return admin_json(topic.removeprefix("persistent://") + "/stats")


def backlog(topic, subscription):
    try:
        return topic_stats(topic)["subscriptions"][subscription]["msgBacklog"]
    except Exception:
        return None


class Process:
    """A child process whose RSS and CPU are sampled from /proc."""

    def __init__(self, argv, env=None, log_path=None, stdin=None):
        self.log_file = open(log_path, "w") if log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(argv, env=env, stdout=self.log_file, stderr=self.log_file,
                                     stdin=stdin if stdin is not None else subprocess.DEVNULL, text=True)
        self.rss_samples = []

    def sample(self):
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        self.rss_samples.append(int(line.split()[1]) / 1024)
        except FileNotFoundError:
            pass

    def cpu_seconds(self):
        try:
            fields = open(f"/proc/{self.proc.pid}/stat").read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / TICKS
        except FileNotFoundError:
            return None

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def connector_env(topic, subscription, offline_dir, http_port):
    env = dict(os.environ)
    env.update({
        "BENCH_TOPIC": topic,
        "BENCH_SUBSCRIPTION": subscription,
        "BENCH_OFFLINE_URL": f"file://{offline_dir}",
        "FC_HTTP_BIND": f"127.0.0.1:{http_port}",
        "RUST_LOG": "warn",
        "FC_INSTANCE_ID": "bench",
    })
    return env


def produce(topic, args_extra, env):
    argv = [str(BIN), "produce", "--root", str(BENCH), "--pipeline", "bench", "--topic", topic,
            "--entities", str(ENTITIES), "--zipf", "1.1"] + LOAD_FLAGS + args_extra
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    match = re.search(r"in ([\d.]+) s \((\d+) events/s\)", out)
    return float(match.group(1)), int(match.group(2))


def wait_ready(port, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.05)
    raise RuntimeError("the connector did not become ready")


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dir_bytes(path):
    return sum(f.stat().st_size for f in Path(path).rglob("*.parquet"))


def run_connector_closed_loop(topic, events, work, subscription="bench"):
    port = free_port()
    offline = work / "offline-connector"
    env = connector_env(topic, subscription, offline, port)
    connector = Process([str(BIN), "run", "--root", str(BENCH)], env=env, log_path=work / "connector.log",
                        stdin=subprocess.DEVNULL)
    wait_ready(port)
    started = time.time()
    online_done = None
    while True:
        connector.sample()
        online = backlog(topic, f"{subscription}-online")
        offline_backlog = backlog(topic, f"{subscription}-offline")
        if online == 0 and online_done is None:
            online_done = time.time() - started
        if online == 0 and offline_backlog == 0:
            break
        if connector.proc.poll() is not None:
            raise RuntimeError(f"connector exited: see {work / 'connector.log'}")
        time.sleep(0.1)
    seconds = time.time() - started
    cpu = connector.cpu_seconds()
    connector.stop()
    rss = connector.rss_samples
    return {
        "contender": "feature-connector (both sinks acked)",
        "events": events,
        "seconds": seconds,
        "online_seconds": online_done,
        "events_per_s": events / seconds,
        "cpu_seconds": cpu,
        "rss_peak_mb": max(rss),
        "rss_steady_mb": sorted(rss)[len(rss) // 2],
        "parquet_bytes": dir_bytes(offline),
    }


def run_json(argv, env=None, timeout=1800):
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"{argv[1]} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def redis_benchmark(requests):
    fields = []
    for i in range(12):
        fields += [f"f{i}", "1234567.25"]
    argv = ["redis-benchmark", "-q", "-P", "64", "-c", "4", "-n", str(requests), "-r", "100000",
            "HSET", "rb:bench:__rand_int__"] + fields
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    rate = float(re.findall(r"([\d.]+) requests per second", out)[-1])
    return {"contender": "redis-benchmark HSET 12 fields, -P 64", "events": requests, "events_per_s": rate}


def percentile(values, p):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


def run_open_loop(schedule, work):
    topic = f"persistent://public/bench/open-{uuid.uuid4().hex[:8]}"
    port = free_port()
    env = connector_env(topic, "bench", work / "offline-open", port)
    # Create the topic with the schema first so the connector can subscribe before traffic.
    produce(topic, ["--count", "1"], env)
    connector = Process([str(BIN), "run", "--root", str(BENCH)], env=env, log_path=work / "connector-open.log",
                        stdin=subprocess.DEVNULL)
    wait_ready(port)
    probe_out = work / "freshness.csv"
    probe = subprocess.Popen([str(EXAMPLES / "freshness_probe"), REDIS_URL, "bench:bench:*", "10", str(probe_out),
                              PULSAR, topic],
                             stdin=subprocess.PIPE, stderr=open(work / "probe.log", "w"))
    time.sleep(1)
    phases = [(int(r), float(d.rstrip("s"))) for r, d in (p.split(":") for p in schedule.split(","))]
    events = sum(int(r * d) for r, d in phases)
    producer = subprocess.Popen(
        [str(BIN), "produce", "--root", str(BENCH), "--pipeline", "bench", "--topic", topic,
         "--entities", str(ENTITIES), "--zipf", "1.1", *LOAD_FLAGS, "--live-event-time",
         "--rate-schedule", schedule], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while producer.poll() is None:
        connector.sample()
        time.sleep(0.25)
    produced = producer.stdout.read()
    deadline = time.time() + 600
    while backlog(topic, "bench-online") not in (0,) and time.time() < deadline:
        connector.sample()
        time.sleep(0.25)
    time.sleep(1)
    probe.stdin.close()
    probe.wait(timeout=30)
    cpu = connector.cpu_seconds()
    connector.stop()
    samples = []  # (wall ms, send -> visible ms, publish -> visible ms or None)
    for row in csv.reader(open(probe_out)):
        if len(row) == 3 and row[0].isdigit():
            samples.append((int(row[0]), int(row[1]), int(row[2]) if row[2] else None))
    # Each sample is placed in the phase during which its event was sent (event time = send
    # time), using the send windows and achieved rates the producer reports.
    sent = [(int(n), int(a), int(b), int(r)) for n, a, b, r in
            re.findall(r"phase \d+: (\d+) events sent from (\d+) to (\d+) \(epoch ms\), (\d+) events/s", produced)]
    results = []
    for (rate, duration), (events_sent, first, last, achieved) in zip(phases, sent):
        in_phase = [(f, p) for w, f, p in samples if first <= w - f <= last]
        window = [f for f, _ in in_phase]
        published = [p for _, p in in_phase if p is not None]
        results.append({"phase": f"asked {rate:,} ev/s for {duration:.0f} s; sent {events_sent:,} at {achieved:,} ev/s",
                        "samples": len(window), "p50": percentile(window, 50), "p99": percentile(window, 99),
                        "p999": percentile(window, 99.9), "max": max(window) if window else None,
                        "publish_samples": len(published), "publish_p50": percentile(published, 50),
                        "publish_p99": percentile(published, 99), "publish_p999": percentile(published, 99.9),
                        "publish_max": max(published) if published else None})
    return {"phases": results, "produced": produced.strip().splitlines()[-1], "events": events, "cpu_seconds": cpu,
            "rss_peak_mb": max(connector.rss_samples)}


def broker_delivery_latency(rate, seconds, work):
    """The broker's own share of freshness: publish -> delivered to a bare consumer."""
    topic = f"persistent://public/bench/latency-{uuid.uuid4().hex[:8]}"
    env = connector_env(topic, "bench", work / "unused", 0)
    produce(topic, ["--count", "1"], env)
    events = int(rate * seconds)
    consumer = subprocess.Popen([str(EXAMPLES / "raw_consume"), PULSAR, topic, str(events + 1)],
                                stdout=subprocess.PIPE, text=True)
    time.sleep(1)
    produce(topic, ["--count", str(events), "--rate", str(rate), "--live-event-time"], env)
    out, _ = consumer.communicate(timeout=120)
    delete_topic(topic)
    return json.loads(out.strip().splitlines()[-1])


def only(args, work):
    """One part of the benchmark, for before/after comparisons while profiling."""
    if args.only == "open":
        result = run_open_loop(args.schedule, work)
    else:
        topic = args.reuse_topic or f"persistent://public/bench/closed-{uuid.uuid4().hex[:8]}"
        if not args.reuse_topic:
            log(f"publishing {args.events} events to {topic}")
            produce(topic, ["--count", str(args.events)], connector_env(topic, "bench", work / "o", 0))
        # The broker's counters restart with it: a reused topic holds --events events.
        events = args.events
        result = run_connector_closed_loop(topic, events, work, subscription=f"bench-{uuid.uuid4().hex[:6]}")
        result["topic"] = topic
        result["cpu_us_per_event"] = result["cpu_seconds"] * 1e6 / events
    print(json.dumps(result))
    log(f"work dir {work}")


def fmt(value, digits=0):
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def main():
    global ENTITIES
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--entities", type=int, default=100_000)
    ap.add_argument("--feast-events", type=int, default=100_000)
    ap.add_argument("--schedule", default="20000:20s,200000:10s,20000:10s")
    ap.add_argument("--batch", type=int, default=100, help="load generator: messages per producer batch")
    ap.add_argument("--producers", type=int, default=4, help="load generator: producers side by side")
    ap.add_argument("--python", required=True, help="the venv python with the peers' packages")
    ap.add_argument("--out", type=Path, default=BENCH / "results/latest.md")
    ap.add_argument("--only", choices=["closed", "open"],
                    help="profiling aid: only the connector's closed loop, or only the open loop "
                         "(prints JSON, writes no table)")
    ap.add_argument("--reuse-topic", help="with --only closed: drain this already published topic "
                                          "(holding --events events) under a new subscription "
                                          "instead of publishing")
    args = ap.parse_args()
    ENTITIES = args.entities
    LOAD_FLAGS[:] = ["--batch", str(args.batch), "--producers", str(args.producers)]
    work = Path(tempfile.mkdtemp(prefix="fc-bench-"))
    ensure_namespace()
    if args.only:
        only(args, work)
        return
    topic = f"persistent://public/bench/closed-{uuid.uuid4().hex[:8]}"
    env = connector_env(topic, "bench", work / "offline", 0)
    rows = []

    log(f"publishing {args.events} events ({args.entities} entities, Zipf 1.1) to {topic}")
    seconds, rate = produce(topic, ["--count", str(args.events)], env)
    rows.append({"contender": f"broker: produce (our producer: {args.producers} producers, batches ≤ {args.batch}, 1 ms delay)", "events": args.events,
                 "seconds": seconds, "events_per_s": rate})
    stats = topic_stats(topic)
    raw_bytes = stats.get("bytesInCounter")

    log("broker consume ceiling (pulsar-rs, consume + ack, no processing)")
    rows.append(run_json([str(EXAMPLES / "raw_consume"), PULSAR, topic, str(args.events)]))

    log("feature-connector, release build, both sinks")
    connector = run_connector_closed_loop(topic, args.events, work)
    rows.append({"contender": "feature-connector (online lane acked)", "events": args.events,
                 "seconds": connector["online_seconds"],
                 "events_per_s": args.events / connector["online_seconds"]})
    rows.append(connector)

    log("Python consumer (pulsar-client + redis + pyarrow)")
    rows.append(run_json([args.python, str(BENCH / "peers/python_consumer.py"), "--topic", topic,
                          "--subscription", "pybench", "--events", str(args.events),
                          "--parquet-dir", str(work / "offline-python")]))

    log(f"Feast write_to_online_store ({args.feast_events} rows)")
    rows.append(run_json([args.python, str(BENCH / "peers/feast_writer.py"), "--topic", topic,
                          "--events", str(args.feast_events), "--repo-dir", str(work / "feast-repo"),
                          # A new project: Feast skips rows not newer than what it stored.
                          "--project", f"febench_{uuid.uuid4().hex[:8]}"]))

    log("redis-benchmark ceiling")
    rows.append(redis_benchmark(1_000_000))

    log("broker delivery latency at 20,000 ev/s (bare consumer)")
    broker_latency = broker_delivery_latency(20_000, 10, work)

    log(f"open loop: {args.schedule}")
    open_loop = run_open_loop(args.schedule, work)
    delete_topic(topic)

    ours = connector["events_per_s"]
    by_name = {r["contender"]: r for r in rows}
    lines = [
        f"Benchmark {time.strftime('%Y-%m-%d %H:%M')} UTC, {CORES} cores "
        f"(broker, Redis and every contender on the same machine); {args.events:,} events, "
        f"{args.entities:,} entities (Zipf 1.1), 10 features of mixed types.",
        "",
        "| contender | events | seconds | events/s | connector (both sinks) ÷ this | CPU s | CPU µs/event | RSS peak MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        cpu = r.get("cpu_seconds")
        lines.append(
            f"| {r['contender']} | {fmt(r['events'])} | {fmt(r.get('seconds'), 2)} | {fmt(r['events_per_s'])} "
            f"| {fmt(ours / r['events_per_s'], 2)} | {fmt(cpu, 1)} | "
            f"{fmt(cpu * 1e6 / r['events'] if cpu else None, 1)} | {fmt(r.get('rss_peak_mb'))} |")
    lines += [
        "",
        f"Connector: online lane drained after {fmt(connector['online_seconds'], 2)} s, both after "
        f"{fmt(connector['seconds'], 2)} s; RSS steady {fmt(connector['rss_steady_mb'])} MB, "
        f"peak {fmt(connector['rss_peak_mb'])} MB; Parquet {fmt(connector['parquet_bytes'])} bytes vs "
        f"{fmt(raw_bytes)} bytes published (broker bytesInCounter), ratio "
        f"{fmt(connector['parquet_bytes'] / raw_bytes if raw_bytes else None, 2)}.",
        "",
        f"Open loop, connector running, freshness read back by examples/freshness_probe.rs "
        f"(every 10th write read back; the two freshness columns are explained below the broker line); "
        f"producer: {open_loop['produced']}; connector CPU {fmt(open_loop['cpu_seconds'], 1)} s "
        f"for {open_loop['events']:,} events, RSS peak {fmt(open_loop['rss_peak_mb'])} MB:",
        "",
        f"The broker alone (20,000 ev/s for 10 s, the same producers, a bare pulsar-rs consumer, no "
        f"connector): publish -> delivered p50 {broker_latency['delivery_p50_ms']} ms, "
        f"p99 {broker_latency['delivery_p99_ms']} ms.",
        "",
        "Send -> visible counts from the event time (the wall clock when the load generator made "
        "the event, so it includes the producer client's batching); publish -> visible from the "
        "Pulsar publish time (stamped when the batch leaves the client), which the probe learns "
        "on a subscription of its own: the broker's and the connector's share.",
        "",
        "| phase | samples | send→visible p50 / p99 / p99.9 / max ms | publish→visible p50 / p99 / p99.9 / max ms |",
        "|---|---:|---:|---:|",
    ]
    for p in open_loop["phases"]:
        lines.append(f"| {p['phase']} | {fmt(p['samples'])} | {fmt(p['p50'])} / {fmt(p['p99'])} / "
                     f"{fmt(p['p999'])} / {fmt(p['max'])} | {fmt(p['publish_p50'])} / {fmt(p['publish_p99'])} / "
                     f"{fmt(p['publish_p999'])} / {fmt(p['publish_max'])} |")
    report = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)
    print(report)
    log(f"work dir {work} (logs, CSV); table in {args.out}")


if __name__ == "__main__":
    main()
