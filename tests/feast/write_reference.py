#!/usr/bin/env python3
"""Reference writer for Feast's Redis layout, and the check that Feast reads it.

Writes rows into Redis with the byte layout from shared/feast-redis-layout.md, encoded by hand
here (entity key serialization v3 + project, MurmurHash3 x86_32 field names, feast.types.Value
protobuf bytes, `_ts:<view>` google.protobuf.Timestamp), then runs read_online.py (Feast's own
FeatureStore.get_online_features) and checks every value, its Value oneof arm and the event
time. Independent of the Rust connector: it proves the layout, and tests/feast/vectors.json
(written on every run) gives the Rust side exact bytes to assert against.

Usage (interpreter from scripts/feast_env.sh, which has feast + redis-py):
    PY=$(scripts/feast_env.sh | tail -1)
    $PY tests/feast/write_reference.py [--redis 127.0.0.1:6379] [--vectors tests/feast/vectors.json]
                                       [--keep] [--no-vectors]

Exit 0 when all checks pass; the last line is "N passed, M failed". It writes only keys of its
own throw-away project (fcref_<pid>) and deletes them afterwards (unless --keep).
"""
from __future__ import annotations

import argparse
import base64
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
M32 = 0xFFFFFFFF

# ----------------------------------------------------------------- hand encoders (no Feast)


def _rotl32(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & M32


def murmur3_x86_32(data: bytes, seed: int = 0) -> int:
    c1, c2 = 0xCC9E2D51, 0x1B873593
    h = seed & M32
    n = len(data)
    nblocks = n // 4
    for i in range(nblocks):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = _rotl32((k * c1) & M32, 15)
        h ^= (k * c2) & M32
        h = (_rotl32(h, 13) * 5 + 0xE6546B64) & M32
    tail = data[4 * nblocks:]
    k = 0
    if len(tail) >= 3:
        k ^= tail[2] << 16
    if len(tail) >= 2:
        k ^= tail[1] << 8
    if len(tail) >= 1:
        k ^= tail[0]
        k = _rotl32((k * c1) & M32, 15)
        h ^= (k * c2) & M32
    h ^= n
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & M32
    h ^= h >> 16
    return h


def feature_field(view: str, feature: str) -> bytes:
    """Hash field of a feature: murmur3_x86_32("view:feature"), 4 bytes little-endian."""
    return struct.pack("<I", murmur3_x86_32(f"{view}:{feature}".encode("utf-8")))


def ts_field(view: str) -> bytes:
    return f"_ts:{view}".encode("utf-8")


# Entity-key value types (feast.types.ValueType numbers) and their fixed encodings.
KEY_TYPES = {"Bytes": 1, "String": 2, "Int32": 3, "Int64": 4, "UnixTimestamp": 8}


def entity_key_value(dtype: str, v) -> bytes:
    if dtype == "String":
        return v.encode("utf-8")
    if dtype == "Bytes":
        return bytes(v)
    if dtype == "Int32":
        return struct.pack("<i", v)
    if dtype in ("Int64", "UnixTimestamp"):
        return struct.pack("<q", v)
    raise ValueError(dtype)


def redis_key(join_keys: dict, dtypes: dict, project: str) -> bytes:
    """serialize_entity_key v3 ++ project: u32 N | (u32 2, u32 len, name)* | (u32 type, u32 len, val)*"""
    names = sorted(join_keys, key=lambda s: s.encode("utf-8"))
    out = [struct.pack("<I", len(names))]
    for name in names:
        nb = name.encode("utf-8")
        out += [struct.pack("<II", 2, len(nb)), nb]
    for name in names:
        vb = entity_key_value(dtypes[name], join_keys[name])
        out += [struct.pack("<II", KEY_TYPES[dtypes[name]], len(vb)), vb]
    out.append(project.encode("utf-8"))
    return b"".join(out)


def varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64  # int32/int64 negatives: two's complement, always 10 bytes
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def tag(field: int, wire: int) -> bytes:
    return varint((field << 3) | wire)


def ld(field: int, payload: bytes) -> bytes:
    return tag(field, 2) + varint(len(payload)) + payload


# feast.types.Value oneof field numbers; lists are <scalar>+10, each a message {repeated T val = 1}
SCALAR_FIELD = {"Bytes": 1, "String": 2, "Int32": 3, "Int64": 4, "Float64": 5, "Float32": 6,
                "Bool": 7, "UnixTimestamp": 8}
ONEOF_NAME = {"Bytes": "bytes_val", "String": "string_val", "Int32": "int32_val",
              "Int64": "int64_val", "Float64": "double_val", "Float32": "float_val",
              "Bool": "bool_val", "UnixTimestamp": "unix_timestamp_val"}
NULL_VAL_FIELD = 19


def scalar_payload(dtype: str, v) -> tuple[int, bytes]:
    """(wire type, bytes after the tag) of one scalar."""
    if dtype in ("Int32", "Int64", "UnixTimestamp"):
        return 0, varint(int(v))
    if dtype == "Bool":
        return 0, varint(1 if v else 0)
    if dtype == "Float64":
        return 1, struct.pack("<d", v)
    if dtype == "Float32":
        return 5, struct.pack("<f", v)
    if dtype == "String":
        b = v.encode("utf-8")
        return 2, varint(len(b)) + b
    if dtype == "Bytes":
        return 2, varint(len(v)) + bytes(v)
    raise ValueError(dtype)


def parse_dtype(dtype: str) -> tuple[str, bool]:
    if dtype.startswith("Array(") and dtype.endswith(")"):
        return dtype[6:-1].strip(), True
    return dtype, False


def value_proto(dtype: str, v) -> bytes:
    """feast.types.Value bytes. Scalars always carry their oneof tag, zeros included."""
    base, is_list = parse_dtype(dtype)
    if not is_list:
        wire, payload = scalar_payload(base, v)
        return tag(SCALAR_FIELD[base], wire) + payload
    if base in ("String", "Bytes"):
        inner = b"".join(tag(1, 2) + scalar_payload(base, x)[1] for x in v)
    else:  # numeric: packed, as protobuf's own proto3 serializer writes it
        packed = b"".join(scalar_payload(base, x)[1] for x in v)
        inner = ld(1, packed) if packed else b""
    return ld(SCALAR_FIELD[base] + 10, inner)


def null_value_proto() -> bytes:
    return tag(NULL_VAL_FIELD, 0) + varint(0)  # null_val = NULL (0): 98 01 00


def timestamp_proto(seconds: int, nanos: int) -> bytes:
    """google.protobuf.Timestamp: 1 seconds int64, 2 nanos int32; proto3 omits zero fields."""
    out = b""
    if seconds:
        out += tag(1, 0) + varint(seconds)
    if nanos:
        out += tag(2, 0) + varint(nanos)
    return out


def ts_from_ms(ms: int) -> tuple[int, int]:
    return ms // 1000, (ms % 1000) * 1_000_000


# ----------------------------------------------------------------- JSON helpers

def to_json(v):
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(bytes(v)).decode("ascii")
    if isinstance(v, list):
        return [to_json(x) for x in v]
    return v


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def expected_json(dtype: str, v):
    """What read_online.py should print for a value we wrote."""
    base, is_list = parse_dtype(dtype)
    conv = (lambda x: to_json(f32(x))) if base == "Float32" else to_json
    return [conv(x) for x in v] if is_list else conv(v)


# ----------------------------------------------------------------- the test data

ALL_DTYPES = ["Int32", "Int64", "Float32", "Float64", "String", "Bool", "Bytes", "UnixTimestamp"]

USER = {"name": "user", "join_key": "user_id", "dtype": "String"}
REGION = {"name": "region", "join_key": "region", "dtype": "String"}
DRIVER = {"name": "driver", "join_key": "driver_id", "dtype": "Int64"}
STORE = {"name": "store", "join_key": "store_id", "dtype": "Int32"}

ALL_FEATURES = (
    [{"name": f"v_{d.lower()}", "dtype": d} for d in ALL_DTYPES]
    + [{"name": f"l_{d.lower()}", "dtype": f"Array({d})"} for d in ALL_DTYPES]
    + [{"name": "v_null_val", "dtype": "Int64"}, {"name": "v_empty_field", "dtype": "String"}]
)

ROW_FULL = {
    "v_int32": -7, "v_int64": 9007199254740993, "v_float32": 0.1, "v_float64": 0.1,
    "v_string": "h\u00e9llo \u2713", "v_bool": True, "v_bytes": b"\x00\xffbin",
    "v_unixtimestamp": 1700000000,
    "l_int32": [1, -2, 2147483647], "l_int64": [-1, 0, 1 << 40], "l_float32": [0.5, -1.25, 0.1],
    "l_float64": [1.5, -2.25, 1e-300], "l_string": ["a", "b", ""], "l_bool": [True, False, True],
    "l_bytes": [b"\x01", b""], "l_unixtimestamp": [1700000000, 1],
}
ROW_ZERO = {
    "v_int32": 0, "v_int64": 0, "v_float32": 0.0, "v_float64": 0.0, "v_string": "",
    "v_bool": False, "v_bytes": b"", "v_unixtimestamp": 0,
    **{f"l_{d.lower()}": [] for d in ALL_DTYPES},
}


def build_cases():
    """(view def, rows) where a row is (join_keys, {feature: value}, _ts ms or (s, ns) or None)."""
    views = [
        {"name": "ref_all", "entities": [USER], "features": ALL_FEATURES, "ttl_seconds": 0},
        # Same join-key set as ref_all: lives in the same Redis hash.
        {"name": "ref_more", "entities": [USER],
         "features": [{"name": "score", "dtype": "Float64"}], "ttl_seconds": 3600},
        # Two join keys, declared out of byte order (user_id, region): the key sorts them.
        {"name": "ref_pair", "entities": [USER, REGION],
         "features": [{"name": "clicks", "dtype": "Int64"}, {"name": "ctr", "dtype": "Float32"},
                      {"name": "tags", "dtype": "Array(String)"}], "ttl_seconds": 0},
        {"name": "ref_driver", "entities": [DRIVER],
         "features": [{"name": "conv_rate", "dtype": "Float32"},
                      {"name": "acc_rate", "dtype": "Float64"},
                      {"name": "trips", "dtype": "Int32"}], "ttl_seconds": 0},
        {"name": "ref_store", "entities": [STORE],
         "features": [{"name": "is_open", "dtype": "Bool"},
                      {"name": "opened_at", "dtype": "UnixTimestamp"}], "ttl_seconds": 0},
    ]
    rows = {
        "ref_all": [
            ({"user_id": "user-1"}, dict(ROW_FULL), 1700000000123),
            ({"user_id": "user-2"}, dict(ROW_ZERO), (1700000000, 123456789)),
            ({"user_id": "user-3"}, {"v_int64": 42}, 1700000001000),
        ],
        "ref_more": [({"user_id": "user-1"}, {"score": 2.5}, 1700000002000)],
        "ref_pair": [
            ({"user_id": "user-1", "region": "eu-west"},
             {"clicks": 11, "ctr": 0.25, "tags": ["x", "y"]}, 1700000000123),
            ({"user_id": "user-1", "region": "us-east"},
             {"clicks": 12, "ctr": 0.75, "tags": []}, 1700000000456),
        ],
        "ref_driver": [
            ({"driver_id": 1001}, {"conv_rate": 0.5, "acc_rate": 0.875, "trips": 3}, 1700000000123),
            ({"driver_id": -5}, {"conv_rate": -0.5, "acc_rate": -1.0, "trips": -3}, 1700000000000),
        ],
        "ref_store": [({"store_id": 7}, {"is_open": True, "opened_at": 1600000000}, 1700000000123)],
    }
    # Entity rows to read (includes entities never written).
    reads = {
        "ref_all": ["user-1", "user-2", "user-3", "user-404"],
        "ref_more": ["user-1", "user-2"],
        "ref_pair": [("user-1", "eu-west"), ("user-1", "us-east"), ("user-1", "ap-south")],
        "ref_driver": [1001, -5, 9],
        "ref_store": [7, 8],
    }
    return views, rows, reads


# ----------------------------------------------------------------- checks

class Checker:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def eq(self, what, got, want):
        if got == want or (isinstance(got, float) and isinstance(want, float)
                           and math.isnan(got) and math.isnan(want)):
            self.passed += 1
        else:
            self.failed += 1
            print(f"FAIL {what}: got {got!r}, want {want!r}", file=sys.stderr)

    def true(self, what, cond, detail=""):
        self.eq(what + (f" ({detail})" if detail else ""), bool(cond), True)


def check_doc_vectors(c: Checker):
    """Byte vectors quoted in shared/feast-redis-layout.md."""
    c.eq("murmur3 'driver_stats:conv_rate'", murmur3_x86_32(b"driver_stats:conv_rate"), 0x141073FA)
    c.eq("field 'driver_stats:conv_rate'", feature_field("driver_stats", "conv_rate").hex(), "fa731014")
    want = ("01000000" "02000000" "09000000" + b"driver_id".hex() + "04000000" "08000000"
            "e903000000000000" + b"demo".hex())
    c.eq("key driver_id=1001 demo", redis_key({"driver_id": 1001}, {"driver_id": "Int64"}, "demo").hex(), want)
    c.eq("Float32 0.5", value_proto("Float32", 0.5).hex(), "350000003f")
    c.eq("Int64 0", value_proto("Int64", 0).hex(), "2000")
    c.eq("Bool true", value_proto("Bool", True).hex(), "3801")
    c.eq("Array(String) [a,b]", value_proto("Array(String)", ["a", "b"]).hex(), "62060a01610a0162")
    # murmur3 edge lengths against the reference C implementation's published vectors
    for data, h in [(b"", 0), (b"a", 0x3C2569B2), (b"ab", 0x9BBFD75F), (b"abc", 0xB3DD93FA),
                    (b"abcd", 0x43ED676A), (b"Hello, world!", 0xC0363E43)]:
        c.eq(f"murmur3 {data!r}", murmur3_x86_32(data), h)


def check_against_feast_encoders(c: Checker, views, rows, project):
    """Cross-check the hand encoders against Feast's / protobuf's own serializers."""
    try:
        import mmh3
        from google.protobuf.timestamp_pb2 import Timestamp
        from feast.infra.key_encoding_utils import serialize_entity_key
        from feast.infra.online_stores.helpers import _mmh3
        from feast.protos.feast.types.EntityKey_pb2 import EntityKey
        from feast.protos.feast.types.Value_pb2 import Value
        from feast.protos.feast.types.Value_pb2 import (BoolList, BytesList, DoubleList, FloatList,
                                                        Int32List, Int64List, StringList)
    except ImportError as e:
        print(f"note: skipping the cross-check against Feast's encoders ({e})", file=sys.stderr)
        return
    lists = {"Int32": Int32List, "Int64": Int64List, "Float32": FloatList, "Float64": DoubleList,
             "String": StringList, "Bool": BoolList, "Bytes": BytesList, "UnixTimestamp": Int64List}

    def feast_value(dtype, v):
        base, is_list = parse_dtype(dtype)
        if is_list:
            arm = ONEOF_NAME[base].replace("_val", "_list_val")
            return Value(**{arm: lists[base](val=v)})
        return Value(**{ONEOF_NAME[base]: v})

    for data in [b"driver_stats:conv_rate", b"", b"abc", "ref_all:v_int64".encode()]:
        c.eq(f"mmh3 pkg {data!r}", mmh3.hash(data, signed=False), murmur3_x86_32(data))
    vdefs = {v["name"]: v for v in views}
    for vname, vrows in rows.items():
        v = vdefs[vname]
        dt = {e["join_key"]: e["dtype"] for e in v["entities"]}
        fdt = {f["name"]: f["dtype"] for f in v["features"]}
        for jk, feats, ts in vrows:
            vals = []
            for k in jk:  # Feast sorts (key, value) pairs itself
                vp = feast_value(dt[k], jk[k]) if dt[k] != "UnixTimestamp" else Value(unix_timestamp_val=jk[k])
                vals.append(vp)
            ek = EntityKey(join_keys=list(jk), entity_values=vals)
            c.eq(f"key {vname} {jk}", serialize_entity_key(ek, 3) + project.encode(),
                 redis_key(jk, dt, project))
            for f, val in feats.items():
                c.eq(f"field {vname}:{f}", _mmh3(f"{vname}:{f}"), feature_field(vname, f))
                c.eq(f"value {vname}:{f}", feast_value(fdt[f], val).SerializeToString(),
                     value_proto(fdt[f], val))
            s, ns = ts_from_ms(ts) if isinstance(ts, int) else ts
            c.eq(f"_ts {vname} {jk}", Timestamp(seconds=s, nanos=ns).SerializeToString(),
                 timestamp_proto(s, ns))
    c.eq("null_val", Value(null_val=0).SerializeToString(), null_value_proto())


# ----------------------------------------------------------------- main

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Hand-encoded Feast Redis rows, read back by Feast")
    ap.add_argument("--redis", default=os.environ.get("FC_FEAST_REDIS", "127.0.0.1:6379"))
    ap.add_argument("--vectors", type=Path, default=HERE / "vectors.json")
    ap.add_argument("--no-vectors", action="store_true", help="do not (re)write the vectors file")
    ap.add_argument("--keep", action="store_true", help="keep the Redis keys and the repo dir")
    args = ap.parse_args(argv)

    import redis  # redis-py from the feast venv: only the transport, bytes are ours

    host, _, port = args.redis.rpartition(":")
    r = redis.Redis(host=host or "127.0.0.1", port=int(port))
    r.ping()

    c = Checker()
    check_doc_vectors(c)

    project = f"fcref_{os.getpid()}"
    views, rows, reads = build_cases()
    vdefs = {v["name"]: v for v in views}
    check_against_feast_encoders(c, views, rows, project)

    # ---- write (hand-encoded bytes only)
    written_keys = set()
    expect = {}  # (view, join-key tuple) -> (feature values, ts (s, ns))
    for vname, vrows in rows.items():
        v = vdefs[vname]
        dt = {e["join_key"]: e["dtype"] for e in v["entities"]}
        fdt = {f["name"]: f["dtype"] for f in v["features"]}
        for jk, feats, ts in vrows:
            key = redis_key(jk, dt, project)
            s, ns = ts_from_ms(ts) if isinstance(ts, int) else ts
            mapping = {feature_field(vname, f): value_proto(fdt[f], val) for f, val in feats.items()}
            mapping[ts_field(vname)] = timestamp_proto(s, ns)
            if vname == "ref_all" and jk["user_id"] == "user-1":
                mapping[feature_field(vname, "v_null_val")] = null_value_proto()
                mapping[feature_field(vname, "v_empty_field")] = b""
            r.hset(key, mapping=mapping)
            written_keys.add(key)
            expect[(vname, tuple(sorted(jk.items())))] = (feats, (s, ns))

    # ref_all and ref_more share user-1's hash
    k1 = redis_key({"user_id": "user-1"}, {"user_id": "String"}, project)
    c.true("one hash holds both views", r.hexists(k1, b"_ts:ref_all") and r.hexists(k1, b"_ts:ref_more"))

    # ---- read back with Feast
    spec_reads = []
    for vname, ids in reads.items():
        v = vdefs[vname]
        jks = [e["join_key"] for e in v["entities"]]
        erows = [dict(zip(jks, i if isinstance(i, tuple) else (i,))) for i in ids]
        spec_reads.append({"view": vname, "features": [f["name"] for f in v["features"]],
                           "entity_rows": erows})
    spec = {"views": views, "read": spec_reads}

    tmp = Path(tempfile.mkdtemp(prefix="fcref_"))
    try:
        (tmp / "spec.json").write_text(json.dumps(spec, indent=1))
        cmd = [sys.executable, str(HERE / "read_online.py"), "--repo-dir", str(tmp / "repo"),
               "--redis", args.redis, "--project", project, "--spec", str(tmp / "spec.json")]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            print(p.stderr[-4000:], file=sys.stderr)
            c.eq("read_online.py exit code", p.returncode, 0)
            raise SystemExit(finish(c))
        lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
        c.eq("read_online.py prints one JSON line", len(lines), 1)
        doc = json.loads(lines[-1])
        print(f"feast {doc.get('feast_version')} read {sum(len(x['rows']) for x in doc['reads'])} rows",
              file=sys.stderr)

        for rd, sr in zip(doc["reads"], spec_reads):
            vname = rd["view"]
            c.eq("read order", vname, sr["view"])
            v = vdefs[vname]
            fdt = {f["name"]: f["dtype"] for f in v["features"]}
            for i, erow in enumerate(sr["entity_rows"]):
                got, kinds, ts_us = rd["rows"][i], rd["kinds"][i], rd["event_time_us"][i]
                feats, ts = expect.get((vname, tuple(sorted(erow.items()))), ({}, None))
                for f, d in fdt.items():
                    base, is_list = parse_dtype(d)
                    where = f"{vname} {erow} {f}"
                    if f == "v_null_val" and erow == {"user_id": "user-1"}:
                        # Value{null_val: NULL}: Feast hands back 0, not None. Do not write it.
                        c.eq(where + " (null_val arm)", kinds.get(f), "null_val")
                        c.eq(where + " (null_val value)", got.get(f), 0)
                    elif f in feats:
                        c.eq(where, got.get(f), expected_json(d, feats[f]))
                        arm = ONEOF_NAME[base].replace("_val", "_list_val") if is_list else ONEOF_NAME[base]
                        c.eq(where + " (arm)", kinds.get(f), arm)
                    else:  # absent field, empty field value, or entity never written
                        c.eq(where + " (null)", got.get(f), None)
                        c.eq(where + " (arm)", kinds.get(f), None)
                if ts is None:
                    c.eq(f"{vname} {erow} _ts (absent reads as epoch 0)", ts_us, 0)
                else:
                    s, ns = ts
                    want_us = s * 1_000_000 + ns // 1000
                    # Feast goes through a float (seconds + nanos/1e9) and a datetime: microseconds,
                    # rounded, may be off by one for sub-microsecond nanos.
                    c.true(f"{vname} {erow} _ts", abs(ts_us - want_us) <= 1, f"got {ts_us} want {want_us}")
                    if ns % 1000 == 0:
                        c.eq(f"{vname} {erow} _ts exact", ts_us, want_us)
    finally:
        if not args.keep:
            if written_keys:
                r.delete(*written_keys)
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept project {project} keys and {tmp}", file=sys.stderr)

    if not args.no_vectors:
        write_vectors(args.vectors)
        print(f"wrote {args.vectors}", file=sys.stderr)
    return finish(c)


def finish(c: Checker) -> int:
    print(f"{c.passed} passed, {c.failed} failed")
    return 0 if c.failed == 0 else 1


# ----------------------------------------------------------------- vectors for the Rust side

def write_vectors(path: Path):
    project = "demo"
    out = []

    def add(desc, jk, jdt, view, feature, dtype, value, field, vbytes):
        out.append({
            "description": desc,
            "join_keys": jk,
            "join_key_dtypes": jdt,
            "project": project,
            "view": view,
            "feature": feature,
            "dtype": dtype,
            "value": value,
            "key_hex": redis_key(jk, jdt, project).hex(),
            "field_hex": field.hex(),
            "value_hex": vbytes.hex(),
        })

    def add_feature(desc, jk, jdt, view, feature, dtype, value):
        add(desc, jk, jdt, view, feature, dtype, to_json(value), feature_field(view, feature),
            value_proto(dtype, value))

    def add_ts(desc, jk, jdt, view, ms):
        s, ns = ts_from_ms(ms)
        add(desc + f"; google.protobuf.Timestamp seconds={s} nanos={ns}", jk, jdt, view, "_ts",
            "Timestamp", ms, ts_field(view), timestamp_proto(s, ns))

    u = ({"user_id": "user-1"}, {"user_id": "String"})
    samples = [
        ("Int32", -7), ("Int32", 0), ("Int32", 150),
        ("Int64", 9007199254740993), ("Int64", 0), ("Int64", -1),
        ("Float32", 0.5), ("Float32", 0.1), ("Float32", 0.0),
        ("Float64", 0.1), ("Float64", 0.0),
        ("String", "h\u00e9llo"), ("String", ""),
        ("Bool", True), ("Bool", False),
        ("Bytes", b"\x00\xffbin"), ("Bytes", b""),
        ("UnixTimestamp", 1700000000),
        ("Array(Int32)", [1, -2]), ("Array(Int64)", [1, 300, -1]), ("Array(Int64)", []),
        ("Array(Float32)", [0.5, -1.25]), ("Array(Float64)", [1.5, -2.25]),
        ("Array(String)", ["a", "b", ""]), ("Array(String)", []),
        ("Array(Bool)", [True, False]), ("Array(Bytes)", [b"\x01", b""]),
        ("Array(UnixTimestamp)", [1700000000, 1]),
    ]
    for dtype, value in samples:
        base, is_list = parse_dtype(dtype)
        fname = ("l_" if is_list else "v_") + base.lower()
        note = ""
        if base == "Float32" and not is_list and f32(value) != value:
            note = f"; Feast reads it back as {f32(value)!r}"
        if base == "Bytes" or (is_list and base == "Bytes"):
            note += "; value is base64"
        if base == "UnixTimestamp":
            note += "; epoch seconds"
        add_feature(f"{dtype} {value!r} in view user_profile, feature {fname}{note}",
                    *u, "user_profile", fname, dtype, value)
    add_ts("event time 1700000000123 ms of view user_profile", *u, "user_profile", 1700000000123)
    out.append({
        "description": "explicit null: do NOT write Value{null_val} (Feast reads 0); omit the field "
                       "(HDEL) instead. Shown for recognition only.",
        "join_keys": u[0], "join_key_dtypes": u[1], "project": project, "view": "user_profile",
        "feature": "v_int64", "dtype": "Int64", "value": None,
        "key_hex": redis_key(*u, project).hex(),
        "field_hex": feature_field("user_profile", "v_int64").hex(),
        "value_hex": null_value_proto().hex(),
    })

    d = ({"driver_id": 1001}, {"driver_id": "Int64"})
    add_feature("doc vector: view driver_stats, Int64 join key driver_id=1001", *d, "driver_stats",
                "conv_rate", "Float32", 0.5)
    add_ts("doc vector: driver_stats event time", *d, "driver_stats", 1700000000123)
    s = ({"store_id": 7}, {"store_id": "Int32"})
    add_feature("Int32 join key store_id=7 (type 3, 4 bytes)", *s, "store_stats", "is_open", "Bool", True)
    p = ({"user_id": "user-1", "region": "eu-west"}, {"user_id": "String", "region": "String"})
    add_feature("two join keys (user_id, region): sorted by name bytes, region first", *p,
                "user_region", "clicks", "Int64", 11)
    add_ts("two join keys: event time", *p, "user_region", 1700000000123)
    path.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except Exception:
        traceback.print_exc()
        print("0 passed, 1 failed")
        sys.exit(1)
