#!/usr/bin/env python3
"""Point-in-time read of a Delta offline-store table with Feast's get_historical_features.

Usage:
    historical_delta.py --repo-dir DIR --spec SPEC.json

Run it with the interpreter printed by scripts/delta_env.sh. It writes DIR/feature_store.yaml
(project delta_interop, registry DIR/data/registry.db, provider local, offline_store file,
online_store sqlite DIR/data/online.db), applies one Entity per spec entity, one
FileSource(path=<table>, file_format=DeltaFormat(), timestamp_field=<timestamp_field>,
created_timestamp_column="pulsar_publish_time") and one FeatureView, runs
get_historical_features for the spec's entity rows and prints ONE JSON document on stdout:

    {"feast_version": "0.67.0", "offline_store": "file",
     "rows": [{"user_id": "user-1", "event_timestamp": "2026-09-09T10:00:00+00:00",
               "purchases_30d": 11}, ...],   # rows[i] answers entity_rows[i]
     "missing_entity_rows": [0],            # entity rows Feast returned no row for (rows[i] null)
     "duplicated_entity_rows": []}          # entity rows Feast returned >1 row for (first kept)

Values: null for missing/NaN, timestamps as ISO-8601 strings, bytes as base64, lists as lists.
Feature names are unprefixed. Feast's logs go to stderr.

Feast 0.67.0's file (dask) offline store reads a DeltaFormat source with dask.read_parquet on
the table directory: it does not read _delta_log, so rows in files a later commit removed are
still returned; it drops entity rows whose every candidate row is newer than the asked time
(hence "missing_entity_rows"); and on a multi-file source an entity key with no rows at all
fails inside dask's sort ("Divisions calculation failed for non-numeric column ...").

SPEC.json:
    {"table": "/tmp/x/offline/pit",          # local path or s3://bucket/prefix/pit
     "view": "pit", "ttl_seconds": 0, "timestamp_field": "event_time",
     "entities": [{"name": "user", "join_key": "user_id", "dtype": "String"}],
     "features": [{"name": "purchases_30d", "dtype": "Int64"}],
     "entity_rows": [{"user_id": "user-1", "event_timestamp": "2026-09-09T10:00:00Z"}]}
dtypes: Int32 Int64 Float32 Float64 String Bool Bytes UnixTimestamp and Array(<one of those>);
join keys: String Int32 Int64. For s3:// tables the endpoint comes from AWS_ENDPOINT_URL or
S3_ENDPOINT and credentials from the usual AWS_* variables (Feast's file store reads S3 via s3fs).
"""
from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import json
import math
import os
import re
import sys
from datetime import timedelta
from pathlib import Path

os.environ.setdefault("FEAST_USAGE", "False")  # no usage telemetry

SCALARS = ("Int32", "Int64", "Float32", "Float64", "String", "Bool", "Bytes", "UnixTimestamp")
JOIN_KEYS = {"String": "STRING", "Int32": "INT32", "Int64": "INT64"}
ARRAY_RE = re.compile(r"^Array\(\s*(\w+)\s*\)$")


def feast_type(dtype: str):
    from feast import types

    m = ARRAY_RE.match(dtype.strip())
    if m and m.group(1) in SCALARS:
        return types.Array(getattr(types, m.group(1)))
    if dtype in SCALARS:
        return getattr(types, dtype)
    raise ValueError(f"unsupported dtype {dtype!r}")


def to_json(v, dtype: str = ""):
    if v is None:
        return None
    if hasattr(v, "tolist") and not isinstance(v, (str, bytes)):  # numpy scalar / array
        v = v.tolist()
    if isinstance(v, float):
        if math.isnan(v):
            return None
        if dtype in ("Int32", "Int64") and v == int(v):  # pandas turns ints with gaps into floats
            return int(v)
        return v if math.isfinite(v) else ("Infinity" if v > 0 else "-Infinity")
    if isinstance(v, dt.datetime):  # includes pandas.Timestamp
        return (v if v.tzinfo else v.replace(tzinfo=dt.timezone.utc)).isoformat()
    if isinstance(v, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(v)).decode("ascii")
    if isinstance(v, (list, tuple)):
        inner = ARRAY_RE.match(dtype)
        return [to_json(x, inner.group(1) if inner else "") for x in v]
    if isinstance(v, (bool, int, str)):
        return v
    return str(v)


def write_yaml(repo: Path) -> None:
    data = repo / "data"
    (repo / "feature_store.yaml").write_text(
        "project: delta_interop\n"
        f"registry: {json.dumps(str(data / 'registry.db'))}\n"
        "provider: local\n"
        "offline_store:\n"
        "  type: file\n"
        "online_store:\n"
        "  type: sqlite\n"
        f"  path: {json.dumps(str(data / 'online.db'))}\n"
        "entity_key_serialization_version: 3\n"
    )


def build_objects(spec: dict):
    from feast import Entity, FeatureView, Field, FileSource, ValueType
    from feast.data_format import DeltaFormat

    table = spec["table"]
    endpoint = os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("S3_ENDPOINT")
    entities = [
        Entity(name=e["name"], join_keys=[e["join_key"]],
               value_type=ValueType[JOIN_KEYS[e.get("dtype", "String")]])
        for e in spec["entities"]
    ]
    source = FileSource(
        name=f"{spec['view']}_source",
        path=table,
        file_format=DeltaFormat(),
        timestamp_field=spec.get("timestamp_field", "event_time"),
        created_timestamp_column="pulsar_publish_time",
        s3_endpoint_override=endpoint if table.startswith("s3://") else None,
    )
    schema = [Field(name=e["join_key"], dtype=feast_type(e.get("dtype", "String")))
              for e in spec["entities"]]
    schema += [Field(name=f["name"], dtype=feast_type(f["dtype"])) for f in spec["features"]]
    view = FeatureView(name=spec["view"], entities=entities, schema=schema, source=source,
                       ttl=timedelta(seconds=int(spec.get("ttl_seconds") or 0)), online=False)
    return [*entities, view]


def entity_frame(spec: dict):
    import pandas as pd

    rows = spec["entity_rows"]
    df = pd.DataFrame(rows)
    df["event_timestamp"] = pd.to_datetime(df["event_timestamp"], utc=True)
    for e in spec["entities"]:
        if e.get("dtype", "String") != "String":
            df[e["join_key"]] = df[e["join_key"]].astype("int64")
    df["__entity_row"] = range(len(rows))  # to restore entity-row order afterwards
    return df


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo-dir", required=True, type=Path)
    ap.add_argument("--spec", required=True, type=Path)
    args = ap.parse_args(argv)
    try:
        spec = json.loads(args.spec.read_text())
        for k in ("table", "view", "entities", "features", "entity_rows"):
            if not spec.get(k):
                raise ValueError(f"missing {k!r}")
        for f in spec["features"]:
            feast_type(f["dtype"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"historical_delta.py: bad spec {args.spec}: {e}", file=sys.stderr)
        return 2

    repo = args.repo_dir.resolve()
    (repo / "data").mkdir(parents=True, exist_ok=True)
    write_yaml(repo)

    real_stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):  # stdout is for the one JSON document
        import importlib.metadata

        from feast import FeatureStore

        store = FeatureStore(repo_path=str(repo))
        store.apply(build_objects(spec))
        job = store.get_historical_features(
            entity_df=entity_frame(spec),
            features=[f"{spec['view']}:{f['name']}" for f in spec["features"]],
            full_feature_names=False,
        )
        df = job.to_df().sort_values("__entity_row", kind="stable")
        dtypes = {e["join_key"]: e.get("dtype", "String") for e in spec["entities"]}
        dtypes.update({f["name"]: f["dtype"] for f in spec["features"]})
        rows: list = [None] * len(spec["entity_rows"])
        duplicated = set()
        for r in df.to_dict("records"):
            i = int(r.pop("__entity_row"))
            if rows[i] is not None:
                duplicated.add(i)
                continue
            rows[i] = {c: to_json(v, dtypes.get(c, "")) for c, v in r.items()}
        doc = {"feast_version": importlib.metadata.version("feast"), "offline_store": "file",
               "rows": rows,
               "missing_entity_rows": [i for i, r in enumerate(rows) if r is None],
               "duplicated_entity_rows": sorted(duplicated)}

    real_stdout.write(json.dumps(doc, allow_nan=False) + "\n")
    real_stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
