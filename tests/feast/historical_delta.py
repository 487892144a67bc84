#!/usr/bin/env python3
"""Point-in-time read of a Delta offline-store table with Feast's get_historical_features.

Usage:
    historical_delta.py --repo-dir DIR --spec SPEC.json [--offline-store duckdb|file]

Run it with the interpreter printed by scripts/delta_env.sh. It writes DIR/feature_store.yaml
(project delta_interop, registry DIR/data/registry.db, provider local, offline_store of the type
--offline-store names (default duckdb), online_store sqlite DIR/data/online.db), applies one
Entity per spec entity, one FileSource(path=<table>, file_format=DeltaFormat(),
timestamp_field=<timestamp_field>, created_timestamp_column="pulsar_publish_time") and one
FeatureView, runs get_historical_features for the spec's entity rows and prints ONE JSON
document on stdout:

    {"feast_version": "0.67.0", "offline_store": "duckdb",
     "ibis_version": "12.0.0",              # null with --offline-store file
     "rows": [{"user_id": "user-1", "event_timestamp": "2026-09-09T10:00:00+00:00",
               "purchases_30d": 11}, ...],   # rows[i] answers entity_rows[i]
     "missing_entity_rows": [0],            # entity rows Feast returned no row for (rows[i] null;
                                            # file store only: duckdb returns null features)
     "duplicated_entity_rows": []}          # entity rows Feast returned >1 row for (first kept)

Values: null for missing/NaN, timestamps as ISO-8601 strings, bytes as base64, lists as lists.
Feature names are unprefixed. Feast's logs go to stderr.

--offline-store duckdb (Feast's DuckDBOfflineStore, feast/infra/offline_stores/duckdb.py): the
source is read with ibis.read_delta on ibis's default backend, which in ibis-framework 12.0.0 is
DuckDB's delta extension (SELECT * FROM delta_scan(path)), not the deltalake package; delta_scan
follows _delta_log, so files the log removed or never added are not read. An entity row with no
matching feature row comes back with null features (a left join), never missing. ibis would
INSTALL the extension from the network, so this script makes the default backend itself:
ibis.duckdb.connect(extension_directory=DIR/data/duckdb_extensions, autoinstall and autoload
of known extensions off), with that directory holding symlinks to the delta and httpfs
extension files of the duckdb-extension-delta / -httpfs wheels (so duckdb_extensions() reports
them installed and ibis issues no INSTALL), and LOADs both from the wheel paths. For s3://
tables the endpoint and credentials go into a temporary DuckDB S3 secret on that connection
(path-style; SSL off for an http:// endpoint) and the FileSource gets NO s3_endpoint_override:
Feast turns s3_endpoint_override (and connection_ref credentials) into
ibis.read_delta(path, storage_options={...}), which ibis passes through as a delta_scan named
parameter, and DuckDB refuses it: 'Binder Error: Invalid named parameter "storage_options" for
function delta_scan'.

--offline-store file (Feast's FileOfflineStore, dask): Feast 0.67.0 reads a DeltaFormat source
with dask.read_parquet on the table directory: it does not read _delta_log, so rows in files a
later commit removed are still returned; it drops entity rows whose every candidate row is
newer than the asked time (hence "missing_entity_rows"); on a multi-file source an entity key
with no rows at all can fail inside dask's sort, depending on the other entity rows asked
("NotImplementedError: Divisions calculation failed for non-numeric column
'pulsar_publish_time'."); and asking for the created-timestamp column pulsar_publish_time as a
feature fails ("ValueError: Wrong number of dimensions. values.ndim > ndim [2 > 1]"; the duckdb
store returns it). For s3:// tables the FileSource gets s3_endpoint_override and s3fs takes
credentials from the AWS_* variables.

SPEC.json:
    {"table": "/tmp/x/offline/pit",          # local path or s3://bucket/prefix/pit
     "view": "pit", "ttl_seconds": 0, "timestamp_field": "event_time",
     "created_timestamp_column": "pulsar_publish_time",   # optional (this default); null: none
     "entities": [{"name": "user", "join_key": "user_id", "dtype": "String"}],
     "features": [{"name": "purchases_30d", "dtype": "Int64"}],
     "entity_rows": [{"user_id": "user-1", "event_timestamp": "2026-09-09T10:00:00Z"}]}
dtypes: Int32 Int64 Float32 Float64 String Bool Bytes UnixTimestamp and Array(<one of those>);
join keys: String Int32 Int64. For s3:// tables the endpoint comes from AWS_ENDPOINT_URL or
S3_ENDPOINT and credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_REGION.
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
from urllib.parse import urlparse

os.environ.setdefault("FEAST_USAGE", "False")  # no usage telemetry

SCALARS = ("Int32", "Int64", "Float32", "Float64", "String", "Bool", "Bytes", "UnixTimestamp")
JOIN_KEYS = {"String": "STRING", "Int32": "INT32", "Int64": "INT64"}
ARRAY_RE = re.compile(r"^Array\(\s*(\w+)\s*\)$")
OFFLINE_STORES = ("duckdb", "file")


def feast_type(dtype: str):
    from feast import types

    m = ARRAY_RE.match(dtype.strip())
    if m and m.group(1) in SCALARS:
        return types.Array(getattr(types, m.group(1)))
    if dtype in SCALARS:
        return getattr(types, dtype)
    raise ValueError(f"unsupported dtype {dtype!r}")


def to_json(v, dtype: str = ""):
    if v is None or type(v).__name__ == "NaTType":  # pandas.NaT (a datetime subclass)
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


def write_yaml(repo: Path, offline_store: str) -> None:
    data = repo / "data"
    (repo / "feature_store.yaml").write_text(
        "project: delta_interop\n"
        f"registry: {json.dumps(str(data / 'registry.db'))}\n"
        "provider: local\n"
        "offline_store:\n"
        f"  type: {offline_store}\n"
        "online_store:\n"
        "  type: sqlite\n"
        f"  path: {json.dumps(str(data / 'online.db'))}\n"
        "entity_key_serialization_version: 3\n"
    )


def s3_settings() -> dict:
    endpoint = os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("S3_ENDPOINT") or ""
    return {
        "endpoint": endpoint,
        "key": os.environ.get("AWS_ACCESS_KEY_ID", ""),
        "secret": os.environ.get("AWS_SECRET_ACCESS_KEY", ""),
        "region": os.environ.get("AWS_REGION", "us-east-1"),
    }


def duckdb_default_backend(ext_dir: Path, s3: bool):
    """Make ibis's default backend a DuckDB connection that has the delta (and httpfs)
    extensions from the local wheels loaded, and never installs or autoloads anything.

    ibis 12's read_delta runs _load_extensions(["delta"(, "httpfs")]), which issues
    INSTALL for any extension duckdb_extensions() does not report as installed; a LOAD by
    path alone leaves installed=false (so ibis would download it). Symlinks to the wheel files
    in the connection's extension_directory make DuckDB report them installed."""
    import importlib

    import duckdb
    import ibis

    con = ibis.duckdb.connect(extension_directory=str(ext_dir),
                              autoinstall_known_extensions=False,
                              autoload_known_extensions=False)
    raw = con.con
    platform = raw.execute("PRAGMA platform").fetchone()[0]
    inst = ext_dir / f"v{duckdb.__version__}" / platform
    inst.mkdir(parents=True, exist_ok=True)
    names = ("delta", "httpfs")
    for name in names:
        pkg = Path(importlib.import_module(f"duckdb_extension_{name}").__file__).parent
        wheel_file = pkg / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
        if not wheel_file.is_file():
            raise FileNotFoundError(f"{wheel_file} (duckdb-extension-{name} must match duckdb "
                                    f"{duckdb.__version__})")
        link = inst / f"{name}.duckdb_extension"
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(wheel_file)
        raw.execute(f"LOAD '{wheel_file}'")
    state = dict(((n, (i, l)) for n, i, l in raw.execute(
        "SELECT extension_name, installed, loaded FROM duckdb_extensions() "
        "WHERE extension_name IN ('delta', 'httpfs')").fetchall()))
    if any(state.get(n) != (True, True) for n in names):
        raise RuntimeError(f"DuckDB extensions not installed+loaded: {state}")
    if s3:
        st = s3_settings()
        ep = urlparse(st["endpoint"]) if st["endpoint"] else None
        parts = ["TYPE S3", "KEY_ID $key", "SECRET $secret", "REGION $region"]
        if ep:
            parts += ["ENDPOINT $endpoint", "URL_STYLE 'path'",
                      f"USE_SSL {'false' if ep.scheme == 'http' else 'true'}"]
        raw.execute(f"CREATE TEMPORARY SECRET fc_s3 ({', '.join(parts)})",
                    {"key": st["key"], "secret": st["secret"], "region": st["region"],
                     **({"endpoint": ep.netloc} if ep else {})})
    ibis.set_backend(con)
    return con


def build_objects(spec: dict, offline_store: str):
    from feast import Entity, FeatureView, Field, FileSource, ValueType
    from feast.data_format import DeltaFormat

    table = spec["table"]
    endpoint = s3_settings()["endpoint"] or None
    # The duckdb store gets S3 settings from the DuckDB secret: an s3_endpoint_override would
    # become a delta_scan(storage_options=...) parameter, which DuckDB rejects.
    override = endpoint if table.startswith("s3://") and offline_store == "file" else None
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
        created_timestamp_column=spec.get("created_timestamp_column", "pulsar_publish_time") or "",
        s3_endpoint_override=override,
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
    ap.add_argument("--offline-store", choices=OFFLINE_STORES, default="duckdb",
                    help="Feast offline store type (default: duckdb)")
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
    write_yaml(repo, args.offline_store)

    real_stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):  # stdout is for the one JSON document
        import importlib.metadata

        from feast import FeatureStore

        ibis_version = None
        if args.offline_store == "duckdb":
            duckdb_default_backend(repo / "data" / "duckdb_extensions",
                                   s3=spec["table"].startswith("s3://"))
            ibis_version = importlib.metadata.version("ibis-framework")
        store = FeatureStore(repo_path=str(repo))
        store.apply(build_objects(spec, args.offline_store))
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
        doc = {"feast_version": importlib.metadata.version("feast"),
               "offline_store": args.offline_store, "ibis_version": ibis_version,
               "rows": rows,
               "missing_entity_rows": [i for i, r in enumerate(rows) if r is None],
               "duplicated_entity_rows": sorted(duplicated)}

    real_stdout.write(json.dumps(doc, allow_nan=False) + "\n")
    real_stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
