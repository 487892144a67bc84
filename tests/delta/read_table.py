#!/usr/bin/env python3
"""Read a whole Delta table with one third-party reader and summarise what it sees.

Usage:
    read_table.py TABLE_URI --reader deltalake|polars|duckdb [--key-columns user_id,event_time]

Run it with the interpreter printed by scripts/delta_env.sh. TABLE_URI is a local path,
file:// URL or s3:// URL. Prints ONE JSON document on stdout:

    {"reader": "deltalake", "reader_version": "1.6.6",
     "version": 3,            # table version (deltalake only; null for the others)
     "rows": 7,
     "distinct_keys": 6,      # distinct tuples of the key columns
     "duplicates": [{"key": {"user_id": "user-1", "event_time": "2026-09-09T11:00:00+00:00"},
                     "count": 2}],          # up to 5 example duplicated key tuples
     "types": {"event_time": "timestamp[us, tz=UTC]", ...},   # as the reader names them
     "files": 6,              # active files (deltalake only; null for the others)
     "delta_types": {"event_time": "timestamp", ...},  # Delta log schema (deltalake only)
     "protocol": {...}}       # min reader/writer versions and features (deltalake only)

Readers: deltalake = delta-rs's own scan (QueryBuilder, DataFusion) over its object store;
polars = polars.read_delta; duckdb = DuckDB's delta extension (delta_scan), loaded from the
duckdb-extension-delta / -httpfs wheels, never downloaded. Key values in "duplicates" are
JSON-friendly: timestamps/dates as ISO strings, bytes as base64.

S3 (s3:// URIs) settings come from the environment (.services/env): AWS_ENDPOINT_URL or
S3_ENDPOINT, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION; path-style requests, http
allowed when the endpoint is http://. DuckDB gets them as a temporary S3 secret.
"""
from __future__ import annotations

import argparse
import base64
import datetime as dt
import decimal
import importlib
import importlib.metadata
import json
import os
import sys
from pathlib import Path
from urllib.parse import urlparse


def s3_settings() -> dict:
    endpoint = os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("S3_ENDPOINT") or ""
    return {
        "endpoint": endpoint,
        "key": os.environ.get("AWS_ACCESS_KEY_ID", ""),
        "secret": os.environ.get("AWS_SECRET_ACCESS_KEY", ""),
        "region": os.environ.get("AWS_REGION", "us-east-1"),
    }


def storage_options(uri: str) -> dict | None:
    """delta-rs object-store options (used by deltalake and polars)."""
    if not uri.startswith("s3://"):
        return None
    s = s3_settings()
    opts = {
        "AWS_ACCESS_KEY_ID": s["key"],
        "AWS_SECRET_ACCESS_KEY": s["secret"],
        "AWS_REGION": s["region"],
        "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
    }
    if s["endpoint"]:
        opts["AWS_ENDPOINT_URL"] = s["endpoint"]
        opts["AWS_ALLOW_HTTP"] = str(s["endpoint"].startswith("http://")).lower()
    return opts


def jsonable(v):
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(v)).decode("ascii")
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, float) and v != v:
        return None
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, dict):
        return {k: jsonable(x) for k, x in v.items()}
    return v


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def key_sql(keys: list[str]) -> tuple[str, str]:
    """SQL for (distinct count, top duplicates) over relation `t` (DataFusion and DuckDB)."""
    cols = ", ".join(quote(k) for k in keys)
    distinct = f"SELECT count(*) AS n FROM (SELECT DISTINCT {cols} FROM t) AS d"
    dups = (f"SELECT {cols}, count(*) AS n FROM t GROUP BY {cols} HAVING count(*) > 1 "
            f"ORDER BY n DESC, {cols} LIMIT 5")
    return distinct, dups


def dup_rows(rows: list[dict], keys: list[str]) -> list[dict]:
    return [{"key": {k: jsonable(r[k]) for k in keys}, "count": int(r["n"])} for r in rows]


def read_deltalake(uri: str, keys: list[str]) -> dict:
    # QueryBuilder, not to_pyarrow_table(): the latter reads through a Python filesystem handler
    # and aborts at interpreter exit about half the time ("terminate called without an active
    # exception", delta-rs issue #2184).
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    table = DeltaTable(uri, storage_options=storage_options(uri))
    qb = QueryBuilder().register("t", table)
    sql = lambda q: pa.table(qb.execute(q))  # noqa: E731
    schema = sql("SELECT * FROM t LIMIT 0").schema
    distinct, dups = key_sql(keys)
    proto = table.protocol()
    return {
        "version": table.version(),
        "rows": sql("SELECT count(*) AS n FROM t")["n"][0].as_py(),
        "distinct_keys": sql(distinct)["n"][0].as_py(),
        "duplicates": dup_rows(sql(dups).to_pylist(), keys),
        "types": {f.name: str(f.type) for f in schema},
        "files": len(table.file_uris()),
        "delta_types": {f.name: delta_type_name(f.type) for f in table.schema().fields},
        "protocol": {
            "min_reader_version": proto.min_reader_version,
            "min_writer_version": proto.min_writer_version,
            "reader_features": proto.reader_features,
            "writer_features": proto.writer_features,
        },
    }


def delta_type_name(t) -> str:
    """Delta log type name: long, timestamp, decimal(10,2), array<string>, struct<a: long>..."""
    kind = getattr(t, "type", None)
    if kind == "array":
        return f"array<{delta_type_name(t.element_type)}>"
    if kind == "map":
        return f"map<{delta_type_name(t.key_type)}, {delta_type_name(t.value_type)}>"
    if kind == "struct":
        return "struct<" + ", ".join(f"{f.name}: {delta_type_name(f.type)}" for f in t.fields) + ">"
    return str(kind)


def read_polars(uri: str, keys: list[str]) -> dict:
    import polars as pl

    df = pl.read_delta(uri, storage_options=storage_options(uri))
    counts = df.group_by(keys).agg(pl.len().alias("n"))
    dups = counts.filter(pl.col("n") > 1).sort(["n", *keys], descending=[True] + [False] * len(keys))
    return {
        "version": None,
        "rows": df.height,
        "distinct_keys": counts.height,
        "duplicates": dup_rows(dups.head(5).to_dicts(), keys),
        "types": {name: str(dtype) for name, dtype in df.schema.items()},
        "files": None,
    }


def duckdb_connect():
    import duckdb

    con = duckdb.connect(config={"autoinstall_known_extensions": False,
                                 "autoload_known_extensions": False})
    for name in ("httpfs", "delta"):
        pkg = Path(importlib.import_module(f"duckdb_extension_{name}").__file__).parent
        con.execute(f"LOAD '{pkg}/extensions/v{duckdb.__version__}/{name}.duckdb_extension'")
    con.execute("SET TimeZone = 'UTC'")
    return con


def read_duckdb(uri: str, keys: list[str]) -> dict:
    con = duckdb_connect()
    if uri.startswith("s3://"):
        s = s3_settings()
        ep = urlparse(s["endpoint"]) if s["endpoint"] else None
        parts = ["TYPE S3", "KEY_ID $key", "SECRET $secret", "REGION $region"]
        if ep:
            parts += ["ENDPOINT $endpoint", "URL_STYLE 'path'",
                      f"USE_SSL {'false' if ep.scheme == 'http' else 'true'}"]
        con.execute(f"CREATE TEMPORARY SECRET fc_s3 ({', '.join(parts)})",
                    {"key": s["key"], "secret": s["secret"], "region": s["region"],
                     **({"endpoint": ep.netloc} if ep else {})})
    elif uri.startswith("file://"):
        uri = urlparse(uri).path
    literal = "'" + uri.replace("'", "''") + "'"  # a view cannot take a prepared parameter
    con.execute(f"CREATE TEMPORARY VIEW t AS SELECT * FROM delta_scan({literal})")
    distinct, dups = key_sql(keys)
    cur = con.execute(dups)
    names = [d[0] for d in cur.description]
    dup_list = [dict(zip(names, r)) for r in cur.fetchall()]  # before the next execute
    return {
        "version": None,
        "rows": con.execute("SELECT count(*) FROM t").fetchone()[0],
        "distinct_keys": con.execute(distinct).fetchone()[0],
        "duplicates": dup_rows(dup_list, keys),
        "types": {r[0]: r[1] for r in con.execute("DESCRIBE t").fetchall()},
        "files": None,
    }


READERS = {"deltalake": read_deltalake, "polars": read_polars, "duckdb": read_duckdb}
DISTS = {"deltalake": "deltalake", "polars": "polars", "duckdb": "duckdb"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("table_uri")
    ap.add_argument("--reader", required=True, choices=sorted(READERS))
    ap.add_argument("--key-columns", default="user_id,event_time")
    args = ap.parse_args(argv)
    keys = [k.strip() for k in args.key_columns.split(",") if k.strip()]
    if not keys:
        ap.error("--key-columns is empty")

    uri = args.table_uri
    if args.reader != "duckdb" and uri.startswith("file://"):
        uri = urlparse(uri).path
    doc = {"reader": args.reader,
           "reader_version": importlib.metadata.version(DISTS[args.reader]),
           **READERS[args.reader](uri, keys)}
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
