"""Chaos suite (run it through scripts/chaos.sh): a stream of events while the connector is
SIGKILLed and restarted, Redis and the S3 server are frozen (SIGSTOP) for a while, the
broker is restarted and bad events are injected; afterwards every promise is checked:

  * Redis holds, for every entity, exactly the value of its latest event;
  * the offline Delta table on S3 holds every event exactly once (read with the Python deltalake);
  * the pipeline's subscription ends with backlog 0 (`--delivery shared`, the default: one
    subscription `chaos` feeds both sinks; `--delivery per_sink`: `chaos-online` and
    `chaos-offline`, each);
  * the dead-letter topic holds exactly the injected bad events.

Redis and S3 faults are SIGSTOP/SIGCONT (the services become unreachable and keep their data:
the test Redis and moto keep everything in memory, so stopping them for real would lose what
the check needs); the broker is really stopped and started on its data
(`scripts/services.sh restart-pulsar`).
"""

import argparse
import atexit
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pulsar
import pyarrow as pa
import redis

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("FC_CHAOS_BIN", ROOT / "target/release/feature-connector"))
STATE = Path(os.environ.get("FC_STATE_DIR", ROOT / ".services"))
ADMIN = os.environ["PULSAR_ADMIN_URL"]
BASE_MS = 1_795_000_000_000


def log(message):
    print(f"[chaos {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def pid_of(name):
    return int((STATE / f"{name}.pid").read_text().strip())


def backlog(topic, subscription):
    try:
        with urllib.request.urlopen(f"{ADMIN}/admin/v2/persistent/{topic.removeprefix('persistent://')}/stats",
                                    timeout=10) as r:
            return json.load(r)["subscriptions"][subscription]["msgBacklog"]
    except Exception:
        return None


def acked(port, lane):
    """Messages the lane acknowledged; lanes are named after their sinks (`online+offline` for
    the shared lane, `online` / `offline` with `delivery: per_sink`)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except Exception:
        return None
    match = re.search(rf'feature_connector_messages_acked_total{{pipeline="chaos",sink="{re.escape(lane)}"}} (\d+)',
                      text)
    return int(match.group(1)) if match else 0


def lane_of(delivery, sink):
    """The lane that acknowledges for `sink`."""
    return "online+offline" if delivery == "shared" else sink


def subscriptions_of(delivery):
    return ["chaos"] if delivery == "shared" else ["chaos-online", "chaos-offline"]


class Connector:
    def __init__(self, project, env, port):
        self.project, self.env, self.port = project, env, port
        self.proc = None
        self.starts = 0

    def start(self):
        self.starts += 1
        log_file = open(self.project / f"run-{self.starts}.log", "w")
        self.proc = subprocess.Popen([str(BIN), "run", "--root", str(self.project)], env=self.env,
                                     stdout=log_file, stderr=log_file, stdin=subprocess.DEVNULL)

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def kill_if_running(self):
        """Leaves no connector behind when the harness exits early."""
        if self.proc is not None and self.proc.poll() is None:
            self.kill()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


def wait_for_acks(connector, lane, since, nothing_left):
    """Seconds from `since` until the lane acknowledges again (a lane feeding the offline sink
    only does so when its next file commits: up to rollover_interval later); None once
    `nothing_left()` says every event is published and acknowledged (the lane had caught up
    before the measurement began); gives up after 300 s."""
    before = acked(connector.port, lane)
    while time.time() - since < 300:
        now = acked(connector.port, lane)
        if now is not None and before is not None and now > before:
            break
        if now is not None and before is None:
            before = now
        if nothing_left():
            return None
        time.sleep(0.1)
    return time.time() - since


def describe(seconds):
    return "nothing left to acknowledge" if seconds is None else f"after {seconds:.1f} s"


def freeze(name, seconds, recovered, lane, connector, nothing_left):
    """SIGSTOPs a service for `seconds`, then measures how long the lane takes to ack again."""
    pid = pid_of(name)
    log(f"{name}: frozen for {seconds} s")
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(pid, signal.SIGCONT)
    thawed = time.time()
    seconds_to_ack = wait_for_acks(connector, lane, thawed, nothing_left)
    recovered.append((f"{name} frozen {seconds} s", seconds_to_ack))
    log(f"{name}: thawed; {lane} lane acknowledging again: {describe(seconds_to_ack)}")


def restart_broker(recovered, connector, lane, nothing_left):
    """Stops the broker and starts it again on its data; measures the (online) lane's return."""
    log("pulsar: restarting")
    began = time.time()
    subprocess.run(["bash", str(ROOT / "scripts/services.sh"), "restart-pulsar"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ready = time.time()
    seconds_to_ack = wait_for_acks(connector, lane, ready, nothing_left)
    recovered.append((f"broker restarted ({ready - began:.0f} s down)", seconds_to_ack))
    log(f"pulsar: back after {ready - began:.1f} s; {lane} lane acknowledging again: "
        f"{describe(seconds_to_ack)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--entities", type=int, default=100_000)
    ap.add_argument("--rate", type=int, default=10_000, help="events/s published")
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--bad", type=int, default=50, help="bad events injected")
    ap.add_argument("--redis-freeze", type=int, default=30)
    ap.add_argument("--s3-freeze", type=int, default=60)
    ap.add_argument("--broker-restarts", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--delivery", choices=["shared", "per_sink"], default="shared",
                    help="the pipeline's source.delivery (shared: one subscription feeds both sinks)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    run_id = uuid.uuid4().hex[:8]
    topic = f"persistent://public/default/chaos-{run_id}"
    prefix = f"chaos{run_id}"
    s3_prefix = f"chaos-{run_id}"
    project = Path(tempfile.mkdtemp(prefix="fc-chaos-"))
    (project / "connectors").mkdir()
    (project / "schemas").mkdir()
    (project / "schemas/user_profile.avsc").write_text((ROOT / "schemas/user_profile.avsc").read_text())
    (project / "connectors/chaos.yaml").write_text(f"""name: chaos
source:
  topic: {topic}
  subscription: chaos
  delivery: {args.delivery}
schema:
  file: schemas/user_profile.avsc
entity:
  keys: [user_id]
  event_time: event_time
online:
  key_prefix: {prefix}
offline:
  url: s3://{os.environ['S3_BUCKET']}/{s3_prefix}
  rollover_rows: 50000
  rollover_interval: 5s
""")
    # A free port, not a seeded one: a connector left behind by an earlier run must not
    # answer this run's metrics.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = dict(os.environ, FC_HTTP_BIND=f"127.0.0.1:{port}", RUST_LOG="warn", FC_INSTANCE_ID="chaos",
               AWS_ENDPOINT_URL=os.environ["S3_ENDPOINT"])
    produce_seconds = args.events / args.rate
    log(f"{args.events} events for {args.entities} entities at {args.rate}/s (~{produce_seconds:.0f} s) "
        f"to {topic}; project {project}")
    # The schema is registered by the first produce; the connector subscribes from the start.
    subprocess.run([str(BIN), "produce", "--root", str(project), "--pipeline", "chaos", "--count", "1",
                    "--entities", str(args.entities), "--base-ms", str(BASE_MS), "--start", "0"],
                   env=env, check=True, capture_output=True)
    connector = Connector(project, env, port)
    atexit.register(connector.kill_if_running)
    connector.start()
    producer = subprocess.Popen(
        [str(BIN), "produce", "--root", str(project), "--pipeline", "chaos", "--count", str(args.events - 1),
         "--start", "1", "--entities", str(args.entities), "--base-ms", str(BASE_MS), "--batch", "100",
         "--rate", str(args.rate)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started = time.time()
    subscriptions = subscriptions_of(args.delivery)

    def nothing_left():
        return producer.poll() is not None and all(
            backlog(topic, subscription) == 0 for subscription in subscriptions)


    client = pulsar.Client(os.environ["PULSAR_URL"], logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    # No send timeout: a bad event injected while the broker restarts waits for it (the
    # client's default 30 s can be shorter than the restart); sent asynchronously so that the
    # kills and outages keep their schedule meanwhile.
    raw = client.create_producer(topic, send_timeout_millis=0)
    bad_results = []
    bad_at = sorted(rng.uniform(1, produce_seconds) for _ in range(args.bad))
    kill_at = sorted(rng.uniform(2, produce_seconds + 20) for _ in range(args.kills))
    recovered = []
    freezes = [
        (0.25 * produce_seconds, "redis", args.redis_freeze, lane_of(args.delivery, "online")),
        (0.40 * produce_seconds, "s3", args.s3_freeze, lane_of(args.delivery, "offline")),
    ] + [((0.7 + 0.2 * k / max(args.broker_restarts, 1)) * produce_seconds, "pulsar", 0,
          lane_of(args.delivery, "online"))
         for k in range(args.broker_restarts)]
    threads = []
    kills = 0
    while bad_at or kill_at or freezes:
        now = time.time() - started
        if bad_at and now >= bad_at[0]:
            bad_at.pop(0)
            raw.send_async(os.urandom(rng.randrange(1, 64)),
                           lambda result, _id: bad_results.append(result), partition_key="bad")
        if kill_at and now >= kill_at[0]:
            kill_at.pop(0)
            connector.kill()
            kills += 1
            connector.start()
        if freezes and now >= freezes[0][0]:
            _, name, seconds, lane = freezes.pop(0)
            if name == "pulsar":
                thread = threading.Thread(target=restart_broker,
                                          args=(recovered, connector, lane, nothing_left))
            else:
                thread = threading.Thread(target=freeze,
                                          args=(name, seconds, recovered, lane, connector, nothing_left))
            thread.start()
            threads.append(thread)
        time.sleep(0.02)
    log(f"{kills} kills done; waiting for the outages and the producer")
    for thread in threads:
        thread.join()
    raw.flush()
    failed = [result for result in bad_results if result != pulsar.Result.Ok]
    if failed or len(bad_results) != args.bad:
        raise SystemExit(f"injecting the bad events failed: {len(bad_results)} of {args.bad} "
                         f"confirmed, errors {failed}")
    out, err = producer.communicate(timeout=900)
    if producer.returncode != 0:
        raise SystemExit(f"the producer failed: {err[-2000:]}")
    log(out.strip().splitlines()[-1])
    drained_from = time.time()
    while not all(backlog(topic, subscription) == 0 for subscription in subscriptions):
        if time.time() - drained_from > 600:
            raise SystemExit(f"{', '.join(subscriptions)} did not drain within 10 minutes")
        time.sleep(0.5)
    log(f"drained {time.time() - drained_from:.1f} s after the last event was published")
    exit_code = connector.stop()

    # Redis: each entity holds its latest event (event i belongs to entity i % E, time BASE + i).
    r = redis.Redis.from_url(os.environ["REDIS_URL"])
    wrong = 0
    pipe = r.pipeline(transaction=False)
    for entity in range(args.entities):
        pipe.hget(f"{prefix}:chaos:user-{entity}", "_ts")
    stored = pipe.execute()
    for entity, ts in enumerate(stored):
        last = args.events - args.entities + entity if args.events >= args.entities else entity
        if entity >= args.events or ts is None or int(ts) != BASE_MS + last:
            wrong += 1
    # Offline table: every event exactly once, read through its log by delta-rs (Python).
    from deltalake import DeltaTable, QueryBuilder
    options = {"AWS_ACCESS_KEY_ID": os.environ["AWS_ACCESS_KEY_ID"],
               "AWS_SECRET_ACCESS_KEY": os.environ["AWS_SECRET_ACCESS_KEY"],
               "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": os.environ["S3_ENDPOINT"],
               "AWS_ALLOW_HTTP": "true", "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
    delta = DeltaTable(f"s3://{os.environ['S3_BUCKET']}/{s3_prefix}/chaos", storage_options=options)
    # QueryBuilder, not to_pyarrow_table() (which can abort at interpreter exit, delta-rs #2184).
    rows = pa.table(QueryBuilder().register("t", delta).execute(
        "SELECT CAST(event_time AS BIGINT) / 1000 AS ms FROM t"))
    times = rows.column("ms").to_pylist()
    unique = set(times)
    duplicated = len(times) - len(unique)
    lost = args.events - len(unique)
    # Dead letters: exactly the injected ones. Publishing to the DLQ is at-least-once (a kill
    # between the publish and the acknowledgement publishes again), so count distinct
    # originals, and check that none of them is a good event.
    reader = client.create_reader(f"{topic}-chaos-DLQ", pulsar.MessageId.earliest)
    originals, dead_messages, good_dead = set(), 0, 0
    while True:
        try:
            message = reader.read_next(timeout_millis=3000)
        except Exception:
            break
        dead_messages += 1
        properties = message.properties()
        originals.add(properties.get("original_message_id"))
        if message.partition_key() != "bad":
            good_dead += 1
    dead = len(originals)
    client.close()
    report = {
        "events": args.events, "entities": args.entities, "kills": kills, "delivery": args.delivery,
        "outages": [name for name, _ in recovered],
        "recovery_seconds": {name: None if seconds is None else round(seconds, 1)
                             for name, seconds in recovered},
        "table_rows": len(times), "lost": lost, "duplicated": duplicated,
        "redis_entities_wrong": wrong, "dead_letters": dead, "dead_letter_messages": dead_messages,
        "good_events_dead_lettered": good_dead, "bad_injected": args.bad,
        "final_exit_code": exit_code, "seconds": round(time.time() - started, 1),
    }
    print(json.dumps(report, indent=2))
    ok = (lost == 0 and duplicated == 0 and wrong == 0 and dead == args.bad and good_dead == 0
          and exit_code == 0)
    log("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
