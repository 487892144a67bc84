#!/usr/bin/env python3
"""Write a small Delta table shaped like the connector's offline store, with Python deltalake.

Usage:
    write_sample.py TABLE_URI [--stale-file]

Run it with the interpreter printed by scripts/delta_env.sh. TABLE_URI is a local path,
file:// URL or s3:// URL (S3 settings from the environment, as in read_table.py). The table
must not exist yet. Layout: user_id, event_time (timestamp UTC), one feature column per Delta
type (long int double float boolean string binary date decimal struct array map, plus a
nullable double), pulsar_publish_time (timestamp UTC), partition columns dt (date) and hr
(integer); zstd Parquet under dt=YYYY-MM-DD/hr=HH/, written in three commits.

The rows are the point-in-time fixture used with tests/feast/historical_delta.py
(purchases_30d per user and event time; "p" = pulsar_publish_time offset in seconds):
    user-1  09:00 -> 10   09:30 -> 11   10:30 -> 12   11:00 -> 20 (p 5, commit 3)
                                                      11:00 -> 21 (p 9, commit 2)
    user-2  2026-09-08 23:50 -> 1   2026-09-09 00:10 -> 2
    user-3  09:00 -> 99 (deleted again in commit 4 when --stale-file is given)
All times are 2026-09-09 UTC unless noted. --stale-file adds a 4th commit that deletes user-3,
which leaves that row only in a file the Delta log has removed (a tombstone), to tell readers
that follow the log from readers that list Parquet files.

Prints ONE JSON document: {"table": TABLE_URI, "version": N, "rows": N}.
"""
from __future__ import annotations

import argparse
import datetime as dt
import decimal
import json
import os
import sys

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder, WriterProperties, write_deltalake

UTC = dt.timezone.utc
DAY = dt.datetime(2026, 9, 9, tzinfo=UTC)


def storage_options(uri: str) -> dict | None:
    if not uri.startswith("s3://"):
        return None
    endpoint = os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("S3_ENDPOINT")
    opts = {
        "AWS_ACCESS_KEY_ID": os.environ.get("AWS_ACCESS_KEY_ID", ""),
        "AWS_SECRET_ACCESS_KEY": os.environ.get("AWS_SECRET_ACCESS_KEY", ""),
        "AWS_REGION": os.environ.get("AWS_REGION", "us-east-1"),
        "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
    }
    if endpoint:
        opts["AWS_ENDPOINT_URL"] = endpoint
        opts["AWS_ALLOW_HTTP"] = str(endpoint.startswith("http://")).lower()
    return opts


SCHEMA = pa.schema([
    ("user_id", pa.string()),
    ("event_time", pa.timestamp("us", tz="UTC")),
    ("purchases_30d", pa.int64()),
    ("clicks", pa.int32()),
    ("score", pa.float64()),
    ("ratio", pa.float32()),
    ("active", pa.bool_()),
    ("name", pa.string()),
    ("blob", pa.binary()),
    ("maybe_score", pa.float64()),
    ("birthday", pa.date32()),
    ("amount", pa.decimal128(10, 2)),
    ("profile", pa.struct([("city", pa.string()), ("age", pa.int32())])),
    ("tags", pa.list_(pa.string())),
    ("attrs", pa.map_(pa.string(), pa.int64())),
    ("pulsar_publish_time", pa.timestamp("us", tz="UTC")),
    ("dt", pa.date32()),
    ("hr", pa.int32()),
])


def row(user: str, t: dt.datetime, purchases: int, publish_s: int) -> dict:
    return {
        "user_id": user,
        "event_time": t,
        "purchases_30d": purchases,
        "clicks": purchases * 2,
        "score": purchases / 4,
        "ratio": 0.5,
        "active": purchases % 2 == 0,
        "name": f"{user}-{purchases}",
        "blob": purchases.to_bytes(2, "big"),
        "maybe_score": None if purchases % 2 else float(purchases),
        "birthday": dt.date(2000, 1, 1 + purchases % 28),
        "amount": decimal.Decimal(purchases) / 100,
        "profile": {"city": "Oslo", "age": purchases},
        "tags": [user, str(purchases)],
        "attrs": [("p", purchases)],
        "pulsar_publish_time": t + dt.timedelta(seconds=publish_s),
        "dt": t.date(),
        "hr": t.hour,
    }


def at(h: int, m: int = 0, day: dt.datetime = DAY) -> dt.datetime:
    return day.replace(hour=h, minute=m)


COMMITS = [
    [
        row("user-1", at(9), 10, 1),
        row("user-1", at(9, 30), 11, 1),
        row("user-1", at(10, 30), 12, 1),
        row("user-2", at(23, 50, DAY - dt.timedelta(days=1)), 1, 1),
        row("user-2", at(0, 10), 2, 1),
        row("user-3", at(9), 99, 1),
    ],
    [row("user-1", at(11), 21, 9)],  # the tie: larger publish time, earlier commit
    [row("user-1", at(11), 20, 5)],
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("table_uri")
    ap.add_argument("--stale-file", action="store_true")
    args = ap.parse_args(argv)
    opts = storage_options(args.table_uri)
    props = WriterProperties(compression="ZSTD")
    for rows in COMMITS:
        write_deltalake(args.table_uri, pa.Table.from_pylist(rows, schema=SCHEMA), mode="append",
                        partition_by=["dt", "hr"], storage_options=opts, writer_properties=props)
    table = DeltaTable(args.table_uri, storage_options=opts)
    if args.stale_file:
        table.delete("user_id = 'user-3'")
        table = DeltaTable(args.table_uri, storage_options=opts)
    # QueryBuilder, not to_pyarrow_table(): see the note in read_table.py (delta-rs #2184).
    rows = pa.table(QueryBuilder().register("t", table).execute("SELECT count(*) AS n FROM t"))
    doc = {"table": args.table_uri, "version": table.version(), "rows": rows["n"][0].as_py()}
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
