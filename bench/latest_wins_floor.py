"""Profiling aid: what Redis CPU a latest-wins write costs against a plain write.

On a private redis-server (no persistence), writes 200,000 entities of 10 fields three ways
and prints redis-server CPU µs per entity (/proc) for each:
  plain     pipelined HSET of the fields and the time field (no latest-wins at all)
  hset-only a script that only runs the same HSET per entity, no time read or compare: what
            running a write inside Lua costs before any latest-wins logic
  floor     the least any Lua latest-wins can do: per entity one HGET of the stored time and
            one HSET, fields named once per call (256 entities per EVALSHA)
  connector the connector's own script (read from src/redis/writer.rs), same calls
Each runs on empty keys, then again over the keys it wrote (newer times: every entity written).

usage: python3 bench/latest_wins_floor.py   (needs the `redis` package: bench/peers/setup_venv.sh)
"""
import os, random, re, subprocess, tempfile, time
from pathlib import Path
import redis

ROOT = Path(__file__).resolve().parents[1]
PORT = int(os.environ.get("FLOOR_REDIS_PORT", "6398"))
N, PER_CALL = 200_000, 256
NAMES = [f"feature_{i}".encode() for i in range(10)]
FLOOR = """
local n = tonumber(ARGV[4])
local common = {ARGV[2], false}
for i = 1, n do common[1 + 2 * i] = ARGV[4 + i] end
local a = 5 + n
for k = 1, #KEYS do
  local at = tonumber(ARGV[a])
  local stored = redis.call('HGET', KEYS[k], ARGV[2])
  if not stored or tonumber(stored) <= at then
    common[2] = ARGV[a + 1]
    for i = 1, n do common[2 + 2 * i] = ARGV[a + 3 + i] end
    redis.call('HSET', KEYS[k], unpack(common))
  end
  a = a + 4 + n
end
return 0
"""
HSET_ONLY = FLOOR.replace("""  local stored = redis.call('HGET', KEYS[k], ARGV[2])
  if not stored or tonumber(stored) <= at then""", "  do")
assert HSET_ONLY != FLOOR
source = (ROOT / "src/redis/writer.rs").read_text()
CONNECTOR = re.search(r'const LATEST_WINS_LUA: &str = r"(.*?)";', source, re.S).group(1)

with tempfile.TemporaryDirectory() as data:
    server = subprocess.Popen(["redis-server", "--port", str(PORT), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", data], stdout=subprocess.DEVNULL)
    r = redis.Redis(port=PORT)
    for _ in range(100):
        try:
            r.ping(); break
        except redis.ConnectionError:
            time.sleep(0.05)
    ticks = os.sysconf("SC_CLK_TCK")
    def cpu():
        fields = Path(f"/proc/{server.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / ticks
    values = [[str(random.randint(0, 10**6)).encode() for _ in NAMES] for _ in range(N)]
    def plain(base):
        p = r.pipeline(transaction=False)
        for i, vals in enumerate(values):
            args = [b"_ts", str(base + i).encode()]
            for name, value in zip(NAMES, vals): args += [name, value]
            p.execute_command("HSET", f"fc:floor:{i}", *args)
            if i % PER_CALL == PER_CALL - 1: p.execute()
        p.execute()
    def scripted(script, base):
        sha = r.script_load(script)
        p = r.pipeline(transaction=False)
        for start in range(0, N, PER_CALL):
            ids = range(start, min(start + PER_CALL, N))
            argv = [0, b"_ts", b"ms", len(NAMES), *NAMES]
            for i in ids: argv += [base + i, str(base + i).encode(), -1, 0, *values[i]]
            p.evalsha(sha, len(ids), *[f"fc:floor:{i}" for i in ids], *argv)
            if (start // PER_CALL) % 4 == 3: p.execute()
        p.execute()
    try:
        for label, write in [("plain HSET", plain), ("hset-only script", lambda b: scripted(HSET_ONLY, b)),
                             ("floor script", lambda b: scripted(FLOOR, b)),
                             ("connector script", lambda b: scripted(CONNECTOR, b))]:
            r.flushall()
            figures = []
            for base in (1_700_000_000_000, 1_800_000_000_000):
                before = cpu(); write(base); time.sleep(0.3)
                figures.append(1e6 * (cpu() - before) / N)
            print(f"{label:18s} redis-server CPU µs/entity: empty keys {figures[0]:.2f}, over its own keys {figures[1]:.2f}", flush=True)
    finally:
        server.terminate()
