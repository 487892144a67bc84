"""Two replicas of one pipeline on a 4-partition topic while a producer runs, restarted over
and over (rolling-deploy SIGTERMs and SIGKILLs of a random replica); then the offline Delta
table, read with the Python deltalake package, must hold every event exactly once. Both
replicas share the pipeline's one Failover subscription `rep` (the default `delivery: shared`;
the offline sink acknowledges cumulatively), so each partition has one active replica at a time.

The earlier file-per-rollover store left 22,735 duplicates after 8 SIGTERMs and 17,197 after
12 SIGKILLs here. Its short version (40,000 events, with a backfill) is the integration test
`offline::delta::replicas_handing_partitions_over_and_a_backfill_write_every_event_once`.
Run it against the table:

    set -a; . .services/env; set +a
    PY=$(bash scripts/delta_env.sh | tail -1)
    cargo build --release --bin feature-connector --bin feature-connector-loadgen
    $PY bench/replicas.py --events 300000 --sigterms 8 --sigkills 12

Prints one JSON document (rows, distinct events, duplicates, missing, restarts, seconds);
exit 1 unless every event is there exactly once.
"""

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ADMIN = os.environ.get("PULSAR_ADMIN_URL", "http://127.0.0.1:8080")
ENDPOINT = os.environ.get("S3_ENDPOINT", "http://127.0.0.1:9000")
BASE_MS = 1_790_700_000_000


def log(message):
    print(f"[replicas {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def admin(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{ADMIN}/admin/v2/{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read()
        return json.loads(text) if text else None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def backlog(topic, partitions, subscription):
    """Backlog of `subscription` over the partitions; None while a partition lacks it (a
    wrong name must not look drained)."""
    total = 0
    for p in range(partitions):
        stats = admin("GET", f"persistent/{topic}-partition-{p}/stats")
        subscriptions = stats.get("subscriptions", {})
        if subscription not in subscriptions:
            return None
        total += subscriptions[subscription].get("msgBacklog", 0)
    return total


def subscriptions(topic, partitions):
    """The subscription names found on the partitions."""
    names = set()
    for p in range(partitions):
        names.update(admin("GET", f"persistent/{topic}-partition-{p}/subscriptions") or [])
    return sorted(names)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--entities", type=int, default=20_000)
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--sigterms", type=int, default=8)
    parser.add_argument("--sigkills", type=int, default=12)
    parser.add_argument("--bin", default=str(ROOT / "target/release/feature-connector"))
    args = parser.parse_args()
    started = time.time()
    run = uuid.uuid4().hex[:8]
    namespace = f"public/replicas-{run}"
    admin("PUT", f"namespaces/{namespace}")
    admin("POST", f"namespaces/{namespace}/retention", {"retentionTimeInMinutes": 60, "retentionSizeInMB": 4096})
    topic = f"{namespace}/features"
    admin("PUT", f"persistent/{topic}/partitions", 4)
    bucket = f"fc-replicas-{run}"
    urllib.request.urlopen(urllib.request.Request(f"{ENDPOINT}/{bucket}", method="PUT"), timeout=10)

    work = Path(tempfile.mkdtemp(prefix="fc-replicas-"))
    (work / "connectors").mkdir()
    (work / "schemas").mkdir()
    (work / "schemas/user_profile.avsc").write_text((ROOT / "schemas/user_profile.avsc").read_text())
    (work / "config.yaml").write_text(f"""pulsar:
  url: {os.environ.get('PULSAR_URL', 'pulsar://127.0.0.1:6650')}
  admin_url: {ADMIN}
redis:
  url: {os.environ.get('REDIS_URL', 'redis://127.0.0.1:6379')}
offline:
  default_url: s3://{bucket}/offline
  options:
    aws_endpoint: {ENDPOINT}
    aws_region: us-east-1
    aws_allow_http: "true"
    aws_virtual_hosted_style_request: "false"
http:
  bind: "${{FC_HTTP_BIND:-}}"
shutdown_timeout: 20s
""")
    (work / "connectors/rep.yaml").write_text(f"""name: rep
source:
  topic: persistent://{topic}
  subscription: rep
  subscription_type: Failover
schema:
  file: schemas/user_profile.avsc
entity:
  keys: [user_id]
  event_time: event_time
online:
  enabled: false
offline:
  rollover_rows: 20000
  rollover_interval: 2s
""")
    ports = [free_port(), free_port()]

    def start(replica, round_):
        env = dict(os.environ, FC_INSTANCE_ID=f"r{replica}", FC_HTTP_BIND=f"127.0.0.1:{ports[replica]}",
                   RUST_LOG="info,pulsar=warn")
        log_file = open(work / f"r{replica}-{round_}.log", "w")
        return subprocess.Popen([args.bin, "run", "--root", str(work), "--config", str(work / "config.yaml")],
                                env=env, stdout=subprocess.DEVNULL, stderr=log_file)

    replicas = [start(0, 0), start(1, 0)]
    time.sleep(2)
    producer = subprocess.Popen([args.bin, "produce", "--root", str(work), "--config", str(work / "config.yaml"),
                                 "--pipeline", "rep", "--count", str(args.events), "--entities", str(args.entities),
                                 "--base-ms", str(BASE_MS), "--batch", "100", "--producers", "2",
                                 "--rate", str(args.rate)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    plan = ["term"] * args.sigterms + ["kill"] * args.sigkills
    random.shuffle(plan)
    produce_seconds = args.events / args.rate
    gap = produce_seconds / (len(plan) + 1)
    restarts = []
    for round_, how in enumerate(plan, start=1):
        time.sleep(gap * random.uniform(0.6, 1.4))
        which = random.randrange(2)
        process = replicas[which]
        if how == "term":
            process.send_signal(signal.SIGTERM)
            code = process.wait(timeout=60)
        else:
            process.kill()
            code = process.wait()
        restarts.append({"replica": which, "signal": how, "exit": code})
        time.sleep(0.3)
        replicas[which] = start(which, round_)
    _, produced = producer.communicate()
    if producer.returncode != 0:
        raise SystemExit(f"producer failed: {produced.decode()[-2000:]}")
    log("producer done; waiting for subscription rep to drain")
    deadline = time.time() + 600
    while backlog(topic, 4, "rep") != 0:
        if time.time() > deadline:
            raise SystemExit(f"not drained in 10 minutes; subscriptions: {subscriptions(topic, 4)}")
        time.sleep(1)
    for process in replicas:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)

    from deltalake import DeltaTable, QueryBuilder
    import pyarrow as pa
    options = {"AWS_ACCESS_KEY_ID": os.environ["AWS_ACCESS_KEY_ID"],
               "AWS_SECRET_ACCESS_KEY": os.environ["AWS_SECRET_ACCESS_KEY"], "AWS_REGION": "us-east-1",
               "AWS_ENDPOINT_URL": ENDPOINT, "AWS_ALLOW_HTTP": "true", "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
    table = DeltaTable(f"s3://{bucket}/offline/rep", storage_options=options)
    query = QueryBuilder().register("t", table)
    counts = pa.table(query.execute(
        "SELECT count(*) AS n, count(DISTINCT CAST(event_time AS BIGINT)) AS d FROM t"))
    rows, distinct = counts["n"][0].as_py(), counts["d"][0].as_py()
    logs = "".join(p.read_text() for p in work.glob("*.log"))
    report = {
        "events": args.events, "rows": rows, "distinct": distinct, "duplicates": rows - distinct,
        "missing": args.events - distinct, "table_version": table.version(), "files": len(table.file_uris()),
        "subscriptions": subscriptions(topic, 4),
        "sigterms": args.sigterms, "sigkills": args.sigkills,
        "graceful_exits_nonzero": sum(1 for r in restarts if r["signal"] == "term" and r["exit"] != 0),
        "rows_skipped_lines": logs.count("skipping rows already committed"),
        "rewinds": logs.count("delivers a partition again"),
        "gap_waits": logs.count("wait for it to fill"),
        "conflicts": logs.count("another writer committed first"),
        "seconds": round(time.time() - started, 1),
    }
    print(json.dumps(report, indent=2))
    sys.exit(0 if rows == distinct == args.events else 1)


if __name__ == "__main__":
    main()
