"""Side-by-side benchmark on real services (run it through bench/run.sh).

One run, same events, same Redis:
  1. closed loop: N Zipf-keyed events pre-published; each contender drains them on a fresh
     subscription: the connector (release build, both sinks) with one subscription feeding
     both sinks (shared) and with a subscription per sink; bare readers that decode nothing
     (pulsar-rs acknowledging every message; pulsar-rs tuned: a deep receiver queue and
     cumulative acknowledgements; the official Java client with either queue); a plain
     Python consumer (pulsar-client + redis + pyarrow); Feast's write_to_online_store; and
     Redis's ceilings: pipelined plain HSETs of as many rows as the connector wrote, and
     redis-benchmark. For each, the CPU of the contender, of redis-server and of the broker
     (utime + stime from /proc) and the writes Redis counted (INFO commandstats);
  2. open loop: the connector running while events arrive at a fixed rate, then a 10x
     burst, then the base rate again; freshness (send time and Pulsar publish time -> value
     visible in Redis) is read back by an independent probe
     (bench/programs/src/freshness_probe.rs), which reads the topic on its own subscription
     to learn the publish times;
  3. the ingest targets (`targets` below: speed, CPU, freshness and memory against the
     contenders), evaluated on this run's numbers.
Prints the tables and writes them to bench/results/latest.md.
"""

import argparse
import csv
import json
import os
import re
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
# FC_BIN: another build of the connector (its feature-connector-loadgen beside it), for A/B runs.
BIN = Path(os.environ.get("FC_BIN", ROOT / "target/dist/feature-connector"))
# The benchmark programs (bench/programs), built by bench/run.sh.
PROGRAMS = ROOT / "target/dist"
STATE = Path(os.environ.get("FC_STATE_DIR", ROOT / ".services"))
ADMIN = os.environ.get("PULSAR_ADMIN_URL", "http://127.0.0.1:8080")
PULSAR = os.environ.get("PULSAR_URL", "pulsar://127.0.0.1:6650")
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")
# The load generator's batching (set from --batch/--producers in main).
LOAD_FLAGS = ["--batch", "100", "--producers", "4"]
CORES = os.cpu_count()
TICKS = os.sysconf("SC_CLK_TCK")
# Cumulative acknowledgement interval of the tuned readers.
ACK_EVERY = 1_000
# The keys the contenders write. Feast's binary keys are left alone: each Feast run has a
# project of its own, so it starts on empty keys anyway.
BENCH_KEYS = ["bench:*", "pybench:*", "hsetbase:*", "rb:bench:*"]
# Commands this script sends Redis itself, left out of the contenders' command counts.
HARNESS_COMMANDS = {"info", "scan", "del", "ping"}
# How often the closed loop reads the connector's acknowledgement counts.
POLL_SECONDS = 0.05
# Messages each lane acknowledged, by the `sink` label of the connector's /metrics.
ACKED = re.compile(r'^feature_connector_messages_acked_total\{[^}]*sink="([^"]+)"[^}]*\} (\S+)$', re.M)
RECEIVED = re.compile(r'^feature_connector_messages_received_total\{[^}]*\} (\S+)$', re.M)
JAVA_CLIENT_VERSION = re.search(r"<pulsar.version>(.*)</pulsar.version>",
                                (BENCH / "peers/java-consumer/pom.xml").read_text()).group(1)


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


def backlogs(topic, subscriptions):
    """Each subscription's backlog (None while it does not exist), from one stats call."""
    try:
        stats = topic_stats(topic)["subscriptions"]
    except Exception:
        stats = {}
    return [stats.get(s, {}).get("msgBacklog") for s in subscriptions]


def backlog(topic, subscription):
    return backlogs(topic, [subscription])[0]


def lane_subscriptions(subscription, delivery):
    """The connector's subscriptions for `source.delivery`, the online sink's first."""
    if delivery == "shared":
        return [subscription]
    return [f"{subscription}-online", f"{subscription}-offline"]


def redis_cli(*args):
    return subprocess.run(["redis-cli", "-u", REDIS_URL, *args], capture_output=True, text=True,
                          check=True).stdout


def redis_info(section):
    """INFO `section` as {field: value}."""
    return dict(line.split(":", 1) for line in redis_cli("info", section).splitlines()
                if ":" in line and not line.startswith("#"))


def command_stats():
    """INFO commandstats as {command: (calls, µs)}."""
    stats = {}
    for name, value in redis_info("commandstats").items():
        fields = dict(field.split("=") for field in value.split(","))
        stats[name.removeprefix("cmdstat_")] = (int(fields["calls"]), int(fields["usec"]))
    return stats


def proc_cpu_seconds(pid):
    """utime + stime of every thread of `pid` (children not included), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS
    except (FileNotFoundError, TypeError):
        return None


class Services:
    """The broker's and redis-server's CPU, and Redis's command counts, around a contender."""

    # One entity's row stored = one HSET, whether a client sends it or a script runs it
    # (commandstats counts the commands scripts run; the connector packs many entities into
    # one EVALSHA of its latest-wins script, which skips the HSET of a row not newer).
    SCRIPT_CALLS = ("evalsha", "eval", "fcall", "evalsha_ro", "eval_ro", "fcall_ro")
    HASH_WRITES = ("hset", "hmset")

    def __init__(self):
        self.floors = {}
        self.redis_pid = int(redis_info("server")["process_id"])
        self.broker_pid = self._broker_pid()
        if self.broker_pid is None:
            log(f"no broker pid in {STATE / 'pulsar.pid'}: broker CPU is not reported")

    @staticmethod
    def _broker_pid():
        """The standalone broker scripts/services.sh started (its pid file, checked)."""
        try:
            pid = int((STATE / "pulsar.pid").read_text().strip())
            if b"PulsarStandaloneStarter" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except (OSError, ValueError):
            pass
        return None

    def snapshot(self):
        return {
            "at": time.monotonic(),
            "broker": proc_cpu_seconds(self.broker_pid),
            "redis": proc_cpu_seconds(self.redis_pid),
            "commands": command_stats(),
        }

    def since(self, before):
        """From `before` (a snapshot) to now: the window, the broker's and redis-server's CPU
        seconds, and Redis's commands (calls, µs) with the entity writes among them."""
        now = self.snapshot()
        commands = {}
        for name, (calls, usec) in now["commands"].items():
            calls_before, usec_before = before["commands"].get(name, (0, 0))
            if calls > calls_before and name not in HARNESS_COMMANDS:
                commands[name] = (calls - calls_before, usec - usec_before)
        broker = now["broker"] - before["broker"] if None not in (now["broker"], before["broker"]) else None
        return {
            "window_s": now["at"] - before["at"],
            "broker_cpu_s": broker,
            "redis_cpu_s": now["redis"] - before["redis"],
            "commands": commands,
            "script_calls": sum(commands.get(name, (0, 0))[0] for name in self.SCRIPT_CALLS),
            "redis_writes": sum(commands.get(name, (0, 0))[0] for name in self.HASH_WRITES),
        }

    def measure_floors(self, seconds=5.0):
        """What the broker and redis-server burn per second serving nobody; each contender's
        figures are net of it over its run (see `net_cpu`)."""
        before = self.snapshot()
        time.sleep(seconds)
        usage = self.since(before)
        self.floors = {service: None if usage[f"{service}_cpu_s"] is None
                       else usage[f"{service}_cpu_s"] / usage["window_s"] for service in ("broker", "redis")}

    def net_cpu(self, row, service):
        """`service`'s CPU seconds over the contender's run less its floor over that window."""
        cpu, floor = row.get(f"{service}_cpu_s"), self.floors[service]
        return cpu - floor * row["window_s"] if cpu is not None and floor is not None else None

    def clear_bench_keys(self):
        """Deletes every key a contender wrote: latest-wins makes a write of an older (or the
        same) event time into a no-op, so each contender must start on empty keys. DEL, not
        UNLINK: freeing in the background would land on the next contender's CPU."""
        for pattern in BENCH_KEYS:
            keys = self.keys(pattern)
            for start in range(0, len(keys), 1000):
                redis_cli("del", *keys[start:start + 1000])

    @staticmethod
    def keys(pattern):
        keys, cursor = [], "0"
        while True:
            cursor, *found = redis_cli("scan", cursor, "match", pattern, "count", "1000").split()
            keys += found
            if cursor == "0":
                return keys


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
        return proc_cpu_seconds(self.proc.pid)

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def run_measured(argv, log_path, env=None, timeout=1800):
    """Runs `argv` to its end: (stdout, CPU seconds, peak RSS MB) of the whole process from
    exec to exit, start-up included, with the children it waited for (wait4's rusage)."""
    out_path = log_path.with_suffix(".out")
    with open(out_path, "w") as out, open(log_path, "w") as err:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        deadline = time.time() + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.time() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, argv[:2]))} exited with {proc.returncode}:\n"
                           f"{log_path.read_text()[-2000:]}")
    return out_path.read_text(), usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def connector_env(topic, subscription, offline_dir, http_port, delivery="shared"):
    env = dict(os.environ)
    env.update({
        "BENCH_TOPIC": topic,
        "BENCH_SUBSCRIPTION": subscription,
        "BENCH_DELIVERY": delivery,
        "BENCH_OFFLINE_URL": f"file://{offline_dir}",
        "FC_HTTP_BIND": f"127.0.0.1:{http_port}",
        "RUST_LOG": "warn",
        "FC_INSTANCE_ID": "bench",
    })
    return env


def produce_argv(topic, args_extra):
    return [str(BIN), "produce", "--root", str(BENCH), "--pipeline", "bench", "--topic", topic,
            "--entities", str(ENTITIES), "--zipf", "1.1"] + LOAD_FLAGS + args_extra


def produced_rate(out):
    match = re.search(r"in ([\d.]+) s \((\d+) events/s\)", out)
    return float(match.group(1)), int(match.group(2))


def produce(topic, args_extra, env):
    out = subprocess.run(produce_argv(topic, args_extra), env=env, capture_output=True, text=True,
                         check=True).stdout
    return produced_rate(out)


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


def connector_metrics(port):
    """The connector's /metrics text; empty while it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            return r.read().decode()
    except OSError:
        return ""


def connector_acked(port):
    """Messages each lane of the connector acknowledged so far, by its `sink` label."""
    return {sink: float(n) for sink, n in ACKED.findall(connector_metrics(port))}


def connector_received(port):
    """Messages the connector's lanes received so far."""
    return sum(float(n) for n in RECEIVED.findall(connector_metrics(port)))


def wait_first_message(port, connector, timeout=30):
    """When the connector's lanes received their first message. The bare readers time
    themselves from their first message, so the connector is timed from its own: a Failover
    subscription gets nothing for its first second (the broker's
    activeConsumerFailoverDelayTimeMillis, 1,000 by default; an Exclusive one waits ~5 ms)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if connector_received(port) > 0:
            return time.time()
        if connector.proc.poll() is not None:
            raise RuntimeError("connector exited before its first message")
        time.sleep(0.005)
    raise RuntimeError("the connector received nothing")


def run_connector_closed_loop(topic, events, work, services, delivery, subscription):
    """The connector draining `topic` on a new subscription, timed from its first received
    message until every lane's backlog is 0 (every sink has every event durable). CPU (its
    own, the broker's, Redis's) is read at that moment, before it is stopped."""
    port = free_port()
    offline = work / f"offline-{subscription}"
    env = connector_env(topic, subscription, offline, port, delivery)
    subscriptions = lane_subscriptions(subscription, delivery)
    before = services.snapshot()
    connector = Process([str(BIN), "run", "--root", str(BENCH)], env=env,
                        log_path=work / f"connector-{subscription}.log", stdin=subprocess.DEVNULL)
    wait_ready(port)
    ready = time.time()
    started = wait_first_message(port, connector)
    online_done = None
    broker_check = started
    while True:
        connector.sample()
        now = time.time()
        acked = connector_acked(port)
        online = [n for sink, n in acked.items() if "online" in sink]
        if online and online[0] >= events and online_done is None:
            online_done = now - started
        # A stats call costs the broker several ms of CPU: ask it when the connector says
        # every lane acknowledged everything, else only every few seconds (a safety net).
        drained = len(acked) == len(subscriptions) and min(acked.values()) >= events
        if drained or now >= broker_check:
            broker_check = now + 2
            if all(b == 0 for b in backlogs(topic, subscriptions)):
                break
        if connector.proc.poll() is not None:
            raise RuntimeError(f"connector exited: see {work / f'connector-{subscription}.log'}")
        time.sleep(POLL_SECONDS)
    seconds = time.time() - started
    cpu = connector.cpu_seconds()
    usage = services.since(before)
    connector.stop()
    rss = connector.rss_samples
    return {
        "events": events,
        "seconds": seconds,
        "first_message_s": started - ready,
        "online_seconds": online_done,
        "events_per_s": events / seconds,
        "cpu_seconds": cpu,
        "rss_peak_mb": max(rss),
        "rss_steady_mb": sorted(rss)[len(rss) // 2],
        "parquet_bytes": dir_bytes(offline),
        "keys": len(services.keys("bench:bench:*")),
        **usage,
    }


def run_contender(services, label, argv, log_path, env=None, own_cpu=False):
    """Runs a contender that prints one JSON line; adds its CPU and RSS (whole process, unless
    `own_cpu`: then the figures it reports for its measured window stay) and the broker's
    and Redis's CPU and Redis's writes over its run."""
    before = services.snapshot()
    out, cpu, rss = run_measured(argv, log_path, env)
    row = json.loads(out.strip().splitlines()[-1])
    row.update(services.since(before))
    if not own_cpu:
        row.update({"cpu_seconds": cpu, "rss_peak_mb": rss})
    row["contender"] = label
    return row


def redis_benchmark(services, requests, work):
    fields = []
    for i in range(12):
        fields += [f"f{i}", "1234567.25"]
    argv = ["redis-benchmark", "-q", "-P", "64", "-c", "4", "-n", str(requests), "-r", "100000",
            "HSET", "rb:bench:__rand_int__"] + fields
    before = services.snapshot()
    out, cpu, rss = run_measured(argv, work / "redis-benchmark.log")
    rate = float(re.findall(r"([\d.]+) requests per second", out)[-1])
    return {"contender": "redis-benchmark HSET 12 fields, -P 64", "events": requests,
            "seconds": requests / rate, "events_per_s": rate, "cpu_seconds": cpu, "rss_peak_mb": rss,
            **services.since(before)}


def percentile(values, p):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


def run_open_loop(schedule, work, services):
    topic = f"persistent://public/bench/open-{uuid.uuid4().hex[:8]}"
    port = free_port()
    env = connector_env(topic, "bench", work / "offline-open", port)
    services.clear_bench_keys()
    # Create the topic with the schema first so the connector can subscribe before traffic.
    produce(topic, ["--count", "1"], env)
    connector = Process([str(BIN), "run", "--root", str(BENCH)], env=env, log_path=work / "connector-open.log",
                        stdin=subprocess.DEVNULL)
    wait_ready(port)
    probe_out = work / "freshness.csv"
    probe = subprocess.Popen([str(PROGRAMS / "freshness_probe"), REDIS_URL, "bench:bench:*", "10", str(probe_out),
                              PULSAR, topic],
                             stdin=subprocess.PIPE, stderr=open(work / "probe.log", "w"))
    time.sleep(1)
    phases = [(int(r), float(d.rstrip("s"))) for r, d in (p.split(":") for p in schedule.split(","))]
    events = sum(int(r * d) for r, d in phases)
    producer = subprocess.Popen(produce_argv(topic, ["--live-event-time", "--rate-schedule", schedule]),
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while producer.poll() is None:
        connector.sample()
        time.sleep(0.25)
    produced = producer.stdout.read()
    deadline = time.time() + 600
    online = lane_subscriptions("bench", env["BENCH_DELIVERY"])[0]
    while backlog(topic, online) not in (0,) and time.time() < deadline:
        connector.sample()
        time.sleep(0.25)
    time.sleep(1)
    probe.stdin.close()
    probe.wait(timeout=30)
    cpu = connector.cpu_seconds()
    # The connector's own view (sink write and commit times, queue waits) for profiling.
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            (work / "connector-open-metrics.txt").write_bytes(r.read())
    except OSError as e:
        log(f"open loop: could not save the connector's metrics: {e}")
    connector.stop()
    # Retention is infinite in the benchmark's namespace: the topic would stay on disk.
    delete_topic(topic)
    samples = []  # (wall ms, send -> visible ms, publish -> visible ms or None)
    for row in csv.reader(open(probe_out)):
        if len(row) == 3 and row[0].isdigit():
            samples.append((int(row[0]), int(row[1]), int(row[2]) if row[2] else None))
    # Each sample is placed in the phase during which its event was sent (event time = send
    # time), using the send windows and achieved rates the producer reports.
    sent = [(int(n), int(a), int(b), int(r)) for n, a, b, r in
            re.findall(r"phase \d+: (\d+) events sent from (\d+) to (\d+) \(epoch ms\), (\d+) events/s", produced)]
    results = []
    burst = max(range(len(phases)), key=lambda i: phases[i][0])
    from_burst = []  # publish -> visible of events sent from the burst's start to the end
    for index, ((rate, duration), (events_sent, first, last, achieved)) in enumerate(zip(phases, sent)):
        in_phase = [(f, p) for w, f, p in samples if first <= w - f <= last]
        window = [f for f, _ in in_phase]
        published = [p for _, p in in_phase if p is not None]
        if index >= burst:
            from_burst += published
        results.append({"phase": f"asked {rate:,} ev/s for {duration:.0f} s; sent {events_sent:,} at {achieved:,} ev/s",
                        "asked": rate,
                        "samples": len(window), "p50": percentile(window, 50), "p99": percentile(window, 99),
                        "p999": percentile(window, 99.9), "max": max(window) if window else None,
                        "publish_samples": len(published), "publish_p50": percentile(published, 50),
                        "publish_p99": percentile(published, 99), "publish_p999": percentile(published, 99.9),
                        "publish_max": max(published) if published else None})
    return {"phases": results, "produced": produced.strip().splitlines()[-1], "events": events, "cpu_seconds": cpu,
            "rss_peak_mb": max(connector.rss_samples), "burst_onward_publish_p99": percentile(from_burst, 99)}


def broker_delivery_latency(rate, seconds, work):
    """The broker's own share of freshness: publish -> delivered to a bare consumer."""
    topic = f"persistent://public/bench/latency-{uuid.uuid4().hex[:8]}"
    env = connector_env(topic, "bench", work / "unused", 0)
    produce(topic, ["--count", "1"], env)
    events = int(rate * seconds)
    consumer = subprocess.Popen([str(PROGRAMS / "raw_consume"), PULSAR, topic, str(events + 1)],
                                stdout=subprocess.PIPE, text=True)
    time.sleep(1)
    produce(topic, ["--count", str(events), "--rate", str(rate), "--live-event-time"], env)
    out, _ = consumer.communicate(timeout=120)
    delete_topic(topic)
    return json.loads(out.strip().splitlines()[-1])


def only(args, work):
    """One part of the benchmark, for before/after comparisons while profiling."""
    services = Services()
    if args.only == "open":
        result = run_open_loop(args.schedule, work, services)
    else:
        topic = args.reuse_topic or f"persistent://public/bench/closed-{uuid.uuid4().hex[:8]}"
        if not args.reuse_topic:
            log(f"publishing {args.events} events to {topic}")
            produce(topic, ["--count", str(args.events)], connector_env(topic, "bench", work / "o", 0))
        # The broker's counters restart with it: a reused topic holds --events events.
        events = args.events
        services.clear_bench_keys()
        result = run_connector_closed_loop(topic, events, work, services, args.delivery,
                                           f"bench-{uuid.uuid4().hex[:6]}")
        result["topic"] = topic
        result["cpu_us_per_event"] = result["cpu_seconds"] * 1e6 / events
    print(json.dumps(result))
    log(f"work dir {work}")


def fmt(value, digits=0):
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def per_million(seconds, count):
    """CPU seconds per million of `count` = µs each."""
    return seconds * 1e6 / count if seconds is not None and count else None


def ratio(a, b):
    return a / b if a is not None and b else None


def verdict(holds):
    return "–" if holds is None else ("holds" if holds else "does not hold")


def at_most(value, limit):
    return None if value is None or limit is None else value <= limit


def at_least(value, limit):
    return None if value is None or limit is None else value >= limit


def main():
    global ENTITIES
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--entities", type=int, default=100_000)
    ap.add_argument("--feast-events", type=int, default=100_000)
    ap.add_argument("--schedule", default="20000:20s,200000:10s,20000:10s")
    ap.add_argument("--batch", type=int, default=100, help="load generator: messages per producer batch")
    ap.add_argument("--producers", type=int, default=4, help="load generator: producers side by side")
    ap.add_argument("--tuned-queue", type=int, default=20_000,
                    help="receiver queue of the tuned readers and the Python consumer")
    ap.add_argument("--python", required=True, help="the venv python with the peers' packages")
    ap.add_argument("--java-classpath",
                    help="classpath of the Java contender (bench/peers/java-consumer/build.sh); "
                         "needed unless --only")
    ap.add_argument("--out", type=Path, default=BENCH / "results/latest.md")
    ap.add_argument("--only", choices=["closed", "open"],
                    help="profiling aid: only the connector's closed loop, or only the open loop "
                         "(prints JSON, writes no table)")
    ap.add_argument("--delivery", choices=["shared", "per_sink"], default="shared",
                    help="with --only closed: the connector's source.delivery")
    ap.add_argument("--reuse-topic", help="with --only closed: drain this already published topic "
                                          "(holding --events events) under a new subscription "
                                          "instead of publishing")
    args = ap.parse_args()
    if not args.only and not args.java_classpath:
        ap.error("--java-classpath is needed for the full run")
    ENTITIES = args.entities
    LOAD_FLAGS[:] = ["--batch", str(args.batch), "--producers", str(args.producers)]
    work = Path(tempfile.mkdtemp(prefix="fc-bench-"))
    ensure_namespace()
    if args.only:
        only(args, work)
        return
    services = Services()
    queue = args.tuned_queue
    n = args.events
    topic = f"persistent://public/bench/closed-{uuid.uuid4().hex[:8]}"
    env = connector_env(topic, "bench", work / "offline", 0)
    rows = {}

    def add(key, row):
        rows[key] = row
        log(f"  {row['contender']}: {fmt(row['events_per_s'])} events/s")
        return row

    log(f"publishing {n} events ({args.entities} entities, Zipf 1.1) to {topic}")
    before = services.snapshot()
    out, cpu, rss = run_measured(produce_argv(topic, ["--count", str(n)]), work / "produce.log", env)
    seconds, rate = produced_rate(out)
    add("produce", {"contender": f"broker: produce (our producer: {args.producers} producers, batches ≤ {args.batch}, "
                                 f"1 ms delay)", "events": n, "seconds": seconds, "events_per_s": rate,
                    "cpu_seconds": cpu, "rss_peak_mb": rss, **services.since(before)})
    raw_bytes = topic_stats(topic).get("bytesInCounter")
    services.measure_floors()

    log("bare readers: pulsar-rs, then the official Java client")
    add("raw", run_contender(services, "pulsar-rs, ack per message, queue 1,000",
                             [str(PROGRAMS / "raw_consume"), PULSAR, topic, str(n)], work / "raw-consume.log"))
    add("tuned", run_contender(services, f"pulsar-rs tuned reader, queue {queue:,}, cumulative ack every {ACK_EVERY:,}",
                               [str(PROGRAMS / "tuned_consume"), PULSAR, topic, str(n), str(queue), str(ACK_EVERY)],
                               work / "tuned-consume.log"))
    for key, java_queue in (("java", 1_000), ("java_tuned", queue)):
        add(key, run_contender(
            services, f"official Java client {JAVA_CLIENT_VERSION}, queue {java_queue:,}, cumulative ack every "
                      f"{ACK_EVERY:,} (CPU incl. JVM start)",
            ["java", "-cp", args.java_classpath, "JavaConsumer", PULSAR, topic, str(n), str(java_queue),
             str(ACK_EVERY)], work / f"java-consumer-{java_queue}.log"))

    for delivery, label in (("shared", "feature-connector, one subscription (shared)"),
                            ("per_sink", "feature-connector, subscription per sink")):
        log(f"{label}: release build, both sinks")
        services.clear_bench_keys()
        result = run_connector_closed_loop(topic, n, work, services, delivery, f"bench-{uuid.uuid4().hex[:6]}")
        add(f"connector_{delivery}", {"contender": label, **result})

    log(f"Python consumer (pulsar-client + redis + pyarrow, queue {queue:,})")
    services.clear_bench_keys()
    add("python", run_contender(
        services, f"Python consumer, queue {queue:,} (pulsar-client + redis-py + pyarrow)",
        [args.python, str(BENCH / "peers/python_consumer.py"), "--topic", topic, "--pulsar-url", PULSAR,
         "--redis-url", REDIS_URL, "--subscription", f"pybench-{uuid.uuid4().hex[:6]}", "--events", str(n),
         "--receiver-queue", str(queue), "--parquet-dir", str(work / "offline-python")],
        work / "python-consumer.log"))

    log(f"Feast write_to_online_store ({args.feast_events} rows)")
    services.clear_bench_keys()
    feast = add("feast", run_contender(
        services, "Feast write_to_online_store (CPU: the write calls only)",
        [args.python, str(BENCH / "peers/feast_writer.py"), "--topic", topic, "--pulsar-url", PULSAR,
         "--events", str(args.feast_events), "--repo-dir", str(work / "feast-repo"),
         # A new project: Feast skips rows not newer than what it stored.
         "--project", f"febench_{uuid.uuid4().hex[:8]}"],
        work / "feast-writer.log", own_cpu=True))
    # It reads the topic with a Reader before its timed part: the broker's work is not its writes'.
    feast["broker_cpu_s"] = None

    shared = rows["connector_shared"]
    log(f"pipelined plain HSET baseline: {shared['redis_writes']} writes over {shared['keys']} keys")
    services.clear_bench_keys()
    add("hset", run_contender(
        services, "pipelined plain HSET, 500 per pipeline (as many rows as the connector wrote)",
        [str(PROGRAMS / "hset_baseline"), REDIS_URL, "hsetbase", str(shared["redis_writes"]),
         str(max(shared["keys"], 1)), "500"], work / "hset-baseline.log"))

    log("redis-benchmark ceiling")
    services.clear_bench_keys()
    add("redis_benchmark", redis_benchmark(services, 1_000_000, work))
    services.clear_bench_keys()

    log("broker delivery latency at 20,000 ev/s (bare consumer)")
    broker_latency = broker_delivery_latency(20_000, 10, work)

    log(f"open loop: {args.schedule}")
    open_loop = run_open_loop(args.schedule, work, services)
    services.clear_bench_keys()
    delete_topic(topic)

    for row in rows.values():
        row["broker_net_s"] = services.net_cpu(row, "broker")
        row["redis_net_s"] = services.net_cpu(row, "redis")
    report = render(args, services.floors, rows, open_loop, broker_latency, raw_bytes)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)
    print(report)
    log(f"work dir {work} (logs, CSV); table in {args.out}")


def command_mix(row):
    """Redis's own time per written entity in each command of a run, the costliest first."""
    writes = row["redis_writes"]
    return ", ".join(
        f"{name} {fmt(usec / writes, 2)}" + ("" if calls == writes else f" ({fmt(calls)} calls)")
        for name, (calls, usec) in sorted(row["commands"].items(), key=lambda c: -c[1][1]))


def render(args, floors, rows, open_loop, broker_latency, raw_bytes):
    shared, per_sink = rows["connector_shared"], rows["connector_per_sink"]
    ours = shared["events_per_s"]

    def ms(seconds):
        return fmt(None if seconds is None else seconds * 1000)

    lines = [
        f"Benchmark {time.strftime('%Y-%m-%d %H:%M')} UTC, {CORES} cores "
        f"(broker, Redis and every contender on the same machine); {args.events:,} events, "
        f"{args.entities:,} entities (Zipf 1.1), 10 features of mixed types.",
        "",
        "CPU columns: seconds of CPU (user + system, all threads, from /proc) per million events, "
        "i.e. µs per event, of the contender, of redis-server and of the Pulsar broker over the "
        "contender's run. The contender's figure is its whole process from start to exit "
        "(start-up included; for the JVM that is JVM start and JIT), except the connector's "
        "(start to drained, shutdown excluded) and Feast's (its write calls only; the broker "
        "served its untimed topic read). The broker's and redis-server's are net of what they "
        f"burn serving nobody over the same time: {ms(floors['broker'])} ms and "
        f"{ms(floors['redis'])} ms of CPU per second (/proc counts in {1000 / TICKS:g} ms ticks: a short "
        "run carries that much noise, and a net figure can come out just below 0). Redis writes: entity rows stored, i.e. HSETs, "
        "whether sent by the contender or run by the connector's latest-wins script (INFO "
        "commandstats counts both).",
        "",
        "| contender | events | seconds | events/s | connector (shared) ÷ this | contender CPU µs/event "
        "| redis-server CPU µs/event | broker CPU µs/event | Redis writes | redis-server µs/write | RSS peak MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows.values():
        writes = r.get("redis_writes") or None
        lines.append(
            f"| {r['contender']} | {fmt(r['events'])} | {fmt(r.get('seconds'), 2)} | {fmt(r['events_per_s'])} "
            f"| {fmt(ratio(ours, r['events_per_s']), 2)} | {fmt(per_million(r.get('cpu_seconds'), r['events']), 1)} "
            f"| {fmt(per_million(r['redis_net_s'], r['events']), 2)} "
            f"| {fmt(per_million(r['broker_net_s'], r['events']), 1)} | {fmt(writes)} "
            f"| {fmt(per_million(r['redis_net_s'], writes), 2)} | {fmt(r.get('rss_peak_mb'))} |")
    lines += [
        "",
        f"Connector, shared: drained {fmt(shared['seconds'], 2)} s after its first message, which came "
        f"{fmt(shared['first_message_s'], 2)} s after it was ready (the broker's Failover activation delay); RSS steady "
        f"{fmt(shared['rss_steady_mb'])} MB, peak {fmt(shared['rss_peak_mb'])} MB; "
        f"{fmt(shared['redis_writes'])} Redis writes for {shared['events']:,} events "
        f"({fmt(ratio(shared['events'], shared['redis_writes']), 2)} events per write: the newest row per "
        f"entity per batch) into {fmt(shared['keys'])} keys, carried by {fmt(shared['script_calls'])} EVALSHA "
        f"calls ({fmt(ratio(shared['redis_writes'], shared['script_calls']))} entities per call); "
        f"Parquet {fmt(shared['parquet_bytes'])} bytes vs "
        f"{fmt(raw_bytes)} bytes published (broker bytesInCounter), ratio "
        f"{fmt(ratio(shared['parquet_bytes'], raw_bytes), 2)}. Subscription per sink: online lane drained "
        f"after {fmt(per_sink['online_seconds'], 2)} s, both after {fmt(per_sink['seconds'], 2)} s, "
        f"{fmt(per_sink['redis_writes'])} Redis writes. The connector's native hash holds 11 fields "
        f"(10 features and _ts; the entity id is the key), the HSET baseline writes the same.",
        "",
        "Redis's own time per written entity by command (INFO commandstats, µs; a script's "
        "time includes the commands it runs):",
        "",
    ]
    for key in ("connector_shared", "connector_per_sink", "python", "feast", "hset"):
        lines.append(f"- {rows[key]['contender']}: {command_mix(rows[key])}")
    lines.append("")
    lines += targets(rows, open_loop, broker_latency)
    lines += [
        "",
        f"Open loop, connector running (one subscription), freshness read back by "
        f"bench/programs/src/freshness_probe.rs (every 10th write read back; the two freshness columns are "
        f"explained below the broker line); producer: {open_loop['produced']}; connector CPU "
        f"{fmt(open_loop['cpu_seconds'], 1)} s for {open_loop['events']:,} events, RSS peak "
        f"{fmt(open_loop['rss_peak_mb'])} MB:",
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
    return "\n".join(lines) + "\n"


def targets(rows, open_loop, broker_latency):
    """The ingest targets against this run: (target, measured, verdict) rows."""
    shared, tuned, python, feast, hset = (rows[k] for k in ("connector_shared", "tuned", "python", "feast", "hset"))
    ours = shared["events_per_s"]
    speed = ratio(ours, tuned["events_per_s"])
    cpu_ours = per_million(shared["cpu_seconds"], shared["events"])
    cpu_tuned = per_million(tuned["cpu_seconds"], tuned["events"])
    broker_ours = per_million(shared["broker_net_s"], shared["events"])
    broker_tuned = per_million(tuned["broker_net_s"], tuned["events"])
    redis_ours = per_million(shared["redis_net_s"], shared["redis_writes"])
    redis_hset = per_million(hset["redis_net_s"], hset["redis_writes"])
    base = open_loop["phases"][0]
    fresh = base["publish_p99"]
    fresh_limit = broker_latency["delivery_p99_ms"] + 5
    burst = open_loop["burst_onward_publish_p99"]
    rss = max(shared["rss_peak_mb"], open_loop["rss_peak_mb"])
    rows_out = [
        ("connector (shared) events/s ≥ 0.6 × tuned pulsar-rs reader (stretch 0.8)",
         f"{fmt(speed, 2)} ×", verdict(at_least(speed, 0.6)) + (", stretch holds" if at_least(speed, 0.8) else "")),
        ("events/s ≥ 15 × Feast write_to_online_store",
         f"{fmt(ratio(ours, feast['events_per_s']), 1)} ×", verdict(at_least(ratio(ours, feast["events_per_s"]), 15))),
        ("events/s ≥ 2.5 × the tuned Python consumer",
         f"{fmt(ratio(ours, python['events_per_s']), 2)} ×", verdict(at_least(ratio(ours, python["events_per_s"]), 2.5))),
        ("connector CPU per event ≤ 2 × the tuned reader's",
         f"{fmt(cpu_ours, 1)} vs {fmt(cpu_tuned, 1)} µs = {fmt(ratio(cpu_ours, cpu_tuned), 2)} ×",
         verdict(at_most(ratio(cpu_ours, cpu_tuned), 2))),
        ("broker CPU per event serving the connector ≤ 1.3 × serving the tuned reader",
         f"{fmt(broker_ours, 1)} vs {fmt(broker_tuned, 1)} µs = {fmt(ratio(broker_ours, broker_tuned), 2)} ×",
         verdict(at_most(ratio(broker_ours, broker_tuned), 1.3))),
        ("redis-server CPU per written entity ≤ 1.5 × pipelined plain HSET",
         f"{fmt(redis_ours, 2)} vs {fmt(redis_hset, 2)} µs = {fmt(ratio(redis_ours, redis_hset), 2)} ×",
         verdict(at_most(ratio(redis_ours, redis_hset), 1.5))),
        (f"publish→visible p99 at {base['asked']:,} ev/s ≤ broker alone p99 + 5 ms",
         f"{fmt(fresh)} ms vs {fmt(fresh_limit)} ms", verdict(at_most(fresh, fresh_limit))),
        ("publish→visible p99 ≤ 50 ms through the burst (events sent from the burst's start on)",
         f"{fmt(burst)} ms", verdict(at_most(burst, 50))),
        ("connector RSS ≤ 150 MB throughout (catch-up with one subscription, open loop)",
         f"{fmt(rss)} MB", verdict(at_most(rss, 150))),
    ]
    lines = ["Targets, from this run:", "", "| target | this run | verdict |", "|---|---:|---|"]
    lines += [f"| {t} | {m} | {v} |" for t, m, v in rows_out]
    return lines


if __name__ == "__main__":
    main()
