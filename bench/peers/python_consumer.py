#!/usr/bin/env python3
"""Peer contender: a straightforward Python Pulsar consumer doing the connector's job.

What it models: what a team writes when it has no connector - pulsar-client + redis-py +
pyarrow in one process, one thread of Python. It consumes BenchFeatures events (AVRO-schema
topic: each payload is a raw Avro datum, decoded with fastavro.schemaless_reader) and, per
received batch:
  * keeps the newest row per entity of the batch and writes it to Redis as a hash
    `<prefix>:bench:<entity_id>` (HSET of the 10 features as strings plus `_ts` = event time
    in ms), all HSETs of the batch in one non-transactional pipeline;
  * appends the rows to an in-memory buffer; every --rollover-rows rows (and at the end) the
    buffer becomes one zstd Parquet file in --parquet-dir (temp file + rename);
  * acknowledges cumulatively up to the last message of a file once that file is written -
    Redis has answered for those messages by then (ack-after-durable, the connector's contract).
Across batches the last-arriving row per entity wins in Redis (no compare-and-set script).

What it measures: wall time from the first received message until N messages are processed,
the last file is written and acknowledged; the process's CPU time (user+sys, all threads,
including pulsar-client's) over that same window; the process's peak RSS; the bytes of Parquet
written. Stdout gets exactly one JSON line:
  {"contender":"python-consumer","events":N,"seconds":S,"events_per_s":R,"cpu_seconds":C,
   "rss_peak_mb":M,"parquet_bytes":B}
Everything else (errors, pulsar-client warnings) goes to stderr.

Exit codes: 0 done; 1 timed out (--timeout) or failed mid-run; 2 Pulsar or Redis unreachable
or bad arguments.

Usage (interpreter from bench/peers/setup_venv.sh):
  PY=$(bench/peers/setup_venv.sh | tail -1)
  $PY bench/peers/python_consumer.py --topic persistent://public/default/T --subscription S \
      --events 1000000 --parquet-dir /tmp/pyconsumer-out [--receiver-queue 20000]
"""
from __future__ import annotations

import argparse
import io
import json
import os
import resource
import sys
import time
from pathlib import Path

import fastavro
import pulsar
import pyarrow as pa
import pyarrow.parquet as pq
import redis

CONTENDER = "python-consumer"
DEFAULT_SCHEMA = Path(__file__).resolve().parent.parent / "schemas" / "bench_features.avsc"
KEY_FIELD = "entity_id"
TIME_FIELD = "event_time"
VIEW = "bench"  # the `<view>` part of the Redis key, as in the connector's native layout
ZSTD_LEVEL = 3  # the connector's default zstd level and row-group size
ROW_GROUP_ROWS = 128 * 1024

# Avro primitive (or logical) type -> Arrow type, for the types the bench schema uses.
ARROW_TYPES = {
    "string": pa.string(),
    "long": pa.int64(),
    "int": pa.int32(),
    "double": pa.float64(),
    "float": pa.float32(),
    "boolean": pa.bool_(),
    "timestamp-millis": pa.timestamp("ms", tz="UTC"),
}


class Fatal(Exception):
    """An error that ends the run with a message and an exit code."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


def load_schema(path: Path):
    """(fastavro parsed schema, Arrow schema, feature names) of the Avro record in `path`.

    event_time's logicalType is dropped before parsing, so fastavro hands back the raw epoch-ms
    long: the wire bytes are the same, and `_ts` wants the milliseconds anyway (no datetime per
    message)."""
    avro = json.loads(path.read_text())
    arrow_fields = []
    for field in avro["fields"]:
        t = field["type"]
        if isinstance(t, dict):  # e.g. {"type": "long", "logicalType": "timestamp-millis"}
            arrow_type = ARROW_TYPES[t.get("logicalType", t["type"])]
            field["type"] = t["type"]
        else:
            arrow_type = ARROW_TYPES[t]
        arrow_fields.append(pa.field(field["name"], arrow_type, nullable=False))
    features = [f["name"] for f in avro["fields"] if f["name"] not in (KEY_FIELD, TIME_FIELD)]
    return fastavro.parse_schema(avro), pa.schema(arrow_fields), features


def redis_value(v) -> str:
    """A feature value as the string stored in the hash (booleans as true/false)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


class Consumer:
    """The consume -> Redis + Parquet -> ack loop and its counters."""

    def __init__(self, args, consumer, redis_client, avro_schema, arrow_schema, features):
        self.args = args
        self.consumer = consumer
        self.redis = redis_client
        self.avro_schema = avro_schema
        self.arrow_schema = arrow_schema
        self.features = features
        self.parquet_dir = Path(args.parquet_dir)
        self.buffer: list[dict] = []  # decoded rows not yet in a Parquet file
        self.files = 0
        self.parquet_bytes = 0
        self.processed = 0

    def handle(self, messages) -> None:
        """Redis for the whole batch first, then the rows into the buffer (files as it fills)."""
        rows = [fastavro.schemaless_reader(io.BytesIO(m.data()), self.avro_schema)
                for m in messages]
        newest: dict[str, dict] = {}
        for row in rows:  # later rows win event-time ties, as in the connector
            current = newest.get(row[KEY_FIELD])
            if current is None or row[TIME_FIELD] >= current[TIME_FIELD]:
                newest[row[KEY_FIELD]] = row
        pipe = self.redis.pipeline(transaction=False)
        for entity, row in newest.items():
            mapping = {f: redis_value(row[f]) for f in self.features}
            mapping["_ts"] = str(row[TIME_FIELD])
            pipe.hset(f"{self.args.key_prefix}:{VIEW}:{entity}", mapping=mapping)
        pipe.execute()  # raises on any command error

        # Split at rollover boundaries so every file holds exactly --rollover-rows rows.
        i = 0
        while i < len(rows):
            take = min(len(rows) - i, self.args.rollover_rows - len(self.buffer))
            self.buffer.extend(rows[i:i + take])
            i += take
            if len(self.buffer) == self.args.rollover_rows:
                self.commit(messages[i - 1])
        self.processed += len(rows)

    def commit(self, last_message) -> None:
        """Write the buffer as one Parquet file, then ack everything up to `last_message`."""
        table = pa.Table.from_pylist(self.buffer, schema=self.arrow_schema)
        final = self.parquet_dir / f"{CONTENDER}-{os.getpid()}-{self.files:05d}.parquet"
        tmp = final.with_name(final.name + ".tmp")
        pq.write_table(table, tmp, compression="zstd", compression_level=ZSTD_LEVEL,
                       row_group_size=ROW_GROUP_ROWS)
        os.replace(tmp, final)
        self.parquet_bytes += final.stat().st_size
        self.files += 1
        self.buffer.clear()
        self.consumer.acknowledge_cumulative(last_message)

    def run(self, deadline: float):
        """Consume until --events messages are processed. Returns (seconds, cpu_seconds)."""
        t0 = cpu0 = None
        last = None
        while self.processed < self.args.events:
            if time.monotonic() > deadline:
                raise Fatal(f"timed out after {self.args.timeout:g}s: {self.processed} of "
                            f"{self.args.events} messages processed", 1)
            messages = self.consumer.batch_receive()  # returns after <=100 ms, maybe empty
            if not messages:
                continue
            if t0 is None:
                t0, cpu0 = time.perf_counter(), cpu_seconds()
            # Process no more than --events; extra messages stay unacknowledged.
            messages = messages[:self.args.events - self.processed]
            self.handle(messages)
            last = messages[-1]
        if self.buffer:
            self.commit(last)
        return time.perf_counter() - t0, cpu_seconds() - cpu0


def cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topic", required=True)
    ap.add_argument("--subscription", required=True)
    ap.add_argument("--events", type=int, required=True, help="stop after N messages processed")
    ap.add_argument("--pulsar-url", default="pulsar://127.0.0.1:6650")
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379")
    ap.add_argument("--key-prefix", default="pybench")
    ap.add_argument("--parquet-dir", required=True)
    ap.add_argument("--rollover-rows", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=1000, help="max messages per batch_receive")
    ap.add_argument("--receiver-queue", type=int, default=1000,
                    help="messages prefetched (the client's receiver_queue_size; at least --batch)")
    ap.add_argument("--timeout", type=float, default=600.0, help="give up after this many seconds")
    ap.add_argument("--schema", type=Path, default=DEFAULT_SCHEMA, help="the Avro schema (.avsc)")
    args = ap.parse_args(argv)
    for name in ("events", "rollover_rows", "batch", "receiver_queue"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def claim_stdout():
    """A private handle on stdout for the JSON line; fd 1 itself then points at stderr.

    pulsar-client's C++ logger writes to fd 1 (std::cout); after this its lines, and anything
    else a library prints, land on stderr, sharing stderr's file description (no interleaving
    damage when stderr is a file)."""
    out = os.fdopen(os.dup(1), "w")
    sys.stdout.flush()
    os.dup2(2, 1)
    return out


def connect(args):
    """(redis client, pulsar client, consumer), or Fatal(code 2) naming what is unreachable."""
    redis_client = redis.Redis.from_url(args.redis_url, socket_connect_timeout=5,
                                        socket_timeout=30)
    try:
        redis_client.ping()
    except redis.RedisError as e:
        raise Fatal(f"Redis at {args.redis_url} is unreachable: {e}", 2) from e

    # Warnings and up, to fd 1 = stderr (claim_stdout). Not a logging.Logger: with one, the
    # interpreter's exit aborts now and then (apache/pulsar-client-python#256).
    client = pulsar.Client(args.pulsar_url, operation_timeout_seconds=10,
                           connection_timeout_ms=5000,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        consumer = client.subscribe(
            args.topic, args.subscription,
            consumer_type=pulsar.ConsumerType.Exclusive,
            initial_position=pulsar.InitialPosition.Earliest,
            receiver_queue_size=max(args.receiver_queue, args.batch),
            batch_receive_policy=pulsar.ConsumerBatchReceivePolicy(args.batch, -1, 100),
        )
    except pulsar.PulsarException as e:
        client.close()
        raise Fatal(f"cannot subscribe to {args.topic} at {args.pulsar_url}: {e}", 2) from e
    return redis_client, client, consumer


def main(argv=None) -> int:
    args = parse_args(argv)
    out = claim_stdout()
    deadline = time.monotonic() + args.timeout
    try:
        avro_schema, arrow_schema, features = load_schema(args.schema)
    except (OSError, ValueError, KeyError) as e:
        print(f"python_consumer: bad schema {args.schema}: {e}", file=sys.stderr)
        return 2
    Path(args.parquet_dir).mkdir(parents=True, exist_ok=True)
    client = None
    try:
        redis_client, client, consumer = connect(args)
        job = Consumer(args, consumer, redis_client, avro_schema, arrow_schema, features)
        seconds, cpu = job.run(deadline)
    except Fatal as e:
        print(f"python_consumer: {e}", file=sys.stderr)
        return e.code
    except (pulsar.PulsarException, redis.RedisError, OSError) as e:
        print(f"python_consumer: failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    finally:
        if client is not None:
            client.close()
    rss_peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    print(json.dumps({
        "contender": CONTENDER,
        "events": job.processed,
        "seconds": round(seconds, 3),
        "events_per_s": round(job.processed / seconds, 1),
        "cpu_seconds": round(cpu, 3),
        "rss_peak_mb": round(rss_peak_mb, 1),
        "parquet_bytes": job.parquet_bytes,
    }, separators=(",", ":")), file=out, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
