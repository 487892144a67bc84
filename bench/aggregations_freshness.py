"""Freshness of the aggregations sink against the online sink (docs/aggregations.md), in one
open-loop run each: the dist connector runs the bench pipeline with 5 aggregations x 3 windows
(bench/aggregations.py's) while `produce --rate R --live-event-time` sends --events events of
100,000 Zipf-1.1 entities; then its own histograms
`feature_connector_freshness_publish_time_seconds{sink=...}` (Pulsar publish time -> the
sink's write acknowledged by Redis, after which a read serves it) give each sink's
percentiles, as the upper bound of the histogram bucket holding them (buckets grow by
2^(1/4) from 0.5 ms).

usage: bench/aggregations_freshness.py [--events N] [--rate R]
Prints a Markdown report.
"""
import argparse, os, re, subprocess, sys, tempfile, time, urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from aggregations import AGGREGATIONS, BENCH, DIST, free_port, start_connector  # noqa: E402


def metrics(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def bucket_counts(text, name, label):
    """Per (value of `label`, upper bound) of histogram `name`, its cumulative count."""
    counts = {}
    for line in text.splitlines():
        m = re.match(rf'{name}_bucket\{{(.*)\}} (\d+)', line)
        if m:
            sink = re.search(rf'{label}="([^"]+)"', m.group(1)).group(1)
            le = re.search(r'le="([^"]+)"', m.group(1)).group(1)
            counts[(sink, float(le))] = int(m.group(2))
    return counts


def quantiles(before, after, name, qs, label="sink"):
    """Per value of `label` of histogram `name`, over the samples between the `before` and
    `after` scrapes: (count, {q: upper bound in s of the bucket holding quantile q})."""
    start = bucket_counts(before, name, label)
    buckets = {}
    for (sink, le), n in bucket_counts(after, name, label).items():
        buckets.setdefault(sink, []).append((le, n - start.get((sink, le), 0)))
    out = {}
    for sink, pairs in buckets.items():
        pairs.sort()
        total = pairs[-1][1]
        out[sink] = (total, {q: next((le for le, n in pairs if n >= q * total), float("inf")) for q in qs})
    return out


def percentiles(values, qs):
    """Table cells of `values` ({q: seconds}) in ms, in the order of `qs`."""
    return " | ".join(f"{values[q] * 1000:.3g}" for q in qs)


def run_once(args, aggregations):
    """One connector run over a new topic while the producer sends: its metrics text before
    and after the timed part, and the producer's closing line."""
    stamp = int(time.time() * 1000)
    topic = f"persistent://public/default/agg-fresh-{stamp}"
    offline = tempfile.mkdtemp(prefix="agg-fresh-offline-")
    port = free_port()
    env = dict(os.environ, BENCH_TOPIC=topic, BENCH_OFFLINE_URL=f"file://{offline}", RUST_LOG="warn",
               BENCH_AGGREGATIONS=aggregations, BENCH_SUBSCRIPTION=f"fresh-{stamp}",
               FC_HTTP_BIND=f"127.0.0.1:{port}", FC_SERVING_BIND="", FC_INSTANCE_ID="agg-fresh")
    produce = [str(DIST / "feature-connector"), "produce", "--root", str(BENCH), "--pipeline", "bench",
               "--topic", topic]
    # The topic exists before the connector subscribes at its end: a first event creates it.
    subprocess.run(produce + ["--count", "1", "--entities", "1"], env=env, check=True, capture_output=True)
    connector = start_connector([], env, "/tmp/agg-fresh.log")
    url = f"http://127.0.0.1:{port}"
    paced = ["--entities", "100000", "--zipf", "1.1", "--batch", "100", "--producers", "4",
             "--rate", str(args.rate), "--live-event-time"]
    try:
        # Warm-up (the table's creation, the first connections): 3 s at the rate, not timed.
        subprocess.run(produce + ["--count", str(args.rate * 3)] + paced, env=env, check=True, capture_output=True)
        time.sleep(2)
        before = metrics(f"{url}/metrics")
        produced = subprocess.run(produce + ["--count", str(args.events)] + paced,
                                  env=env, capture_output=True, text=True, check=True).stdout.strip()
        time.sleep(3)
        return before, metrics(f"{url}/metrics"), produced.splitlines()[-1] if produced else ""
    finally:
        connector.terminate()
        connector.wait()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=400_000)
    parser.add_argument("--rate", type=int, default=20_000)
    args = parser.parse_args()
    qs = (0.5, 0.99, 0.999)
    name = "feature_connector_freshness_publish_time_seconds"
    *plain, plain_produced = run_once(args, "[]")
    *aggregated, agg_produced = run_once(args, AGGREGATIONS)
    runs = (("without aggregations", plain), ("with 5 aggregations x 3 windows", aggregated))
    rows = [(label, quantiles(*scrapes, name, qs)) for label, scrapes in runs]
    print(f"# Aggregations freshness, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    print(f"`bench/aggregations_freshness.py --events {args.events} --rate {args.rate}`: the bench pipeline "
          f"(online, offline; shared delivery), dist build, run without and then with the aggregations, "
          f"each on a new topic while the producer sends, timed after a 3-second warm-up at the same rate "
          f"(the table's creation). Producers: `{plain_produced}`; `{agg_produced}`.\n")
    print("| run | sink | writes timed | p50 ≤ ms | p99 ≤ ms | p99.9 ≤ ms |")
    print("|---|---|---:|---:|---:|---:|")
    for label, found in rows:
        for sink, (count, values) in sorted(found.items()):
            print(f"| {label} | {sink} | {count:,} | " + percentiles(values, qs) + " |")
    print("\nWhere the time goes: each sink's write (`feature_connector_sink_write_seconds`, one sample per "
          "write call, a batch or merged batches) over the same timed part.\n")
    print("| run | sink | writes | p50 ≤ ms | p99 ≤ ms | p99.9 ≤ ms |")
    print("|---|---|---:|---:|---:|---:|")
    for label, scrapes in runs:
        for sink, (count, values) in sorted(quantiles(*scrapes, "feature_connector_sink_write_seconds", qs).items()):
            print(f"| {label} | {sink} | {count:,} | " + percentiles(values, qs) + " |")
    phases = quantiles(*aggregated, "feature_connector_aggregation_update_seconds", qs, label="phase")
    print("\nThe aggregations' write by phase (`feature_connector_aggregation_update_seconds`: `apply` "
          "decoding, applying and encoding, `write` the script calls' round trip, `redo` the entities whose "
          "hash was not what the sink started from, applied and written again).\n")
    print("| phase | samples | p50 ≤ ms | p99 ≤ ms | p99.9 ≤ ms |")
    print("|---|---:|---:|---:|---:|")
    for phase in ("apply", "write", "redo"):
        if phase in phases:
            count, values = phases[phase]
            print(f"| {phase} | {count:,} | " + percentiles(values, qs) + " |")
    online = rows[0][1].get("online")
    tiles = rows[1][1].get("aggregations")
    if online and tiles:
        verdict = "holds" if tiles[1][0.99] <= online[1][0.99] else "does not hold"
        print(f"\nAggregations sink p99 within the online sink's p99 without aggregations (same histogram "
              f"bucket or lower): **{verdict}**.")


if __name__ == "__main__":
    main()
