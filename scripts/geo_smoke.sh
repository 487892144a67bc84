#!/usr/bin/env bash
# Smoke check of the two-cluster services (scripts/services.sh start-geo): messages produced
# in one cluster to persistent://geo/features/<topic> are read from the other, both ways,
# and the second cluster's transaction coordinator commits a transaction (scripts/GeoTxnSmoke.java).
# Not part of the test suite (CI time): run it by hand after start-geo.
#
# Usage: scripts/geo_smoke.sh [TOPIC]   (default: smoke; a fresh subscription per run)
# Needs: a Python with the pulsar-client wheel (FC_GEO_PYTHON, else the Feast venv the suite
# creates, else python3).
set -Eeuo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${FC_STATE_DIR:-$ROOT/.services}
[[ -f $STATE/env ]] || { echo "geo_smoke: no $STATE/env: run scripts/services.sh start-geo" >&2; exit 1; }
# shellcheck source=/dev/null
source "$STATE/env"
[[ -n ${PULSAR_B_URL:-} ]] || { echo "geo_smoke: PULSAR_B_URL not in $STATE/env: run scripts/services.sh start-geo" >&2; exit 1; }

PY=
for c in "${FC_GEO_PYTHON:-}" "$STATE/feast-venv/bin/python" python3; do
  if [[ -n $c ]] && "$c" -c 'import pulsar' 2>/dev/null; then PY=$c; break; fi
done
[[ -n $PY ]] || { echo "geo_smoke: no Python with the pulsar-client wheel (set FC_GEO_PYTHON)" >&2; exit 1; }

rc=0
"$PY" - "${1:-smoke}" <<'PY' || rc=1
import json, logging, os, sys, time, urllib.request, uuid
import pulsar

logging.basicConfig(level=logging.WARNING)
quiet = logging.getLogger("pulsar")  # the client's INFO lines would bury the result

topic_name = sys.argv[1]
ns = os.environ["FC_TEST_GEO_NAMESPACE"]
topic = f"persistent://{ns}/{topic_name}"
side = {
    os.environ["PULSAR_A_CLUSTER"]: (os.environ["PULSAR_URL"], os.environ["PULSAR_ADMIN_URL"]),
    os.environ["PULSAR_B_CLUSTER"]: (os.environ["PULSAR_B_URL"], os.environ["PULSAR_B_ADMIN_URL"]),
}
run = uuid.uuid4().hex[:8]
N = 5
failed = False

def stats(admin):
    url = f"{admin}/admin/v2/persistent/{ns}/{topic_name}/stats"
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)

def receive(client, want, deadline_s=30):
    """Reads the topic from the earliest entry until every payload in `want` came."""
    consumer = client.subscribe(topic, f"geo-smoke-{run}-{len(want)}-{time.monotonic_ns()}",
                                initial_position=pulsar.InitialPosition.Earliest)
    got, end = {}, time.monotonic() + deadline_s
    try:
        while set(want) - set(got) and time.monotonic() < end:
            try:
                m = consumer.receive(timeout_millis=1000)
            except pulsar.Timeout:
                continue
            consumer.acknowledge(m)
            got[m.data().decode()] = (m.message_id(), m.properties())
    finally:
        consumer.close()
    return got

clients = {c: pulsar.Client(url, operation_timeout_seconds=10, logger=quiet) for c, (url, _) in side.items()}
try:
    for src, dst in [tuple(side), tuple(reversed(list(side)))]:
        t0 = time.monotonic()
        producer = clients[src].create_producer(topic)
        payloads = [f"{run}-{src}-{i}" for i in range(N)]
        sent = {p: producer.send(p.encode(), properties={"origin": src}) for p in payloads}
        producer.close()
        got = receive(clients[dst], payloads)
        missing = [p for p in payloads if p not in got]
        print(f"{src} -> {dst}: produced {N} on {side[src][0]}, read {N - len(missing)} on "
              f"{side[dst][0]} in {time.monotonic() - t0:.1f} s")
        for p in payloads[:2]:
            if p in got:
                print(f"  {p}: id in {src} {sent[p]}, id in {dst} {got[p][0]}, properties {got[p][1]}")
        if missing:
            failed = True
            print(f"  MISSING in {dst}: {missing}")
        rep = stats(side[src][1]).get("replication", {}).get(dst, {})
        print(f"  {src} stats.replication[{dst}]: connected={rep.get('connected')} "
              f"replicationBacklog={rep.get('replicationBacklog')} msgOutCount={rep.get('msgOutCount')}")

finally:
    for c in clients.values():
        c.close()

sys.exit(1 if failed else 0)
PY

# Transaction coordinator of the second cluster (issue 33, item 4 needs it): the Python wheel
# has no transactions, so a Java source file runs on the broker's cached classpath.
JAVA=java
for c in "${FC_JAVA_HOME:-}" /usr/lib/jvm/java-17-openjdk-amd64; do
  if [[ -n $c && -x $c/bin/java ]]; then JAVA=$c/bin/java; break; fi
done
CP_FILE= # services.sh keeps one classpath-<hash>.txt
for f in "$STATE"/pulsar/classpath-*.txt; do [[ -s $f ]] && CP_FILE=$f; done
if [[ -z $CP_FILE ]]; then
  echo "transaction on $PULSAR_B_CLUSTER: skipped (no cached broker classpath in $STATE/pulsar)"; rc=1
elif ! "$JAVA" -Xmx256m -Dlog4j.configurationFile="$ROOT/services/pulsar/log4j2.xml" \
       -Dpulsar.log.dir="$STATE/logs/geo-smoke" -cp "$(<"$CP_FILE")" "$ROOT/scripts/GeoTxnSmoke.java" "$PULSAR_B_URL" \
       "persistent://$FC_TEST_GEO_NAMESPACE/${1:-smoke}-txn" "txn-$RANDOM$RANDOM" 2>"$STATE/logs/geo-smoke-java.err"; then
  tail -n 20 "$STATE/logs/geo-smoke-java.err" >&2; rc=1
fi
if ((rc)); then echo "geo smoke: FAILED"; else echo "geo smoke: ok"; fi
exit "$rc"
