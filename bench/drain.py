"""Profiling aid: drain an already published bench topic (bench/run.py publishes one; or
`feature-connector produce --root bench --pipeline bench --topic T --count N --entities 100000
--zipf 1.1 --batch 100 --producers 4`) with the dist connector on a new subscription, from
empty Redis keys, and print one JSON line: wall time from the connector's first received message until every lane acknowledged (its /metrics then in /tmp/drain-metrics.txt), when the
online sink had written every row, events/s, CPU µs per event of the connector, redis-server
and the broker (/proc), the connector's RSS peak, the Parquet bytes written and Redis's command counts.

usage: drain.py TOPIC EVENTS SUBSCRIPTION shared|per_sink [RECEIVER_QUEUE]
environment: BENCH_ROLL (rollover_rows), PERF=1 (perf record -g into /tmp/perf.data)
"""
import json, os, subprocess, sys, time, urllib.request, tempfile, socket
from pathlib import Path
import redis
ROOT = Path(__file__).resolve().parents[1]; BENCH = ROOT / "bench"; BIN = Path(os.environ.get("FC_BIN", ROOT / "target/dist/feature-connector"))
STATE = Path(os.environ.get("FC_STATE_DIR", ROOT / ".services"))
ADMIN = os.environ.get("PULSAR_ADMIN_URL", "http://127.0.0.1:8080")
TICKS = os.sysconf("SC_CLK_TCK")
def cpu(pid):
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICKS
def stats(topic):
    with urllib.request.urlopen(f"{ADMIN}/admin/v2/persistent/{topic.removeprefix('persistent://')}/stats", timeout=10) as r:
        return json.load(r)
def backlog(topic, sub):
    try: return stats(topic)["subscriptions"][sub]["msgBacklog"]
    except Exception: return None
topic, events, sub, delivery = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
queue = sys.argv[5] if len(sys.argv) > 5 else None
r = redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"))
for k in r.scan_iter("bench:*", count=10000): r.unlink(k)
rpid = r.info("server")["process_id"]; bpid = int((STATE / "pulsar.pid").read_text())
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
off = tempfile.mkdtemp(prefix="drain-offline-")
env = dict(os.environ, BENCH_TOPIC=topic, BENCH_SUBSCRIPTION=sub, BENCH_DELIVERY=delivery,
           BENCH_OFFLINE_URL=f"file://{off}", FC_HTTP_BIND=f"127.0.0.1:{port}", RUST_LOG=os.environ.get("DRAIN_RUST_LOG", "warn"), FC_INSTANCE_ID="drain")
if queue: env["BENCH_QUEUE"] = queue
subs = [sub] if delivery == "shared" else [f"{sub}-online", f"{sub}-offline"]
cmd0 = {k: v["calls"] for k, v in r.info("commandstats").items()}
p = subprocess.Popen([str(BIN), "run", "--root", str(BENCH)], env=env, stdin=subprocess.DEVNULL, stderr=open("/tmp/drain-connector.log", "w"))
perf = subprocess.Popen(["perf", "record", "-F", "499", "-g", "--call-graph", "dwarf,16384", "-o", "/tmp/perf.data", "-p", str(p.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) if os.environ.get("PERF") else None
while True:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2); break
    except Exception:
        if p.poll() is not None: sys.exit("connector died, see /tmp/drain-connector.log")
        time.sleep(0.05)
ready = time.time(); c0 = cpu(p.pid); r0 = cpu(rpid); b0 = cpu(bpid); rss = 0; received_at = None
def metric_sum(name, sink=None):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    return sum(float(l.split()[-1]) for l in text.splitlines() if l.startswith(name + "{") and (sink is None or f'sink="{sink}"' in l))
# Timed from the first message, as the bare readers time themselves (a Failover subscription
# gets nothing for its first second: the broker's activeConsumerFailoverDelayTimeMillis).
while metric_sum("feature_connector_messages_received_total") == 0:
    if p.poll() is not None: sys.exit("connector died, see /tmp/drain-connector.log")
    time.sleep(0.005)
t0 = time.time()
def received():
    return metric_sum("feature_connector_rows_written_total", "online")
while True:
    if received_at is None and received() >= events: received_at = time.time() - t0
    bl = [backlog(topic, s) for s in subs]
    rss = max(rss, int(Path(f"/proc/{p.pid}/status").read_text().split("VmRSS:")[1].split()[0]) // 1024)
    if all(b == 0 for b in bl): break
    if p.poll() is not None: sys.exit("connector died, see /tmp/drain-connector.log")
    time.sleep(0.1)
wall = time.time() - t0; cc = cpu(p.pid) - c0
# The connector's own histograms (batch sizes, sink write times), for reading afterwards.
Path("/tmp/drain-metrics.txt").write_text(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()); rc = cpu(rpid) - r0; bc = cpu(bpid) - b0
if perf: perf.send_signal(2); perf.wait()
p.terminate(); p.wait()
cmd1 = {k: v["calls"] for k, v in r.info("commandstats").items()}
d = {k: cmd1[k] - cmd0.get(k, 0) for k in cmd1 if cmd1[k] - cmd0.get(k, 0) > 0}
parquet = sum(f.stat().st_size for f in Path(off).rglob("*.parquet"))
import shutil; shutil.rmtree(off, ignore_errors=True)
print(json.dumps({"delivery": delivery, "queue": queue, "first_message_s": round(t0 - ready, 2), "wall_s": round(wall, 2), "online_written_s": round(received_at or 0, 2), "events_per_s": round(events / wall),
                  "connector_cpu_us_ev": round(cc * 1e6 / events, 2), "redis_cpu_us_ev": round(rc * 1e6 / events, 2),
                  "broker_cpu_us_ev": round(bc * 1e6 / events, 2), "rss_peak_mb": rss, "parquet_mb": round(parquet / 1e6, 1), "redis_cmds": d}))
