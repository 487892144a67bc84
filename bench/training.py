"""Training sets (docs/aggregations.md): `offline training-set` against pandas doing the same
point-in-time join on the same machine.

1. --events bench events (100,000 Zipf-1.1 entities; event times 259 ms apart, so 10 million
   span 30 days) published and ingested into a Delta table on local disk by the dist
   connector (online and offline; the aggregations are not needed to build the table).
2. An entity file of --rows rows: entities uniform over the 100,000, timestamps within a day
   after the last publish (the table's events were all published just now).
3. `feature-connector offline training-set` with the benchmark's 5 aggregations x 3 windows,
   and bench/training_pandas.py (deltalake + pandas): wall time, CPU (user + sys) and peak
   RSS of each from /usr/bin/time, and pandas' features compared with ours.

usage: bench/training.sh [--events N] [--rows N] [--table DIR (reuse a table built before)]
"""
import argparse, json, os, random, re, shutil, socket, subprocess, sys, time, urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
BIN = ROOT / "target/dist/feature-connector"
ADMIN = os.environ.get("PULSAR_ADMIN_URL", "http://127.0.0.1:8080")
sys.path.insert(0, str(BENCH))
from aggregations import AGGREGATIONS  # noqa: E402


def timed(argv, env):
    """(stdout, wall s, cpu s, peak RSS MB) of `argv` under /usr/bin/time -v."""
    start = time.time()
    out = subprocess.run(["/usr/bin/time", "-v", *argv], env=env, capture_output=True, text=True)
    wall = time.time() - start
    if out.returncode != 0:
        sys.exit(f"{argv[0]} failed: {out.stderr[-3000:]}")
    user = float(re.search(r"User time \(seconds\): ([\d.]+)", out.stderr).group(1))
    system = float(re.search(r"System time \(seconds\): ([\d.]+)", out.stderr).group(1))
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", out.stderr).group(1)) // 1024
    return out.stdout, round(wall, 1), round(user + system, 1), rss


def backlog(topic, subscription):
    url = f"{ADMIN}/admin/v2/persistent/{topic.removeprefix('persistent://')}/stats"
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.load(r)["subscriptions"][subscription]["msgBacklog"]
    except Exception:
        return None


def build_table(args, env):
    stamp = int(time.time())
    topic = f"persistent://public/default/train-bench-{stamp}"
    env = dict(env, BENCH_TOPIC=topic, BENCH_SUBSCRIPTION="train")
    started = time.time()
    subprocess.run([str(BIN), "produce", "--root", str(BENCH), "--pipeline", "bench", "--topic", topic,
                    "--count", str(args.events), "--entities", "100000", "--zipf", "1.1", "--batch", "100",
                    "--producers", "4", "--time-step-ms", "259"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    produced = time.time() - started
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    run_env = dict(env, FC_HTTP_BIND=f"127.0.0.1:{port}", FC_SERVING_BIND="", FC_INSTANCE_ID="train")
    connector = subprocess.Popen([str(BIN), "run", "--root", str(BENCH)], env=run_env,
                                 stdin=subprocess.DEVNULL, stderr=open("/tmp/train-bench-ingest.log", "w"))
    started = time.time()
    while backlog(topic, "train") != 0 or time.time() - started < 3:
        if connector.poll() is not None:
            sys.exit("connector died: /tmp/train-bench-ingest.log")
        time.sleep(1)
    connector.terminate(); connector.wait()
    return {"produce_s": round(produced, 1), "ingest_s": round(time.time() - started, 1)}, time.time()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--table", default="/tmp/train-bench-table")
    parser.add_argument("--python", required=True, help="a python with deltalake, pandas, pyarrow")
    args = parser.parse_args()
    table_root = Path(args.table)
    env = dict(os.environ, BENCH_OFFLINE_URL=f"file://{table_root}", BENCH_TOPIC="persistent://public/default/unused",
               RUST_LOG="warn")
    env.pop("BENCH_AGGREGATIONS", None)
    stamp_file = table_root / "built-at"
    if stamp_file.exists():
        built, published_by = json.loads(stamp_file.read_text())
    else:
        shutil.rmtree(table_root, ignore_errors=True)
        table_root.mkdir(parents=True)
        built, published_by = build_table(args, env)
        built["events"] = args.events
        stamp_file.write_text(json.dumps([built, published_by]))
    published_ms = int(published_by * 1000)

    import pyarrow as pa, pyarrow.parquet as pq
    rng = random.Random(5)
    spine = pa.table({
        "entity_id": [f"entity-{rng.randrange(100_000)}" for _ in range(args.rows)],
        "event_timestamp": [published_ms + rng.randrange(86_400_000) for _ in range(args.rows)],
    })
    spine_path = table_root.parent / "train-bench-spine.parquet"
    pq.write_table(spine, spine_path)

    agg_env = dict(env, BENCH_AGGREGATIONS=AGGREGATIONS)
    ours_path = table_root.parent / "train-bench-ours.parquet"
    ours_out, ours_wall, ours_cpu, ours_rss = timed(
        [str(BIN), "offline", "training-set", "--root", str(BENCH), "--pipeline", "bench",
         "--entities", str(spine_path), "--output", str(ours_path)], agg_env)
    pandas_path = table_root.parent / "train-bench-pandas.parquet"
    pandas_out, pandas_wall, pandas_cpu, pandas_rss = timed(
        [args.python, str(BENCH / "training_pandas.py"), f"file://{table_root}/bench",
         str(spine_path), str(ours_path), str(pandas_path)], env)
    pandas = json.loads(pandas_out.strip().splitlines()[-1])

    print(f"# Training-set benchmark, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    print(f"`bash bench/training.sh --events {built['events']} --rows {args.rows}`: a table of "
          f"{built['events']:,} events (100,000 Zipf-1.1 entities over 30 days; produced in {built['produce_s']} s, "
          f"ingested in {built['ingest_s']} s), {args.rows:,} entity rows, 5 aggregations x 3 windows.\n")
    print("| | wall s | CPU s (user + sys) | peak RSS MB |")
    print("|---|---|---|---|")
    print(f"| `offline training-set` | {ours_wall} | {ours_cpu} | {ours_rss} |")
    print(f"| pandas (deltalake read + merge + filtered groupby) | {pandas_wall} | {pandas_cpu} | {pandas_rss} |")
    print(f"\npandas / ours, wall: **{pandas_wall / ours_wall:.1f}x** (target >= 10); pandas' steps: "
          f"read {pandas['read_table_s']} s, join {pandas['join_s']} s ({pandas['joined_rows']:,} joined rows), "
          f"aggregate {pandas['aggregate_s']} s. Features differing from ours: **{pandas['mismatches']}**.\n")
    print(f"Ours said: `{ours_out.strip()}`")


if __name__ == "__main__":
    main()
