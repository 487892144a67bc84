"""Serving benchmark on real services (run it through bench/serving.sh).

One run, same Redis, same keys:
  1. the connector (release build, bench/serving/connectors/serving_bench.yaml: the ingest
     benchmark's 10 features of mixed types, Feast's Redis layout) writes the latest values
     of 100,000 entities (one event each, published by `produce`) and keeps running to serve
     them (bench/serving/service.yaml: the serving listener with more request slots than
     requests in flight);
  2. a Feast repo over the same Redis (feature_store.yaml with the redis online store, the
     same feature view) is applied and `feast serve` started on it, one worker per core;
  3. one request of 50 entities is asked of every contender and the answers compared (same
     values, every entity found), so that every contender serves the same data;
  4. bench/programs/src/serving_load.rs (a compiled, single-threaded load generator) sends
     requests of 1 and of 50 random entities x 10 features at a fixed concurrency (closed
     loop) to our `POST /get-online-features`, our `/v1/features/{view}`, `feast serve`'s
     `POST /get-online-features` and Redis directly (one HMGET per entity, a request's
     entities pipelined: the ceiling), and, for 1-entity requests, the floor of our stack
     (bench/programs/src/http_floor.rs: hyper on one current-thread runtime answering a
     canned body as long as ours, alone, through an axum router, and after one HMGET through
     redis-rs: what a server built on these crates costs before it does a request's own
     work); then
     1-entity requests at a fixed rate (open loop); a second replica of the connector with
     serving.cache_entities set (--cache-entities, 0 leaves it out) answers the same
     requests from its cache of Redis replies; with --log-rates, one more cached replica per
     rate logs its answers (serving.feature_logging, that share of entities) to Delta tables
     under the work dir, to compare with the unlogged cached one; every measurement is split into rounds
     and the rounds of all measurements interleaved,
     so that other load on the box drifts over every contender alike; requests/s, latency
     percentiles (pooled over the rounds), CPU per request of the server process(es), of
     redis-server and of the client itself (/proc, net of their idle burn);
  5. the serving targets (`targets` below: requests/s against `feast serve` and direct Redis,
     p99 latency), evaluated on this run's figures.
Prints the tables and writes them to bench/results/serving-latest.md.
"""

import argparse
import array
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import (BIN, CORES, REDIS_URL, Process, at_least, at_most, connector_acked,  # noqa: E402
                 connector_metrics,
                 delete_topic, ensure_namespace, fmt, free_port, proc_cpu_seconds, ratio, redis_cli, redis_info,
                 verdict)

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
SERVING = BENCH / "serving"
LOADGEN = ROOT / "target/dist/serving_load"
HTTP_FLOOR = ROOT / "target/dist/http_floor"
# Contenders measured only with 1-entity requests in the closed loop.
FLOORS = ("floor_canned", "floor_axum", "floor_redis")
FLOOR_MODES = {"floor_canned": "canned", "floor_axum": "axum-canned", "floor_redis": "redis"}
VIEW = "serving_bench"
KEY = "entity_id"
KEY_PREFIX = "entity-"
# The view's features and their Feast dtypes (bench/schemas/bench_features.avsc).
FEATURES = [("clicks_1h", "Int64"), ("views_1h", "Int64"), ("last_item_id", "Int64"),
            ("sessions_7d", "Int32"), ("spend_30d", "Float64"), ("score", "Float64"),
            ("ctr_7d", "Float32"), ("is_active", "Bool"), ("country", "String"),
            ("segment", "String")]
# A client thread busier than this share of the window may be what bounds a row.
CLIENT_BOUND = 0.9
def log(message):
    print(f"[serving {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def load_average():
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f}"


def http_json(url, body=None, timeout=30):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"},
                                     method="GET" if body is None else "POST")
    with urllib.request.urlopen(request, timeout=timeout) as r:
        return json.load(r)


def wait_until(what, check, timeout=120, every=0.2):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if check():
                return
        except (OSError, ValueError, urllib.error.URLError):
            pass
        time.sleep(every)
    raise RuntimeError(f"timed out waiting for {what}")


def acked_by_every_lane(port):
    """Messages that every lane of the connector has acknowledged (0 until /metrics answers)."""
    acked = connector_acked(port)
    return min(acked.values()) if acked else 0.0


def children(pid):
    """Direct children of `pid` (every thread's)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


# Feast's keys are binary (a length can be a newline byte): scanned and deleted inside Redis.
SCAN_KEYS = ("local cursor = '0' local n = 0 repeat "
                "local r = redis.call('SCAN', cursor, 'MATCH', ARGV[1], 'COUNT', 10000) cursor = r[1] "
                "for _, k in ipairs(r[2]) do if ARGV[2] == 'del' then redis.call('DEL', k) end n = n + 1 end "
                "until cursor == '0' return n")


def matching_keys(pattern, action="count"):
    """The number of keys matching `pattern`; with `action` "del", deleted too."""
    return int(redis_cli("eval", SCAN_KEYS, "0", pattern, action).strip() or 0)


def project_keys(project, action="count"):
    """The number of the Feast layout's keys of `project` (they end with its name); with
    `action` "del", deleted too."""
    return matching_keys(f"*{project}", action)


def feast_repo(work, project):
    """A Feast repo over the benchmark's Redis with the connector's view; applied."""
    repo = work / "feast-repo"
    (repo / "data").mkdir(parents=True, exist_ok=True)
    host_port = re.sub(r"^redis://", "", REDIS_URL).rstrip("/")
    (repo / "feature_store.yaml").write_text(
        f"project: {project}\n"
        f"registry: {repo / 'data/registry.db'}\n"
        "provider: local\n"
        "online_store:\n"
        "  type: redis\n"
        f"  connection_string: \"{host_port}\"\n"
        "entity_key_serialization_version: 3\n")
    fields = "\n".join(f"        Field(name={name!r}, dtype={dtype})," for name, dtype in FEATURES)
    (repo / "feature_repo.py").write_text(f'''# Generated by bench/serving.py: the connector's serving_bench pipeline as a Feast view.
from datetime import timedelta

from feast import Entity, FeatureView, Field, FileSource, ValueType
from feast.types import Bool, Float32, Float64, Int32, Int64, String

entity = Entity(name="entity", join_keys=[{KEY!r}], value_type=ValueType.STRING)
{VIEW} = FeatureView(
    name={VIEW!r},
    entities=[entity],
    ttl=timedelta(seconds=0),
    schema=[
        Field(name={KEY!r}, dtype=String),
{fields}
    ],
    online=True,
    source=FileSource(name="{VIEW}_source", path={str(repo / 'data/unused.parquet')!r},
                      timestamp_field="event_time"),
)
''')
    return repo


def loadgen(mode, target, batch, args, pids, duration, rate=None, project="", latencies=None):
    argv = [str(LOADGEN), "--mode", mode, "--target", target, "--view", VIEW, "--project", project,
            "--features", ",".join(f for f, _ in FEATURES), "--key", KEY, "--key-prefix", KEY_PREFIX,
            "--entities", str(args.entities), "--batch", str(batch), "--connections", str(args.connections),
            "--warmup", args.warmup, "--duration", f"{duration:.3f}s"]
    if rate:
        argv += ["--rate", str(rate)]
    if latencies:
        argv += ["--latencies", str(latencies)]
    for label, pid_list in pids.items():
        for pid in pid_list:
            argv += ["--pid", f"{label}={pid}"]
    out = subprocess.run(argv, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"serving_load {mode} exited with {out.returncode}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def pool(runs, latency_files):
    """One row from the rounds of one measurement: counts and CPU summed, latencies pooled."""
    latencies = array.array("I")
    for path in latency_files:
        latencies.frombytes(path.read_bytes())
        path.unlink()
    if sys.byteorder != "little":
        latencies.byteswap()
    latencies = sorted(latencies)
    row = {"rounds": len(runs), "seconds": sum(r["seconds"] for r in runs),
           "requests": sum(r["requests"] for r in runs), "misses": sum(r["misses"] for r in runs),
           "client_cpu_s": sum(r["client_cpu_s"] for r in runs), "errors": {}, "cpu_s": {},
           "per_round": [round(r["requests_per_s"]) for r in runs]}
    for r in runs:
        for kind, n in r["errors"].items():
            row["errors"][kind] = row["errors"].get(kind, 0) + n
        for label, cpu in r["cpu_s"].items():
            row["cpu_s"][label] = row["cpu_s"].get(label, 0) + cpu
    row["requests_per_s"] = row["requests"] / row["seconds"]
    for name, p in (("p50_ms", 50), ("p90_ms", 90), ("p99_ms", 99), ("p999_ms", 99.9)):
        row[name] = latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))] / 1000 if latencies else None
    row["max_ms"] = latencies[-1] / 1000 if latencies else None
    return row


def idle_floors(pids, seconds=3.0):
    """CPU seconds per second each process group burns serving nobody."""
    before = {label: sum(proc_cpu_seconds(p) or 0 for p in group) for label, group in pids.items()}
    time.sleep(seconds)
    return {label: (sum(proc_cpu_seconds(p) or 0 for p in group) - before[label]) / seconds
            for label, group in pids.items()}


def compare_answers(ours_port, feast_port, args):
    """One 50-entity request to each contender: the same values, every entity found."""
    entities = [f"{KEY_PREFIX}{(i * 7919) % args.entities}" for i in range(50)]
    body = {"features": [f"{VIEW}:{f}" for f, _ in FEATURES], "entities": {KEY: entities}}
    ours = http_json(f"http://127.0.0.1:{ours_port}/get-online-features", body)
    theirs = http_json(f"http://127.0.0.1:{feast_port}/get-online-features", body)
    problems = []
    # Feast's server may give the columns in another order than asked: compared by name.
    ours_by_name = dict(zip(ours["metadata"]["feature_names"], ours["results"]))
    theirs_by_name = dict(zip(theirs["metadata"]["feature_names"], theirs["results"]))
    if sorted(ours_by_name) != sorted(theirs_by_name):
        problems.append(f"feature names differ: {sorted(ours_by_name)} vs {sorted(theirs_by_name)}")
    for name, a in ours_by_name.items():
        b = theirs_by_name.get(name, {})
        if a["values"] != b.get("values"):
            problems.append(f"{name}: ours {a['values'][:3]}… vs feast serve {b.get('values', [])[:3]}…")
        if set(a["statuses"]) != {"PRESENT"} or set(b.get("statuses", [])) != {"PRESENT"}:
            problems.append(f"{name}: statuses {sorted(set(a['statuses']))} vs {sorted(set(b.get('statuses', [])))}")
    v1 = http_json(f"http://127.0.0.1:{ours_port}/v1/features/{VIEW}",
                   {"entities": [{KEY: e} for e in entities]})
    if not all(r["found"] for r in v1["results"]):
        problems.append("/v1/features: entities not found")
    if problems:
        raise RuntimeError("the contenders do not serve the same values:\n  " + "\n  ".join(problems))
    return len(ours["results"]) - 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", required=True, help="the Feast venv's python (scripts/feast_env.sh)")
    ap.add_argument("--entities", type=int, default=100_000)
    ap.add_argument("--connections", type=int, default=16, help="requests in flight at once (closed loop)")
    ap.add_argument("--warmup", default="1s", help="before each round of each measurement, not counted")
    ap.add_argument("--duration", default="12s", help="measured per contender and request size, over all rounds")
    ap.add_argument("--rounds", type=int, default=3, help="rounds each measurement is split into, interleaved")
    ap.add_argument("--rate", type=int, default=1_000, help="open loop: 1-entity requests per second")
    ap.add_argument("--feast-workers", type=int, default=CORES, help="feast serve --workers (one per core)")
    ap.add_argument("--sizes", default="1,50", help="entities per request")
    ap.add_argument("--cache-entities", type=int, default=100_000,
                    help="serving.cache_entities of the second replica (0: no such replica)")
    ap.add_argument("--cached-threads", type=int, default=2,
                    help="serving.threads of the second replica (Redis needs no core of its own for it)")
    ap.add_argument("--log-rates", default="",
                    help="comma-separated shares (e.g. 1,0.01): per share, a cached replica with "
                         "serving.feature_logging at that rate (needs --cache-entities)")
    ap.add_argument("--out", type=Path, default=BENCH / "results/serving-latest.md")
    args = ap.parse_args()
    args.duration_s = parse_seconds(args.duration)
    args.log_rates = [float(r) for r in args.log_rates.split(",") if r.strip()]
    if args.log_rates and not args.cache_entities:
        ap.error("--log-rates compares with the cached replica: give --cache-entities")
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="fc-serving-"))
    project = f"fcserve_{uuid.uuid4().hex[:6]}"
    topic = f"persistent://public/bench/serving-{uuid.uuid4().hex[:8]}"
    load_before = load_average()
    ensure_namespace()
    redis_pid = int(redis_info("server")["process_id"])
    feast_bin = str(Path(args.python).parent / "feast")
    http_port, serving_port, feast_port = free_port(), free_port(), free_port()
    env = dict(os.environ, BENCH_TOPIC=topic, BENCH_FEAST_PROJECT=project, RUST_LOG="warn",
               FC_HTTP_BIND=f"127.0.0.1:{http_port}", FC_SERVING_BIND=f"127.0.0.1:{serving_port}",
               BENCH_MAX_CONCURRENT=str(max(256, args.connections * 2)), FC_INSTANCE_ID="serving-bench")
    config = ["--root", str(BENCH), "--connectors", str(SERVING / "connectors"),
              "--config", str(SERVING / "service.yaml")]
    connector = feast = cached = None
    logged = []  # (key, rate, Process, serving port, http port)
    log_counts = {}  # key: (rate, rows logged, rows dropped, RSS MB)
    floor_servers = []
    floor_prefix = f"fcfloor:{project}:"
    try:
        log(f"publishing {args.entities:,} events, one per entity, to {topic}")
        subprocess.run([str(BIN), "produce", *config, "--pipeline", VIEW, "--topic", topic,
                        "--count", str(args.entities), "--entities", str(args.entities),
                        "--batch", "100", "--producers", "4"], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=open(work / "produce.log", "w"))
        log(f"connector: writing them to Redis (Feast layout, project {project}) and serving them")
        started = time.time()
        connector = Process([str(BIN), "run", *config], env=env, log_path=work / "connector.log")

        def written():
            acked = acked_by_every_lane(http_port)
            if connector.proc.poll() is not None:
                raise RuntimeError(f"the connector exited: see {work / 'connector.log'}")
            return acked >= args.entities

        wait_until("the connector to write every entity", written, timeout=300)
        ingest_s = time.time() - started
        keys = project_keys(project)
        if keys != args.entities:
            raise RuntimeError(f"Redis holds {keys} keys of project {project}, not {args.entities}")
        log(f"  {keys:,} entities in Redis after {ingest_s:.1f} s")

        log(f"feast serve: {args.feast_workers} workers on the same Redis")
        repo = feast_repo(work, project)
        subprocess.run([feast_bin, "-c", str(repo), "apply"], check=True, env=dict(os.environ, FEAST_USAGE="False"),
                       stdout=open(work / "feast-apply.log", "w"), stderr=subprocess.STDOUT)
        # Feast's defaults but for two that only cost it: no access log to stdout, and no
        # worker restart every 1,000 requests (gunicorn's max_requests, Feast's default).
        feast = Process([feast_bin, "-c", str(repo), "serve", "--host", "127.0.0.1", "--port", str(feast_port), "--workers",
                         str(args.feast_workers), "--no-access-log", "--max-requests", "0"],
                        env=dict(os.environ, FEAST_USAGE="False"), log_path=work / "feast-serve.log")
        probe = {"features": [f"{VIEW}:{FEATURES[0][0]}"], "entities": {KEY: [f"{KEY_PREFIX}0"]}}
        wait_until("feast serve to answer",
                   lambda: feast.proc.poll() is None and bool(
                       http_json(f"http://127.0.0.1:{feast_port}/get-online-features", probe, timeout=5)),
                   timeout=180, every=0.5)
        wait_until(f"{args.feast_workers} feast serve workers", lambda: len(children(feast.proc.pid)) >= args.feast_workers)
        found = compare_answers(serving_port, feast_port, args)
        log(f"  same values from every contender ({found} features × 50 entities compared)")

        if args.cache_entities:
            log(f"a second replica of the connector (same pipeline and subscription, nothing left to "
                f"consume) serving with serving.cache_entities: {args.cache_entities:,}, "
                f"serving.threads: {args.cached_threads}")
            cached_http, cached_port = free_port(), free_port()
            cached = Process([str(BIN), "run", *config], log_path=work / "connector-cached.log",
                             env=dict(env, FC_HTTP_BIND=f"127.0.0.1:{cached_http}",
                                      FC_SERVING_BIND=f"127.0.0.1:{cached_port}",
                                      FC_INSTANCE_ID="serving-bench-cached",
                                      BENCH_SERVING_CACHE=str(args.cache_entities),
                                      BENCH_SERVING_THREADS=str(args.cached_threads)))
            wait_until("the cached replica to serve", lambda: port_open(cached_port), timeout=60, every=0.1)
            compare_answers(cached_port, feast_port, args)
        for rate in args.log_rates:
            key = f"ours_log_{rate:g}"
            log(f"a cached replica logging served features (serving.feature_logging) for {rate:.0%} of entities")
            service = work / f"service-{key}.yaml"
            service.write_text((SERVING / "service.yaml").read_text().rstrip("\n") + "\n"
                               f"  feature_logging:\n    url: file://{work}/served-{rate:g}\n"
                               f"    views:\n      {VIEW}: {rate}\n    rollover_interval: 10s\n")
            log_http, log_port = free_port(), free_port()
            process = Process([str(BIN), "run", *config[:-1], str(service)], log_path=work / f"connector-{key}.log",
                              env=dict(env, FC_HTTP_BIND=f"127.0.0.1:{log_http}",
                                       FC_SERVING_BIND=f"127.0.0.1:{log_port}", FC_INSTANCE_ID=f"serving-bench-{key}",
                                       BENCH_SERVING_CACHE=str(args.cache_entities),
                                       BENCH_SERVING_THREADS=str(args.cached_threads)))
            logged.append((key, rate, process, log_port, log_http))
            wait_until(f"the replica logging {rate:.0%} to serve", lambda port=log_port: port_open(port), timeout=60, every=0.1)
            compare_answers(log_port, feast_port, args)
        floor_ports = {key: free_port() for key in FLOORS} if 1 in sizes else {}
        if floor_ports:
            floor_servers = start_floors(work, floor_ports, floor_prefix, args, serving_port)
        pids = {"connector": [connector.proc.pid], "feast": [feast.proc.pid, *children(feast.proc.pid)],
                **({"cached": [cached.proc.pid]} if cached else {}),
                **{key: [process.proc.pid] for key, _, process, _, _ in logged},
                "redis": [redis_pid], **{key: [server.proc.pid] for key, server in zip(FLOORS, floor_servers)}}
        floors = idle_floors(pids)
        contenders = [
            ("ours_feast", "feature-connector `POST /get-online-features`", "feast", f"127.0.0.1:{serving_port}", "connector"),
            ("ours_v1", "feature-connector `/v1/features/{view}` (GET 1 entity, POST 50)", "v1",
             f"127.0.0.1:{serving_port}", "connector"),
            *([("ours_cached", f"feature-connector `POST /get-online-features`, `serving.cache_entities: "
                                f"{args.cache_entities:,}`, `serving.threads: {args.cached_threads}` (a second replica)", "feast",
                f"127.0.0.1:{cached_port}", "cached")] if cached else []),
            *[(key, f"the same, logging served features for {rate:.0%} of entities (`serving.feature_logging`)",
               "feast", f"127.0.0.1:{port}", key) for key, rate, _, port, _ in logged],
            ("feast", f"`feast serve` {feast_version(args.python)}, {args.feast_workers} workers, "
                      "`POST /get-online-features`", "feast", f"127.0.0.1:{feast_port}", "feast"),
            ("redis", "Redis directly: HMGET per entity, pipelined (ceiling)", "redis", REDIS_URL, None),
        ]
        if floor_ports:
            contenders += [
                ("floor_canned", "floor: hyper answering a canned body as long as ours (no Redis, no JSON)",
                 "feast", f"127.0.0.1:{floor_ports['floor_canned']}", "floor_canned"),
                ("floor_axum", "floor: the same through an axum router, hyper's header timer on (as ours)",
                 "feast", f"127.0.0.1:{floor_ports['floor_axum']}", "floor_axum"),
                ("floor_redis", "floor: hyper + one HMGET of 11 fields (redis-rs, multiplexed), canned body",
                 "feast", f"127.0.0.1:{floor_ports['floor_redis']}", "floor_redis"),
            ]
        # Every measurement is split into rounds and the rounds interleaved, so that the load
        # other work puts on the box while this runs falls on every contender alike.
        measurements = [(key, size, None) for size in sizes for key, *_ in contenders
                        if size == 1 or key not in FLOORS]
        measurements += [(key, 1, args.rate) for key, *_ in contenders if key != "feast" and key not in FLOORS]
        by_key = {c[0]: c for c in contenders}
        runs = {m: [] for m in measurements}
        latency_files = {m: [] for m in measurements}
        log(f"warming every contender up, then {args.rounds} interleaved rounds of "
            f"{args.duration_s / args.rounds:.1f} s per measurement")
        for key, _label, mode, target, _server in contenders:
            for size in sizes if key not in FLOORS else [1]:
                loadgen(mode, target, size, args, {}, 1.0, project=project)
        for round_ in range(args.rounds):
            for measurement in measurements:
                key, size, rate = measurement
                _, label, mode, target, server = by_key[key]
                watched = {"redis": pids["redis"], **({"server": pids[server]} if server else {})}
                path = work / f"latencies-{key}-{size}-{rate}-{round_}.bin"
                runs[measurement].append(loadgen(mode, target, size, args, watched, args.duration_s / args.rounds,
                                                 rate=rate, project=project, latencies=path))
                latency_files[measurement].append(path)
            log(f"  round {round_ + 1}/{args.rounds} done (load average {load_average()})")
        rows = {}
        for measurement in measurements:
            key, size, rate = measurement
            _, label, mode, target, server = by_key[key]
            row = pool(runs[measurement], latency_files[measurement])
            row.update(contender=label, key=key, server=server, floors=floors)
            rows[measurement] = row
            what = f"{rate:,}/s" if rate else "closed loop"
            log(f"  {size:>2} entities, {what}, {label}: {fmt(row['requests_per_s'])} requests/s "
                f"(rounds {', '.join(f'{n:,}' for n in row['per_round'])}), p50 {fmt(row['p50_ms'], 2)} ms, "
                f"p99 {fmt(row['p99_ms'], 2)} ms")
        connector.sample()
        rss = connector.rss_samples[-1] if connector.rss_samples else None
        cache = None
        if cached:
            cached.sample()
            cache = cache_counts(cached_http)
            cache["rss"] = cached.rss_samples[-1] if cached.rss_samples else None
        for key, rate, process, _, http in logged:
            process.sample()
            text = connector_metrics(http) or ""
            outcomes = {outcome: int(float(n)) for outcome, n in FEATURE_LOG_ROWS.findall(text)}
            log_counts[key] = (rate, outcomes.get("logged", 0), outcomes.get("dropped", 0),
                               process.rss_samples[-1] if process.rss_samples else None)
    finally:
        for process in (feast, connector, cached, *(p for _, _, p, _, _ in logged), *floor_servers):
            if process is not None:
                process.stop()
        deleted = project_keys(project, "del")
        matching_keys(f"{floor_prefix}*", "del")
        log(f"deleted {deleted:,} benchmark keys; topic {topic} deleted")
        delete_topic(topic)
    report = render(args, rows, floors, ingest_s, rss, load_before, load_average(), sizes, cache, log_counts)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)
    print(report)
    log(f"work dir {work} (logs); table in {args.out}")


def start_floors(work, ports, prefix, args, serving_port):
    """The floor servers of bench/programs/src/http_floor.rs, answering as many bytes as our
    1-entity answer; the Redis one reads hashes of 11 fields (as many as ours asks per
    entity), written here under `prefix`."""
    body = json.dumps({"features": [f"{VIEW}:{name}" for name, _ in FEATURES],
                       "entities": {KEY: [f"{KEY_PREFIX}1"]}}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{serving_port}/get-online-features", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        answer_bytes = len(answer.read())
    fields = " ".join(f"'f{i}', '{10_000_000 + i}'" for i in range(11))
    redis_cli("eval", f"for i = 0, {args.entities - 1} do redis.call('HSET', ARGV[1] .. i, {fields}) end",
              "0", prefix)
    servers = []
    for key, port in ports.items():
        mode = FLOOR_MODES[key]
        servers.append(Process([str(HTTP_FLOOR), "--bind", f"127.0.0.1:{port}", "--mode", mode, "--redis", REDIS_URL,
                                "--prefix", prefix, "--entities", str(args.entities),
                                "--answer-bytes", str(answer_bytes)], log_path=work / f"{key}.log"))
    for key, port in ports.items():
        wait_until(f"the {key} server", lambda port=port: port_open(port), timeout=30, every=0.1)
    return servers


def port_open(port):
    import socket
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def parse_seconds(text):
    match = re.fullmatch(r"([\d.]+)(ms|s)?", text.strip())
    if not match:
        raise SystemExit(f"not a duration: {text} (e.g. 12s, 500ms)")
    return float(match.group(1)) / (1000 if match.group(2) == "ms" else 1)


def feast_version(python):
    out = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('feast'))"],
                         capture_output=True, text=True)
    return out.stdout.strip() or "?"


def net_cpu_us(row, label):
    """µs of CPU per request of `label`'s processes over the window, less their idle burn."""
    floor_label = row["server"] if label == "server" else label
    cpu = row["cpu_s"].get(label)
    if cpu is None or not row["requests"]:
        return None
    cpu -= row["floors"].get(floor_label, 0) * row["seconds"]
    return max(cpu, 0) * 1e6 / row["requests"]


CACHE_READS = re.compile(r'^feature_connector_serving_cache_reads_total\{outcome="(\w+)"\} (\d+)$', re.M)
CACHE_INVALIDATIONS = re.compile(r"^feature_connector_serving_cache_invalidations_total (\d+)$", re.M)
FEATURE_LOG_ROWS = re.compile(r'^feature_connector_feature_log_rows_total\{view="[^"]*",outcome="(\w+)"\} (\d+)$', re.M)


def cache_counts(http_port):
    """The cached replica's `serving_cache_*` counters, from its /metrics."""
    text = connector_metrics(http_port)
    if not text:
        raise RuntimeError(f"the cached replica's /metrics (port {http_port}) did not answer")
    counts = {"hit": 0, "miss": 0, **{outcome: int(n) for outcome, n in CACHE_READS.findall(text)}}
    counts["invalidations"] = sum(int(n) for n in CACHE_INVALIDATIONS.findall(text))
    return counts


def render(args, rows, floors, ingest_s, rss, load_before, load_after, sizes, cache, log_counts):
    def ms(value):
        return fmt(value, 2)

    lines = [
        f"Serving benchmark {time.strftime('%Y-%m-%d %H:%M')} UTC, {CORES} cores (Redis, the servers and "
        f"the load generator on the same machine; load average 1/5/15 min {load_before} before, "
        f"{load_after} after: other work shares the cores). {args.entities:,} entities written by the "
        f"connector (release build, Feast layout, 10 features of mixed types) in {ingest_s:.1f} s; every "
        f"contender reads those same Redis hashes.",
        "",
        f"Closed loop: {args.connections} requests in flight at once (keep-alive connections; Redis: "
        f"{args.connections} pipelines on one multiplexed connection, as the connector's reader), random "
        f"entities, by bench/programs/src/serving_load.rs (single-threaded). Each row is {args.duration} measured in "
        f"{args.rounds} rounds of {args.duration_s / args.rounds:.1f} s (each after a {args.warmup} warm-up), "
        "the rounds of all rows interleaved so that other load on the box falls on every contender alike; "
        "requests/s over all rounds (each round's in the last column), latency percentiles of all their "
        "requests pooled. Latency: send → whole answer. CPU: µs per request (user + system, all threads, "
        "from /proc) of the server process(es) (the connector; feast serve's gunicorn master and workers), "
        "of redis-server and of the client, each net of what it burns idle "
        f"(connector {fmt(floors['connector'] * 1000, 1)}, feast serve {fmt(floors['feast'] * 1000, 1)}, "
        f"redis-server {fmt(floors['redis'] * 1000, 1)} ms per second).",
        "",
        "| contender | entities × features | requests/s | ours ÷ this | p50 / p99 / p99.9 ms | server CPU µs/req "
        "| redis-server CPU µs/req | client CPU µs/req (cores) | errors | requests/s per round |",
        "|---|---|---:|---:|---|---:|---:|---:|---|---|",
    ]
    for size in sizes:
        ours = rows[("ours_feast", size, None)]["requests_per_s"]
        for key in ("ours_feast", "ours_v1", "ours_cached", *log_counts, "feast", "redis", *FLOORS):
            r = rows.get((key, size, None))
            if r is None:
                continue
            client_cores = r["client_cpu_s"] / r["seconds"]
            lines.append(
                f"| {r['contender']} | {size} × 10 | {fmt(r['requests_per_s'])} "
                f"| {fmt(ratio(ours, r['requests_per_s']), 2)} "
                f"| {ms(r['p50_ms'])} / {ms(r['p99_ms'])} / {ms(r['p999_ms'])} "
                f"| {fmt(net_cpu_us(r, 'server'), 1)} | {fmt(net_cpu_us(r, 'redis'), 1)} "
                f"| {fmt(r['client_cpu_s'] * 1e6 / max(r['requests'], 1), 1)} ({client_cores:.2f}"
                f"{' ‡' if client_cores >= CLIENT_BOUND else ''}) "
                f"| {errors(r)} | {' / '.join(f'{n:,}' for n in r['per_round'])} |")
    lines += [
        "",
        f"‡ the client's one thread was busy ≥ {CLIENT_BOUND:.0%} of the window: that row is bounded by the "
        "client (with the box's other core taken by Redis and the rest, a second client thread gave less in "
        "trials, not more). `feast serve` ran with Feast's defaults but `--no-access-log` and "
        "`--max-requests 0` (no worker restart every 1,000 requests): both only cost it.",
        "",
        f"Open loop: 1-entity requests at {args.rate:,} requests/s over {args.connections} connections "
        "(sent on schedule; a request that waits for its connection counts from when it was due):",
        "",
        "| contender | requests/s achieved | p50 / p90 / p99 / p99.9 / max ms | server CPU µs/req "
        "| redis-server CPU µs/req | errors |",
        "|---|---:|---|---:|---:|---|",
    ]
    for key in ("ours_feast", "ours_v1", "ours_cached", *log_counts, "redis"):
        r = rows.get((key, 1, args.rate))
        if r is None:
            continue
        lines.append(
            f"| {r['contender']} | {fmt(r['requests_per_s'])} | {ms(r['p50_ms'])} / {ms(r['p90_ms'])} / "
            f"{ms(r['p99_ms'])} / {ms(r['p999_ms'])} / {ms(r['max_ms'])} | {fmt(net_cpu_us(r, 'server'), 1)} "
            f"| {fmt(net_cpu_us(r, 'redis'), 1)} | {errors(r)} |")
    lines += ["", f"Connector RSS after the run: {fmt(rss)} MB."]
    if cache:
        reads = cache["hit"] + cache["miss"]
        lines.append(f"The cached replica: {cache['hit']:,} of {reads:,} entity reads answered from its cache "
                     f"({fmt(100 * cache['hit'] / max(reads, 1), 1)} %, warm-ups included), "
                     f"{cache['invalidations']:,} invalidations, RSS {fmt(cache['rss'])} MB after the run.")
    for rate, logged_rows, dropped_rows, log_rss in log_counts.values():
        lines.append(f"The replica logging {rate:.0%} of entities: {logged_rows:,} rows logged (committed before "
                     f"its /metrics was read), {dropped_rows:,} dropped, RSS {fmt(log_rss)} MB after the run.")
    lines.append("")
    lines += targets(args, rows, sizes)
    return "\n".join(lines) + "\n"


def errors(row):
    parts = [f"{kind}: {n}" for kind, n in row["errors"].items()]
    if row.get("misses"):
        parts.append(f"not found: {row['misses']}")
    return ", ".join(parts) or "0"


def targets(args, rows, sizes):
    out = ["Targets, from this run:", "", "| target | this run | verdict |", "|---|---:|---|"]
    variants = [("ours_feast", "")] + ([("ours_cached", ", cache on")] if ("ours_cached", sizes[0], None) in rows else [])
    for key, variant in variants:
        for size in sizes:
            ours, feast = rows[(key, size, None)], rows[("feast", size, None)]
            x = ratio(ours["requests_per_s"], feast["requests_per_s"])
            out.append(f"| `/get-online-features`{variant} requests/s ≥ 30 × `feast serve` ({args.feast_workers} "
                       f"workers), {size} entit{'y' if size == 1 else 'ies'}, {args.connections} in flight "
                       f"| {fmt(ours['requests_per_s'])} vs {fmt(feast['requests_per_s'])} = {fmt(x, 1)} × "
                       f"| {verdict(at_least(x, 30))} |")
    for key, variant in variants:
        if 1 in sizes:
            fixed = rows[(key, 1, args.rate)]
            out.append(f"| p99 ≤ 1 ms, 1-entity `/get-online-features`{variant} at {args.rate:,} requests/s "
                       f"| {fmt(fixed['p99_ms'], 2)} ms | {verdict(at_most(fixed['p99_ms'], 1))} |")
            full = rows[(key, 1, None)]
            out.append(f"| p99 ≤ 5 ms at full load, 1-entity `/get-online-features`{variant} ({args.connections} "
                       f"in flight, {fmt(full['requests_per_s'])} requests/s) | {fmt(full['p99_ms'], 2)} ms "
                       f"| {verdict(at_most(full['p99_ms'], 5))} |")
        if 50 in sizes:
            ours, ceiling = rows[(key, 50, None)], rows[("redis", 50, None)]
            x = ratio(ours["requests_per_s"], ceiling["requests_per_s"])
            out.append(f"| 50-entity `/get-online-features`{variant} requests/s ≥ 0.7 × direct Redis "
                       f"| {fmt(ours['requests_per_s'])} vs {fmt(ceiling['requests_per_s'])} = {fmt(x, 2)} × "
                       f"| {verdict(at_least(x, 0.7))} |")
    out += ["", "CPU per request of the whole path (server + redis-server + client, µs), which bounds "
            "requests/s when every process shares the same cores:", ""]
    for size in sizes:
        paths = {key: whole_path_us(rows[(key, size, None)]) for key in ("ours_feast", "feast", "redis")}
        if ("ours_cached", size, None) in rows:
            paths["ours_cached"] = whole_path_us(rows[("ours_cached", size, None)])
        out.append(f"- {size} entit{'y' if size == 1 else 'ies'}: ours {fmt(paths['ours_feast'], 1)} "
                   f"(server {fmt(net_cpu_us(rows[('ours_feast', size, None)], 'server'), 1)}), `feast serve` "
                   f"{fmt(paths['feast'], 1)} ({fmt(ratio(paths['feast'], paths['ours_feast']), 1)} × ours), "
                   f"direct Redis {fmt(paths['redis'], 1)} ({fmt(ratio(paths['redis'], paths['ours_feast']), 2)} × ours)"
                   + (f", ours with the cache {fmt(paths['ours_cached'], 1)} (server "
                      f"{fmt(net_cpu_us(rows[('ours_cached', size, None)], 'server'), 1)})" if "ours_cached" in paths else ""))
    if all((key, 1, None) in rows for key in FLOORS):
        feast = rows[("feast", 1, None)]["requests_per_s"]
        parts = []
        for key, what in zip(FLOORS, ("hyper answering alone", "through axum", "hyper after one HMGET")):
            r = rows[(key, 1, None)]
            parts.append(f"{what} {fmt(r['requests_per_s'])} requests/s = {fmt(ratio(r['requests_per_s'], feast), 1)} × "
                         f"`feast serve`, whole path {fmt(whole_path_us(r), 1)} µs (server "
                         f"{fmt(net_cpu_us(r, 'server'), 1)})")
        out.append(f"- 1 entity, the floor of our stack (hyper + redis-rs, no request work): {'; '.join(parts)}")
    return out


def whole_path_us(row):
    parts = [net_cpu_us(row, "server") if row["server"] else 0, net_cpu_us(row, "redis"),
             row["client_cpu_s"] * 1e6 / row["requests"] if row["requests"] else None]
    return None if None in parts else sum(parts)


if __name__ == "__main__":
    main()
