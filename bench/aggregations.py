"""Windowed aggregations (docs/aggregations.md): what they cost the connector and Redis.

1. Ingest: one topic of --events bench events (100,000 Zipf-1.1 entities), drained by the
   dist connector twice on new subscriptions (bench/drain.py): the bench pipeline as it is
   (online + offline), and the same with 5 aggregations x 3 windows (count; sum, avg, max of
   numbers; last_k of 5) as a third sink. Events/s and connector CPU per event of each, the
   ratio, and the extra CPU per event per aggregation.
2. Redis memory per entity: MEMORY USAGE of the tile hashes the aggregated drain wrote
   (sampled), and of one entity at its fullest (an event every 20 minutes over 31 days:
   bench/programs tile_memory).
3. Reads: /v1/features of one entity (serving_load): the 15 aggregated features against the
   pipeline's 10 plain features, closed loop (requests/s) and open loop at 1,000/s (latency
   percentiles), over --serve-entities entities whose tiles are at their fullest.

usage: bench/aggregations.sh [--events N] [--serve-entities N] [--duration 10s]
Prints a Markdown report (bench/results/aggregations-latest.md is where the driver keeps it).
"""
import argparse, json, os, socket, subprocess, sys, tempfile, time, urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
DIST = ROOT / "target/dist"
AGGREGATIONS = ("[{name: events, function: count, windows: [1h, 1d, 30d]}, "
                "{name: score_sum, function: sum, column: score, windows: [1h, 1d, 30d]}, "
                "{name: spend_avg, function: avg, column: spend_30d, windows: [1h, 1d, 30d]}, "
                "{name: clicks_max, function: max, column: clicks_1h, windows: [1h, 1d, 30d]}, "
                "{name: last_items, function: last_k, k: 5, column: last_item_id, windows: [1h, 1d, 30d]}]")
AGG_FEATURES = [f"{n}_{w}" for n in ("events", "score_sum", "spend_avg", "clicks_max", "last_items")
                for w in ("1h", "1d", "30d")]
PLAIN_FEATURES = ["clicks_1h", "views_1h", "last_item_id", "sessions_7d", "spend_30d", "score",
                  "ctr_7d", "is_active", "country", "segment"]


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    return port


def start_connector(argv, env, log):
    """The dist connector `run` with `argv` after it, once its /readyz answers on
    env's FC_HTTP_BIND; stderr to `log`."""
    connector = subprocess.Popen([str(DIST / "feature-connector"), "run", "--root", str(BENCH), *argv], env=env,
                                 stdin=subprocess.DEVNULL, stderr=open(log, "w"))
    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://{env['FC_HTTP_BIND']}/readyz", timeout=1)
            return connector
        except Exception:
            if connector.poll() is not None:
                sys.exit(f"connector died: {log}")
            time.sleep(0.1)
    connector.terminate()
    sys.exit(f"connector not ready after 60 s: {log}")


def run(argv, env, what):
    out = subprocess.run(argv, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{what} failed ({out.returncode}): {out.stderr[-3000:]}")
    return out.stdout


def drain(topic, events, subscription, env):
    line = run([sys.executable, str(BENCH / "drain.py"), topic, str(events), subscription, "shared"],
               env, f"drain {subscription}").strip().splitlines()[-1]
    return json.loads(line)


def redis_memory(env, pattern, sample):
    import redis
    r = redis.Redis.from_url(env.get("REDIS_URL", "redis://127.0.0.1:6379"))
    sizes = []
    for key in r.scan_iter(pattern, count=5000):
        sizes.append(r.memory_usage(key, samples=0))
        if len(sizes) >= sample:
            break
    sizes.sort()
    return {"keys": len(sizes), "mean": round(sum(sizes) / max(len(sizes), 1)),
            "p50": sizes[len(sizes) // 2] if sizes else 0, "max": sizes[-1] if sizes else 0}


def serve(args, env, features, rate=None):
    argv = [str(DIST / "serving_load"), "--mode", "v1", "--target", env["FC_SERVING_BIND"], "--view", "bench",
            "--features", ",".join(features), "--key", "entity_id", "--key-prefix", "entity-",
            "--entities", str(args.serve_entities), "--batch", "1", "--connections", "16",
            "--warmup", "2s", "--duration", args.duration]
    if rate:
        argv += ["--rate", str(rate)]
    return json.loads(run(argv, env, "serving_load").strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=500_000)
    parser.add_argument("--serve-entities", type=int, default=10_000)
    parser.add_argument("--duration", default="10s")
    args = parser.parse_args()
    stamp = int(time.time())
    topic = f"persistent://public/default/agg-bench-{stamp}"
    offline = tempfile.mkdtemp(prefix="agg-bench-offline-")
    env = dict(os.environ, BENCH_TOPIC=topic, BENCH_OFFLINE_URL=f"file://{offline}", RUST_LOG="warn")
    env.pop("BENCH_AGGREGATIONS", None)
    run([str(DIST / "feature-connector"), "produce", "--root", str(BENCH), "--pipeline", "bench", "--topic", topic,
         "--count", str(args.events), "--entities", "100000", "--zipf", "1.1", "--batch", "100",
         "--producers", "4"], env, "produce")

    plain = drain(topic, args.events, f"plain-{stamp}", env)
    agg_env = dict(env, BENCH_AGGREGATIONS=AGGREGATIONS)
    aggregated = drain(topic, args.events, f"agg-{stamp}", agg_env)
    drained_memory = redis_memory(env, "bench:tiles:bench:*", 5000)

    fullest = json.loads(run([str(DIST / "tile_memory"), "--root", str(BENCH), "--pipeline", "bench",
                              "--redis", env.get("REDIS_URL", "redis://127.0.0.1:6379"),
                              "--write-entities", str(args.serve_entities)],
                             agg_env, "tile_memory").strip().splitlines()[-1])

    # Reads, from a connector whose subscription is drained already (no ingest meanwhile).
    serving_env = dict(agg_env, BENCH_SUBSCRIPTION=f"agg-{stamp}", FC_HTTP_BIND=f"127.0.0.1:{free_port()}",
                       FC_SERVING_BIND=f"127.0.0.1:{free_port()}", FC_INSTANCE_ID="agg-serve")
    connector = start_connector(["--config", str(BENCH / "serving/service.yaml")], serving_env,
                                "/tmp/agg-bench-serving.log")
    try:
        reads = {
            "plain_closed": serve(args, serving_env, PLAIN_FEATURES),
            "agg_closed": serve(args, serving_env, AGG_FEATURES),
            "plain_1000": serve(args, serving_env, PLAIN_FEATURES, 1000),
            "agg_1000": serve(args, serving_env, AGG_FEATURES, 1000),
        }
    finally:
        connector.terminate(); connector.wait()

    n_agg = 5
    extra_cpu = aggregated["connector_cpu_us_ev"] - plain["connector_cpu_us_ev"]
    print(f"# Aggregations benchmark, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    print(f"`bash bench/aggregations.sh --events {args.events} --serve-entities {args.serve_entities} --duration {args.duration}`; "
          f"{args.events:,} events of 100,000 Zipf-1.1 entities; dist build.\n")
    print("| ingest (bench/drain.py, shared delivery) | events/s | connector CPU µs/event | Redis CPU µs/event | RSS peak MB |")
    print("|---|---|---|---|---|")
    for label, d in (("online + offline", plain), ("online + offline + 5 aggregations x 3 windows", aggregated)):
        print(f"| {label} | {d['events_per_s']:,} | {d['connector_cpu_us_ev']} | {d['redis_cpu_us_ev']} | {d['rss_peak_mb']} |")
    print(f"\nRatio with/without: **{aggregated['events_per_s'] / plain['events_per_s']:.2f}** (target >= 0.5); "
          f"extra connector CPU {extra_cpu:.2f} µs/event, {extra_cpu / n_agg:.2f} µs per event per aggregation.\n")
    print(f"Redis memory per entity: tile hashes after the drain (MEMORY USAGE, {drained_memory['keys']} sampled): "
          f"mean {drained_memory['mean']} B, p50 {drained_memory['p50']} B, max {drained_memory['max']} B; "
          f"at its fullest ({fullest['events']} events over 31 days, {fullest['tiles']} tiles, "
          f"{fullest['tile_bytes']} B of tiles, {fullest['positions_bytes']} B of positions): "
          f"**{fullest['memory_usage_bytes']} B** ({fullest['encoding']}; target <= 4096).\n")
    print("| /v1/features, 1 entity | requests/s | p50 ms | p99 ms | p99.9 ms | errors |")
    print("|---|---|---|---|---|---|")
    for label, key in (("10 plain features, closed loop (16 connections)", "plain_closed"),
                       ("15 aggregated features, closed loop (16 connections)", "agg_closed"),
                       ("10 plain features, 1,000/s", "plain_1000"),
                       ("15 aggregated features, 1,000/s", "agg_1000")):
        r = reads[key]
        print(f"| {label} | {r.get('requests_per_s', 0):,.0f} | {r.get('p50_ms')} | {r.get('p99_ms')} | {r.get('p999_ms')} | {r.get('errors')} |")
    ratio = reads["agg_closed"].get("requests_per_s", 0) / max(reads["plain_closed"].get("requests_per_s", 1), 1)
    print(f"\nAggregated/plain requests/s: **{ratio:.2f}** (target >= 0.5); aggregated entities hold "
          f"their fullest tiles ({args.serve_entities:,} of them).")
    print("\n```json")
    print(json.dumps({"plain": plain, "aggregated": aggregated, "memory": drained_memory, "fullest": fullest, "reads": reads}, indent=1))
    print("```")


if __name__ == "__main__":
    main()
