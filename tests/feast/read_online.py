#!/usr/bin/env python3
"""Read rows back from Redis with Feast's own SDK (FeatureStore.get_online_features).

Usage:
    read_online.py --repo-dir DIR --redis HOST:PORT --project P --spec SPEC.json
    read_online.py --repo-dir DIR --remote URL [--token-env VAR] --project P --spec SPEC.json

Run it with the interpreter printed by scripts/feast_env.sh. It writes into DIR:
    feature_store.yaml   project P, registry DIR/data/registry.db, provider local,
                         online_store redis (connection_string HOST:PORT), or with
                         --remote: online_store remote (path URL, a Feast feature server
                         or feature-connector's serving listener), and with --token-env
                         auth {type: oidc, token_env_var: VAR} (a static bearer token),
                         entity_key_serialization_version 3
    feature_repo.py      Entities, one FileSource (a parquet that need not exist) and one
                         FeatureView per spec view
then applies those objects (FeatureStore.apply, partial: nothing else in the registry is
deleted, nothing in Redis is touched), runs each read and prints ONE JSON document on stdout:

    {"feast_version": "0.67.0",
     "reads": [{"view": "user_profile",
                "rows":     [{"purchases_30d": 3, ...}, ...],   # one per entity row, in order
                "kinds":    [{"purchases_30d": "int64_val", ...}, ...],  # Value oneof arm read, or null
                "statuses": [{"purchases_30d": "PRESENT", ...}, ...],    # PRESENT | NOT_FOUND | NULL_VALUE
                "event_time_us": [1700000000123000, ...]}]}  # the row's _ts as Feast returns it
                                                             # (0 when the hash has no _ts:<view>;
                                                             # null when the response has none:
                                                             # the remote store drops them)

Values: null when missing, bytes as base64 strings, UnixTimestamp as epoch seconds, lists as
lists, non-finite floats as the strings "NaN", "Infinity", "-Infinity". Feature names are
unprefixed (full_feature_names=False). Everything else (Feast's logs/warnings) goes to stderr.

SPEC.json:
    {"views": [{"name": "user_profile",
                "entities": [{"name": "user", "join_key": "user_id", "dtype": "String"}],
                "features": [{"name": "purchases_30d", "dtype": "Int64"}, ...],
                "ttl_seconds": 0}],
     "feature_services": [{"name": "ranking", "features": {"user_profile": ["purchases_30d"]}}],
     "read": [{"view": "user_profile", "features": ["purchases_30d"],
               "entity_rows": [{"user_id": "user-1"}]},
              {"feature_service": "ranking", "full_feature_names": true,
               "entity_rows": [{"user_id": "user-1"}]}]}
dtypes: Int32 Int64 Float32 Float64 String Bool Bytes UnixTimestamp and Array(<one of those>).
Join-key dtypes: String Int32 Int64 Bytes UnixTimestamp. "features" in a read defaults to all
of the view's features. Bytes join-key values in entity_rows are given as base64 strings.
A read names a "view" (and optionally "features") or a "feature_service" (rows then hold the
service's features); "full_feature_names": true names row keys `view__feature`. A feature
service lists, per view, its features (an empty list: all of the view's).

A read with "raw_features" (["view:feature", ...], passed as written, unknown names
included) and string "entity_rows" as given, asks for what the server may refuse: its
output is {"raw": true, "error": null} when the read succeeded, or
{"raw": true, "error": {"module": ..., "class": ..., "message": ...}} naming the exception
Feast's client raised (e.g. feast.errors.FeatureViewNotFoundException, or builtins.RuntimeError
when the server's answer carried no Feast error detail).
"""
from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import importlib.util
import json
import math
import os
import re
import sys
from pathlib import Path

os.environ.setdefault("FEAST_USAGE", "False")  # no usage telemetry

SCALARS = ("Int32", "Int64", "Float32", "Float64", "String", "Bool", "Bytes", "UnixTimestamp")
JOIN_KEY_VALUE_TYPES = {
    "String": "STRING",
    "Int32": "INT32",
    "Int64": "INT64",
    "Bytes": "BYTES",
    "UnixTimestamp": "UNIX_TIMESTAMP",
}
ARRAY_RE = re.compile(r"^Array\(\s*(\w+)\s*\)$")
IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-.]*$")


class SpecError(Exception):
    pass


def dtype_expr(dtype: str) -> str:
    """Spec dtype -> Python expression over feast.types."""
    d = dtype.strip()
    if d in SCALARS:
        return d
    m = ARRAY_RE.match(d)
    if m and m.group(1) in SCALARS:
        return f"Array({m.group(1)})"
    raise SpecError(f"unsupported dtype {dtype!r} (want one of {', '.join(SCALARS)} or Array(T))")


def check_name(what: str, name) -> str:
    if not isinstance(name, str) or not IDENT_RE.match(name):
        raise SpecError(f"bad {what} name {name!r}")
    return name


def parse_spec(spec: dict):
    if not isinstance(spec, dict) or not isinstance(spec.get("views"), list):
        raise SpecError('spec needs a "views" list')
    entities: dict[str, dict] = {}
    views: dict[str, dict] = {}
    for v in spec["views"]:
        name = check_name("view", v.get("name"))
        if name in views:
            raise SpecError(f"view {name!r} defined twice")
        ents = v.get("entities") or []
        if not ents:
            raise SpecError(f"view {name!r} has no entities")
        for e in ents:
            ename = check_name("entity", e.get("name"))
            jk = check_name("join key", e.get("join_key", ename))
            jdt = e.get("dtype", "String")
            if jdt not in JOIN_KEY_VALUE_TYPES:
                raise SpecError(f"entity {ename!r}: unsupported join-key dtype {jdt!r}")
            norm = {"name": ename, "join_key": jk, "dtype": jdt}
            if ename in entities and entities[ename] != norm:
                raise SpecError(f"entity {ename!r} defined twice with different join key/dtype")
            entities[ename] = norm
        feats = v.get("features") or []
        if not feats:
            raise SpecError(f"view {name!r} has no features")
        seen = set()
        for f in feats:
            check_name("feature", f.get("name"))
            dtype_expr(f.get("dtype", ""))
            if f["name"] in seen:
                raise SpecError(f"view {name!r}: feature {f['name']!r} twice")
            seen.add(f["name"])
        views[name] = {
            "name": name,
            "entities": [e["name"] for e in ents],
            "join_keys": {e.get("join_key", e["name"]): e.get("dtype", "String") for e in ents},
            "features": [{"name": f["name"], "dtype": f["dtype"]} for f in feats],
            "ttl_seconds": int(v.get("ttl_seconds") or 0),
        }
    services: dict[str, list] = {}
    for fs in spec.get("feature_services") or []:
        name = check_name("feature service", fs.get("name"))
        pairs = []
        for view_name, feats in (fs.get("features") or {}).items():
            if view_name not in views:
                raise SpecError(f"feature service {name!r}: unknown view {view_name!r}")
            known = [f["name"] for f in views[view_name]["features"]]
            for f in feats or known:
                if f not in known:
                    raise SpecError(f"feature service {name!r}: unknown feature {view_name}:{f}")
                pairs.append((view_name, f))
        services[name] = pairs
    reads = spec.get("read") or []
    for r in reads:
        if r.get("raw_features") is not None:
            continue
        if r.get("feature_service") is not None:
            if r["feature_service"] not in services:
                raise SpecError(f"read of unknown feature service {r['feature_service']!r}")
            continue
        if r.get("view") not in views:
            raise SpecError(f"read of unknown view {r.get('view')!r}")
        known = {f["name"] for f in views[r["view"]]["features"]}
        for f in r.get("features") or []:
            if f not in known:
                raise SpecError(f"read of unknown feature {r['view']}:{f}")
    return entities, views, services, reads


def write_yaml(repo: Path, project: str, redis, remote=None, token_env=None) -> None:
    registry = repo / "data" / "registry.db"
    if remote:
        store = f"  type: remote\n  path: {json.dumps(remote)}\n"
    else:
        store = f"  type: redis\n  connection_string: {json.dumps(redis)}\n"
    auth = f"auth:\n  type: oidc\n  token_env_var: {json.dumps(token_env)}\n" if token_env else ""
    text = (
        f"project: {json.dumps(project)}\n"
        f"registry: {json.dumps(str(registry))}\n"
        "provider: local\n"
        "online_store:\n"
        f"{store}"
        f"{auth}"
        "entity_key_serialization_version: 3\n"
    )
    (repo / "feature_store.yaml").write_text(text)


def write_repo_py(repo: Path, entities: dict, views: dict, services: dict) -> Path:
    data = repo / "data"
    lines = [
        "# Generated by tests/feast/read_online.py; overwritten on every run.",
        "from datetime import timedelta",
        "",
        "from feast import Entity, FeatureService, FeatureView, Field, FileSource, ValueType",
        "from feast.types import Array, Bool, Bytes, Float32, Float64, Int32, Int64, String, UnixTimestamp",
        "",
        "ENTITIES = {}",
        "VIEWS = {}",
        "",
    ]
    for e in entities.values():
        lines.append(
            f"ENTITIES[{e['name']!r}] = Entity(name={e['name']!r}, join_keys=[{e['join_key']!r}], "
            f"value_type=ValueType.{JOIN_KEY_VALUE_TYPES[e['dtype']]})"
        )
    lines.append("")
    for v in views.values():
        parquet = str(data / f"{v['name']}.parquet")  # need not exist
        fields = [f"Field(name={jk!r}, dtype={dtype_expr(jdt)})" for jk, jdt in v["join_keys"].items()]
        fields += [f"Field(name={f['name']!r}, dtype={dtype_expr(f['dtype'])})" for f in v["features"]]
        ents = ", ".join(f"ENTITIES[{n!r}]" for n in v["entities"])
        lines += [
            f"VIEWS[{v['name']!r}] = FeatureView(",
            f"    name={v['name']!r},",
            f"    entities=[{ents}],",
            f"    ttl=timedelta(seconds={v['ttl_seconds']}),",
            "    schema=[",
            *[f"        {f}," for f in fields],
            "    ],",
            "    online=True,",
            f"    source=FileSource(name={(v['name'] + '_source')!r}, path={parquet!r}, "
            "timestamp_field='event_time'),",
            ")",
            "",
        ]
    lines.append("SERVICES = {}")
    for name, pairs in services.items():
        per_view: dict[str, list] = {}
        for view_name, f in pairs:
            per_view.setdefault(view_name, []).append(f)
        projections = ", ".join(f"VIEWS[{v!r}][{fs!r}]" for v, fs in per_view.items())
        lines.append(f"SERVICES[{name!r}] = FeatureService(name={name!r}, features=[{projections}])")
    lines.append("OBJECTS = [*ENTITIES.values(), *VIEWS.values(), *SERVICES.values()]")
    path = repo / "feature_repo.py"
    path.write_text("\n".join(lines) + "\n")
    return path


def load_module(path: Path):
    spec = importlib.util.spec_from_file_location("fc_generated_feature_repo", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def entity_value(v, dtype: str):
    if dtype == "Bytes" and isinstance(v, str):
        return base64.b64decode(v)
    if dtype in ("Int32", "Int64", "UnixTimestamp") and isinstance(v, bool):
        raise SpecError(f"bool given for a {dtype} join key")
    return v


def to_json(v):
    if v is None:
        return None
    if isinstance(v, bool):
        return v
    if isinstance(v, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(v)).decode("ascii")
    if isinstance(v, dt.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=dt.timezone.utc)
        s = v.timestamp()
        return int(s) if s == int(s) else s
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "Infinity" if v > 0 else "-Infinity"
        return v
    if isinstance(v, (list, tuple, set)):
        return [to_json(x) for x in v]
    if isinstance(v, (int, str)):
        return v
    if hasattr(v, "item"):  # numpy scalar
        return to_json(v.item())
    return str(v)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo-dir", required=True, type=Path)
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--redis", help="HOST:PORT")
    where.add_argument("--remote", help="URL of a feature server (online_store type remote)")
    ap.add_argument("--token-env", help="environment variable holding the bearer token (with --remote)")
    ap.add_argument("--project", required=True)
    ap.add_argument("--spec", required=True, type=Path)
    args = ap.parse_args(argv)

    try:
        spec = json.loads(args.spec.read_text())
        entities, views, services, reads = parse_spec(spec)
    except (OSError, ValueError, SpecError) as e:
        print(f"read_online.py: bad spec {args.spec}: {e}", file=sys.stderr)
        return 2
    if not re.match(r"^[A-Za-z0-9_]+$", args.project):
        print(f"read_online.py: bad project name {args.project!r} (Feast wants [A-Za-z0-9_])",
              file=sys.stderr)
        return 2

    repo = args.repo_dir.resolve()
    (repo / "data").mkdir(parents=True, exist_ok=True)
    write_yaml(repo, args.project, args.redis, args.remote, args.token_env)
    repo_py = write_repo_py(repo, entities, views, services)

    # Keep stdout for the one JSON document: anything Feast prints goes to stderr.
    real_stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        import importlib.metadata

        from feast import FeatureStore
        from feast.protos.feast.serving.ServingService_pb2 import FieldStatus

        mod = load_module(repo_py)
        store = FeatureStore(repo_path=str(repo))
        store.apply(mod.OBJECTS)  # partial apply: deletes nothing

        out_reads = []
        for r in reads:
            if r.get("raw_features") is not None:
                try:
                    store.get_online_features(
                        features=r["raw_features"], entity_rows=r.get("entity_rows") or []
                    )
                    error = None
                except Exception as e:  # the point: which class Feast's client raises
                    error = {"module": type(e).__module__, "class": type(e).__name__,
                             "message": str(e)}
                out_reads.append({"raw": True, "error": error})
                continue
            full = bool(r.get("full_feature_names"))
            if r.get("feature_service") is not None:
                pairs = services[r["feature_service"]]
                features_arg = store.get_feature_service(r["feature_service"])
            else:
                v = views[r["view"]]
                pairs = [(v["name"], f) for f in (r.get("features") or [f["name"] for f in v["features"]])]
                features_arg = [f"{view_name}:{f}" for view_name, f in pairs]
            key_types = {}
            for view_name, _ in pairs:
                key_types.update(views[view_name]["join_keys"])
            feats = [f"{view_name}__{f}" if full else f for view_name, f in pairs]
            rows_in = [
                {k: entity_value(val, key_types.get(k, "String")) for k, val in row.items()}
                for row in r.get("entity_rows") or []
            ]
            resp = store.get_online_features(
                features=features_arg,
                entity_rows=rows_in,
                full_feature_names=full,
            )
            as_dict = resp.to_dict()
            proto = resp.proto
            names = list(proto.metadata.feature_names.val)
            n = len(rows_in)
            rows = [{f: to_json(as_dict[f][i]) for f in feats} for i in range(n)]
            kinds = [dict.fromkeys(feats) for _ in range(n)]
            statuses = [dict.fromkeys(feats) for _ in range(n)]
            ts_us = [None] * n
            for name, vec in zip(names, proto.results):
                if name not in feats:
                    continue  # join-key columns
                for i in range(n):
                    kinds[i][name] = vec.values[i].WhichOneof("val")
                    statuses[i][name] = FieldStatus.Name(vec.statuses[i])
                    # The remote store's responses carry no event timestamps.
                    if (vec.statuses[i] != FieldStatus.NOT_FOUND and ts_us[i] is None
                            and i < len(vec.event_timestamps)):
                        t = vec.event_timestamps[i]
                        ts_us[i] = t.seconds * 1_000_000 + t.nanos // 1000
            out_reads.append({
                "view": r.get("view") or r["feature_service"],
                "rows": rows,
                "kinds": kinds,
                "statuses": statuses,
                "event_time_us": ts_us,
            })
        doc = {"feast_version": importlib.metadata.version("feast"), "reads": out_reads}

    real_stdout.write(json.dumps(doc, allow_nan=False) + "\n")
    real_stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
