#!/usr/bin/env python3
"""Peer contender: Feast's own online write path, FeatureStore.write_to_online_store.

What it models: a team that already has its events as a pandas DataFrame and pushes them into
Feast's Redis online store with the Feast SDK (0.67, feast[redis], default Redis online-store
settings: per call, one pipeline reads each entity's `_ts:bench`, a second writes the rows that
are newer). It writes the same BenchFeatures events the connector and the other peers consume,
into the same Redis, in Feast's own layout (project --project, feature view "bench").

Steps:
  1. (not timed) Read --events messages from --topic with a Pulsar Reader from the earliest
     message and decode each raw Avro datum with fastavro.schemaless_reader.
  2. (not timed) Lay out a Feast repo in --repo-dir: feature_store.yaml (provider local, file
     registry, Redis online store, file offline store, entity_key_serialization_version 3),
     a one-row Parquet for the FileSource (write_to_online_store never reads it), then
     FeatureStore.apply of Entity "entity" (join key entity_id, STRING) and FeatureView "bench"
     (the 10 features, ttl 1 day).
  3. (not timed) Build one DataFrame: entity_id, event_timestamp (tz-aware UTC), the features.
  4. (TIMED) store.write_to_online_store("bench", chunk) over the DataFrame in --chunk rows.

What it measures: wall time and the process's CPU time (user+sys, all threads) of step 4 only;
peak RSS of the whole process (it holds all events in memory). Stdout gets exactly one line:
  {"contender":"feast-write_to_online_store","events":N,"seconds":S,"events_per_s":R,
   "cpu_seconds":C,"rss_peak_mb":M}
Everything else (Feast's and pulsar-client's output) goes to stderr.

Run it against a project that has no keys in Redis yet (a new --project per run, or its keys
deleted first): Feast skips rows whose event time is not newer than the stored `_ts`, so a
re-run over the same events measures the timestamp reads only (about half the time here).

Exit codes: 0 done; 1 timed out reading (--timeout) or failed; 2 Pulsar or Redis unreachable
or bad arguments.

Usage (interpreter from bench/peers/setup_venv.sh):
  PY=$(bench/peers/setup_venv.sh | tail -1)
  $PY bench/peers/feast_writer.py --topic persistent://public/default/T --events 1000000
"""
from __future__ import annotations

import argparse
import io
import json
import os
import re
import resource
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import fastavro
import pandas as pd
import pulsar
import redis

os.environ.setdefault("FEAST_USAGE", "False")  # no usage telemetry

CONTENDER = "feast-write_to_online_store"
DEFAULT_SCHEMA = Path(__file__).resolve().parent.parent / "schemas" / "bench_features.avsc"
VIEW = "bench"
# The features' Feast types, in schema order (Avro long/int/double/float/boolean/string).
FEATURE_TYPES = {
    "clicks_1h": "Int64",
    "views_1h": "Int64",
    "last_item_id": "Int64",
    "sessions_7d": "Int32",
    "spend_30d": "Float64",
    "score": "Float64",
    "ctr_7d": "Float32",
    "is_active": "Bool",
    "country": "String",
    "segment": "String",
}
# pandas dtypes that keep the Avro widths (fastavro gives Python int/float for int and float).
PANDAS_DTYPES = {"sessions_7d": "int32", "ctr_7d": "float32"}


class Fatal(Exception):
    """An error that ends the run with a message and an exit code."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


def claim_stdout():
    """A private handle on stdout for the JSON line; fd 1 itself then points at stderr, so
    what Feast or pulsar-client's C++ logger prints lands on stderr."""
    out = os.fdopen(os.dup(1), "w")
    sys.stdout.flush()
    os.dup2(2, 1)
    return out


def cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def avro_schema(path: Path):
    """The parsed Avro schema, event_time's logicalType dropped: it decodes as the epoch-ms long
    (same wire bytes) and becomes a datetime column in one vectorised step later."""
    avro = json.loads(path.read_text())
    for field in avro["fields"]:
        if isinstance(field["type"], dict):
            field["type"] = field["type"]["type"]
    return fastavro.parse_schema(avro)


def read_events(args, deadline: float) -> list[dict]:
    """The first --events messages of the topic, decoded."""
    schema = avro_schema(args.schema)
    # Warnings and up, to fd 1 = stderr (claim_stdout). Not a logging.Logger: with one, the
    # interpreter's exit aborts now and then (apache/pulsar-client-python#256).
    client = pulsar.Client(args.pulsar_url, operation_timeout_seconds=10,
                           connection_timeout_ms=5000,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        try:
            reader = client.create_reader(args.topic, pulsar.MessageId.earliest,
                                          receiver_queue_size=5000)
        except pulsar.PulsarException as e:
            raise Fatal(f"cannot read {args.topic} at {args.pulsar_url}: {e}", 2) from e
        rows = []
        while len(rows) < args.events:
            if time.monotonic() > deadline:
                raise Fatal(f"timed out after {args.timeout:g}s: read {len(rows)} of "
                            f"{args.events} messages", 1)
            try:
                msg = reader.read_next(timeout_millis=200)
            except pulsar.Timeout:
                continue
            rows.append(fastavro.schemaless_reader(io.BytesIO(msg.data()), schema))
        return rows
    finally:
        client.close()


def events_frame(rows: list[dict]) -> pd.DataFrame:
    """entity_id, event_timestamp (tz-aware UTC), then the features with their Avro widths."""
    df = pd.DataFrame.from_records(rows, columns=["entity_id", "event_time", *FEATURE_TYPES])
    df.insert(1, "event_timestamp", pd.to_datetime(df.pop("event_time"), unit="ms", utc=True))
    return df.astype(PANDAS_DTYPES)


def feature_store(repo: Path, project: str, redis_addr: str, sample: pd.DataFrame):
    """A FeatureStore over a fresh repo in `repo`, with Entity "entity" and view "bench" applied."""
    from feast import Entity, FeatureStore, FeatureView, Field, FileSource, ValueType
    from feast import types

    data = repo / "data"
    data.mkdir(parents=True, exist_ok=True)
    (repo / "feature_store.yaml").write_text(
        f"project: {json.dumps(project)}\n"
        f"registry: {json.dumps(str(data / 'registry.db'))}\n"
        "provider: local\n"
        "online_store:\n"
        "  type: redis\n"
        f"  connection_string: {json.dumps(redis_addr)}\n"
        "offline_store:\n"
        "  type: file\n"
        "entity_key_serialization_version: 3\n"
    )
    source_path = data / "bench_source.parquet"
    sample.to_parquet(source_path, index=False)

    entity = Entity(name="entity", join_keys=["entity_id"], value_type=ValueType.STRING)
    view = FeatureView(
        name=VIEW,
        entities=[entity],
        ttl=timedelta(days=1),
        schema=[Field(name="entity_id", dtype=types.String)]
        + [Field(name=name, dtype=getattr(types, t)) for name, t in FEATURE_TYPES.items()],
        online=True,
        source=FileSource(name=f"{VIEW}_source", path=str(source_path),
                          timestamp_field="event_timestamp"),
    )
    store = FeatureStore(repo_path=str(repo))
    store.apply([entity, view])
    return store


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topic", required=True)
    ap.add_argument("--events", type=int, required=True, help="how many messages to write")
    ap.add_argument("--pulsar-url", default="pulsar://127.0.0.1:6650")
    ap.add_argument("--redis", default="127.0.0.1:6379", help="HOST:PORT")
    ap.add_argument("--project", default="febench")
    ap.add_argument("--chunk", type=int, default=10_000, help="rows per write_to_online_store")
    ap.add_argument("--repo-dir", type=Path, help="Feast repo to lay out (default: a temp dir)")
    ap.add_argument("--timeout", type=float, default=600.0,
                    help="give up reading the topic after this many seconds")
    ap.add_argument("--schema", type=Path, default=DEFAULT_SCHEMA, help="the Avro schema (.avsc)")
    args = ap.parse_args(argv)
    if args.events < 1 or args.chunk < 1:
        ap.error("--events and --chunk must be at least 1")
    if not re.fullmatch(r"[A-Za-z0-9_]+", args.project):
        ap.error(f"bad --project {args.project!r} (Feast wants [A-Za-z0-9_])")
    if not re.fullmatch(r"[^:\s]+:\d+", args.redis):
        ap.error(f"bad --redis {args.redis!r} (want HOST:PORT)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    out = claim_stdout()
    deadline = time.monotonic() + args.timeout
    host, port = args.redis.rsplit(":", 1)
    try:
        try:
            redis.Redis(host=host, port=int(port), socket_connect_timeout=5).ping()
        except redis.RedisError as e:
            raise Fatal(f"Redis at {args.redis} is unreachable: {e}", 2) from e
        df = events_frame(read_events(args, deadline))
        repo = args.repo_dir or Path(tempfile.mkdtemp(prefix="feast-bench-"))
        store = feature_store(repo.resolve(), args.project, args.redis, df.head(1))

        t0, cpu0 = time.perf_counter(), cpu_seconds()
        for start in range(0, len(df), args.chunk):
            store.write_to_online_store(VIEW, df.iloc[start:start + args.chunk])
        seconds, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    except Fatal as e:
        print(f"feast_writer: {e}", file=sys.stderr)
        return e.code
    except (pulsar.PulsarException, redis.RedisError, OSError) as e:
        print(f"feast_writer: failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    rss_peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    print(json.dumps({
        "contender": CONTENDER,
        "events": len(df),
        "seconds": round(seconds, 3),
        "events_per_s": round(len(df) / seconds, 1),
        "cpu_seconds": round(cpu, 3),
        "rss_peak_mb": round(rss_peak_mb, 1),
    }, separators=(",", ":")), file=out, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
