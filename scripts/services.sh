#!/usr/bin/env bash
# Real services for the integration tests, all on 127.0.0.1, no Docker:
#   Pulsar standalone 4.0.x  pulsar://127.0.0.1:6650   admin http://127.0.0.1:8080
#     also TLS               pulsar+ssl://127.0.0.1:6651 admin https://127.0.0.1:8443 (CA <state>/tls/ca.crt)
#     token auth on          a JWT in <state>/pulsar-auth/token; anonymous clients still allowed
#   Redis                    redis://127.0.0.1:6379
#   Redis Cluster, 3 masters redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003
#   Redis over TLS + ACL     rediss://app:app-secret@127.0.0.1:6390   CA <state>/tls/ca.crt
#   S3 (moto_server)         http://127.0.0.1:9000     bucket feature-connector-test
#   OAuth2 server (Hydra)    http://127.0.0.1:4444     the broker accepts its tokens
#   Pulsar proxy, mTLS       pulsar+ssl://127.0.0.1:6652  https://127.0.0.1:8444 (client certificate required)
#     (the last two: scripts/services-auth.sh)
#   On demand only (start-geo): a second Pulsar standalone, cluster cluster-b,
#                            pulsar://127.0.0.1:6660   admin http://127.0.0.1:8090
#     namespace geo/features replicated between both clusters (geo-replication tests)
#
# Usage: scripts/services.sh [start|start-quick|start-geo|stop-geo|stop|status|env|packages]  (default: start)
#   start   install what is missing, start what is down, wait until ready (idempotent)
#   start-quick  only what the quickstart uses: the broker and Redis (the table is on disk)
#   stop    stop the services this script started (by their recorded pids only)
#   status  print up/down per service and the disk's headroom; exit 0 when all are up
#           and the broker's disk can take writes, 3 otherwise
#   env     print shell exports pointing at the services
#   packages  install the Debian packages the build needs (protoc) and the services use
#   restart-pulsar  stop the broker and start it again keeping its data (chaos suite)
#   start-geo  start the second broker (needs the first one up), register both clusters with
#           each other, create the replicated namespace geo/features; add PULSAR_B_* to env
#   stop-geo   stop the second broker and drop PULSAR_B_* from env
#
# Environment:
#   FC_STATE_DIR     pids, logs, data, cached classpath (default: <repo>/.services)
#   FC_JAVA_HOME     JDK for the broker (default: OpenJDK 17, else Temurin 25, else `java`)
#   FC_PULSAR_WAIT   seconds to wait for the broker (default: 180)
set -Eeuo pipefail
trap 'echo "services.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${FC_STATE_DIR:-$ROOT/.services}
PULSAR_DIR=$ROOT/services/pulsar
LOGS=$STATE/logs

PULSAR_BIN_PORT=6650
PULSAR_HTTP_PORT=8080
PULSAR_ADMIN=http://127.0.0.1:$PULSAR_HTTP_PORT
REDIS_PORT=6379
CLUSTER_PORTS=(7001 7002 7003) # cluster bus on PORT+10000
CLUSTER_DIR=$STATE/cluster
REDIS_TLS_PORT=6390
REDIS_TLS_USER=app
REDIS_TLS_PASS=app-secret
TLS_DIR=$STATE/tls
S3_PORT=9000
S3_URL=http://127.0.0.1:$S3_PORT
S3_BUCKET=feature-connector-test
MOTO_VERSION=5.2.1
PULSAR_WAIT=${FC_PULSAR_WAIT:-180}
PULSAR_TLS_PORT=6651
PULSAR_HTTPS_PORT=8443
PULSAR_AUTH_DIR=$STATE/pulsar-auth
# The second cluster (start-geo): its own ports, data, config and logs under $STATE/pulsar-b.
PULSAR_B_BIN_PORT=6660
PULSAR_B_HTTP_PORT=8090
PULSAR_B_ADMIN=http://127.0.0.1:$PULSAR_B_HTTP_PORT
PULSAR_B_CLUSTER=cluster-b
PULSAR_B_DIR=$STATE/pulsar-b
PULSAR_B_MARKER=pulsar-b/standalone.conf # in the second broker's command line only
GEO_TENANT=geo
GEO_NAMESPACE=$GEO_TENANT/features
# shellcheck source=scripts/services-auth.sh
source "$ROOT/scripts/services-auth.sh"

T0=$(date +%s)
log() { printf '[services %3ss] %s\n' "$(($(date +%s) - T0))" "$*"; }
die() { log "ERROR: $*" >&2; exit 1; }

# ---------------------------------------------------------------- helpers

# port_open PORT: something accepts TCP connections on 127.0.0.1:PORT
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

http_code() { curl -s -o /dev/null -m 5 -w '%{http_code}' "$@" 2>/dev/null || true; }

redis_ping() {
  local reply
  reply=$( (exec 3<>"/dev/tcp/127.0.0.1/$REDIS_PORT" && printf 'PING\r\n' >&3 &&
            timeout 2 head -c 7 <&3) 2>/dev/null) || return 1
  [[ $reply == +PONG* ]]
}

# The broker's storage (its embedded bookie) takes no writes once its disk is 99 % full
# (diskUsageThreshold in services/pulsar/standalone.conf): every produce then fails or times
# out. disk_headroom_mb prints how many MB can still be written before that point.
disk_headroom_mb() {
  mkdir -p "$STATE"
  df -P -B1M "$STATE" | awk 'NR == 2 { printf "%d", $4 - $2 / 100 }'
}

# Refuses to start with under 1 GB of headroom; warns under 15 GB (a debug build of the suite
# takes ~10 GB and its Python environments ~2 GB more, written after the broker starts).
check_disk() {
  local headroom
  headroom=$(disk_headroom_mb)
  if ((headroom < 1024)); then
    die "disk: $(df -P -h "$STATE" | awk 'NR == 2 { print $5 " used, " $4 " free" }') on the disk of $STATE; the broker stops taking writes at 99 % (${headroom} MB left before that): free some space first"
  elif ((headroom < 15360)); then
    log "warning: disk: $((headroom / 1024)) GB left before the broker stops taking writes (99 % full); building and running the suite needs about 15 GB"
  fi
}

# our_pid NAME MARKER: prints the pid recorded for NAME if that process is alive
# and its command line contains MARKER (guards against a recycled pid).
our_pid() {
  local f=$STATE/$1.pid pid
  [[ -s $f ]] || return 1
  pid=$(tr -dc '0-9' <"$f")
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$2" || return 1
  echo "$pid"
}

# stop_pid NAME MARKER: TERM, wait up to 30 s, then KILL
stop_pid() {
  local name=$1 pid i
  if ! pid=$(our_pid "$1" "$2"); then
    log "$name: nothing to stop (no live process recorded in $STATE/$name.pid)"
    rm -f "$STATE/$name.pid"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 300; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "$name: still alive after 30 s, sending KILL"
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.5
  fi
  rm -f "$STATE/$name.pid"
  log "$name: stopped (pid $pid)"
}

# launch NAME DIR CMD...: run CMD in DIR detached in its own session (no stdin, output to
# $LOGS/NAME.out, the lock fd closed); the process itself writes $STATE/NAME.pid.
launch() {
  local name=$1 dir=$2 i
  shift 2
  rm -f "$STATE/$name.pid"
  # shellcheck disable=SC2016  # $$ and $@ belong to the inner bash
  (cd "$dir" && exec setsid bash -c 'echo $$ >"$0"; exec "$@"' "$STATE/$name.pid" "$@" \
     </dev/null >"$LOGS/$name.out" 2>&1 9>&-) &
  for ((i = 0; i < 100; i++)); do
    [[ -s $STATE/$name.pid ]] && return 0
    sleep 0.05
  done
  die "$name: could not be launched"
}

as_root() { if [[ $(id -u) == 0 ]]; then "$@"; else sudo -n "$@"; fi; }

# ---------------------------------------------------------------- installs

pick_java() {
  local c
  for c in "${FC_JAVA_HOME:-}" /usr/lib/jvm/java-17-openjdk-amd64 /usr/lib/jvm/temurin-25-jdk-amd64; do
    if [[ -n $c && -x $c/bin/java ]]; then JAVA_HOME=$c; export JAVA_HOME; return 0; fi
  done
  if c=$(command -v java 2>/dev/null); then
    JAVA_HOME=$(dirname "$(dirname "$(readlink -f "$c")")"); export JAVA_HOME; return 0
  fi
  return 1
}

ensure_packages() {
  local missing=()
  command -v redis-server >/dev/null || missing+=(redis-server)
  command -v redis-cli >/dev/null || missing+=(redis-tools)
  command -v openssl >/dev/null || missing+=(openssl)
  command -v protoc >/dev/null || missing+=(protobuf-compiler)
  command -v curl >/dev/null || missing+=(curl)
  command -v shellcheck >/dev/null || missing+=(shellcheck)
  command -v mvn >/dev/null || missing+=(maven)
  pick_java || missing+=(openjdk-17-jdk-headless)
  if ((${#missing[@]})); then
    log "apt: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get update -qq >"$LOGS/apt.log" 2>&1 || { tail -20 "$LOGS/apt.log"; die "apt-get update failed"; }
    as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$LOGS/apt.log" 2>&1 ||
      { tail -20 "$LOGS/apt.log"; die "apt-get install ${missing[*]} failed"; }
    pick_java || die "no JDK found after installing openjdk-17-jdk-headless"
    # Debian's postinst may start its own redis service; ours (no persistence) replaces it.
    if [[ " ${missing[*]} " == *" redis-server "* ]] && redis_ping; then
      as_root invoke-rc.d redis-server stop >>"$LOGS/apt.log" 2>&1 || true
    fi
  fi
}

# Sets MOTO_CMD to a command that runs moto's server.
ensure_moto() {
  if command -v moto_server >/dev/null && moto_server --help >/dev/null 2>&1; then
    MOTO_CMD=(moto_server); return
  fi
  if [[ -x $STATE/venv/bin/moto_server ]]; then MOTO_CMD=("$STATE/venv/bin/moto_server"); return; fi
  log "pip: installing moto[server]==$MOTO_VERSION"
  if python3 -m pip install -q --disable-pip-version-check "moto[server]==$MOTO_VERSION" \
       >"$LOGS/pip.log" 2>&1; then
    if command -v pyenv >/dev/null; then pyenv rehash 2>/dev/null || true; fi
    hash -r
    if command -v moto_server >/dev/null; then MOTO_CMD=(moto_server); return; fi
    MOTO_CMD=("$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')/moto_server")
    [[ -x ${MOTO_CMD[0]} ]] && return
  fi
  # e.g. an externally managed system Python: use a private venv instead
  log "pip: falling back to a venv in $STATE/venv"
  python3 -m venv "$STATE/venv" >>"$LOGS/pip.log" 2>&1 || die "python3 -m venv failed (see $LOGS/pip.log)"
  "$STATE/venv/bin/pip" install -q --disable-pip-version-check "moto[server]==$MOTO_VERSION" \
    >>"$LOGS/pip.log" 2>&1 || { tail -20 "$LOGS/pip.log"; die "pip install moto failed"; }
  MOTO_CMD=("$STATE/venv/bin/moto_server")
}

# Sets PULSAR_CP to the broker's classpath, resolved once per pom/settings hash.
ensure_pulsar_classpath() {
  local key cpfile tmp jar ok=1 jars=()
  key=$(cat "$PULSAR_DIR/pom.xml" "$PULSAR_DIR/settings.xml" | sha256sum | cut -c1-16)
  cpfile=$STATE/pulsar/classpath-$key.txt
  if [[ -s $cpfile ]]; then
    IFS=: read -r -a jars <"$cpfile" || true # the file has no trailing newline
    for jar in "${jars[@]}"; do [[ -f $jar ]] || { ok=0; break; }; done
    if ((ok)); then PULSAR_CP=$(<"$cpfile"); return; fi
    log "pulsar: cached classpath refers to missing jars, resolving again"
  fi
  log "pulsar: resolving broker classpath with Maven (a fresh ~/.m2 downloads ~300 MB)"
  mkdir -p "$STATE/pulsar"
  tmp=$cpfile.tmp
  (cd "$PULSAR_DIR" && mvn -B -q -s settings.xml -f pom.xml \
     dependency:build-classpath -Dmdep.includeScope=runtime -Dmdep.outputFile="$tmp") \
    </dev/null >"$LOGS/mvn.log" 2>&1 || { tail -30 "$LOGS/mvn.log"; die "mvn could not resolve the Pulsar classpath"; }
  [[ -s $tmp ]] || die "mvn wrote no classpath (see $LOGS/mvn.log)"
  rm -f "$STATE"/pulsar/classpath-*.txt
  mv "$tmp" "$cpfile"
  PULSAR_CP=$(<"$cpfile")
  log "pulsar: classpath cached ($(tr ':' '\n' <"$cpfile" | wc -l) jars)"
}

# ---------------------------------------------------------------- pulsar

pulsar_ready() {
  [[ $(http_code "$PULSAR_ADMIN/admin/v2/namespaces/public/default") == 200 ]] &&
    [[ $(curl -s -m 20 "$PULSAR_ADMIN/admin/v2/brokers/health" 2>/dev/null || true) == ok ]]
}

# A HS256 JWT for subject $2 signed with the raw key in file $1 (Pulsar's token format).
make_jwt() {
  python3 - "$1" "$2" <<'PY'
import base64, hashlib, hmac, json, sys
key = open(sys.argv[1], "rb").read()
enc = lambda data: base64.urlsafe_b64encode(data).rstrip(b"=")
signing_input = enc(json.dumps({"alg": "HS256"}).encode()) + b"." + enc(json.dumps({"sub": sys.argv[2]}).encode())
signature = enc(hmac.new(key, signing_input, hashlib.sha256).digest())
print((signing_input + b"." + signature).decode())
PY
}

# Secret key, a valid token and one signed with another key (for the refusal test).
ensure_pulsar_token() {
  mkdir -p "$PULSAR_AUTH_DIR"
  if [[ ! -s $PULSAR_AUTH_DIR/secret.key ]]; then
    head -c 32 /dev/urandom >"$PULSAR_AUTH_DIR/secret.key"
    rm -f "$PULSAR_AUTH_DIR/token"
  fi
  if [[ ! -s $PULSAR_AUTH_DIR/token ]]; then
    make_jwt "$PULSAR_AUTH_DIR/secret.key" feature-connector >"$PULSAR_AUTH_DIR/token"
    head -c 32 /dev/urandom >"$PULSAR_AUTH_DIR/other.key"
    make_jwt "$PULSAR_AUTH_DIR/other.key" feature-connector >"$PULSAR_AUTH_DIR/bad-token"
  fi
  chmod 600 "$PULSAR_AUTH_DIR"/*
}

# The broker's config: the repository's file plus token authentication and TLS, which
# need this machine's paths.
write_pulsar_config() {
  {
    cat "$PULSAR_DIR/standalone.conf"
    cat <<EOF

# ---- added by scripts/services.sh: token authentication (anonymous clients are still
# allowed, so the other tests need no token; a wrong token is refused), OAuth2 tokens of the
# test issuer and client certificates (scripts/services-auth.sh), and TLS listeners.
authenticationEnabled=true
$(pulsar_auth_config)
tokenSecretKey=file://$PULSAR_AUTH_DIR/secret.key
anonymousUserRole=anonymous
brokerServicePortTls=$PULSAR_TLS_PORT
webServicePortTls=$PULSAR_HTTPS_PORT
tlsCertificateFilePath=$TLS_DIR/server.crt
tlsKeyFilePath=$TLS_DIR/server.key
tlsTrustCertsFilePath=$TLS_DIR/ca.crt
EOF
  } >"$1"
}

# JVM flags of both brokers apart from memory and logging (what bin/pulsar sets).
PULSAR_JVM_FLAGS=(
  -XX:+UseG1GC -XX:+ExitOnOutOfMemoryError
  --add-opens java.base/java.io=ALL-UNNAMED --add-opens java.base/java.util.zip=ALL-UNNAMED
  --add-opens java.base/java.nio=ALL-UNNAMED --add-opens java.base/jdk.internal.misc=ALL-UNNAMED
  --add-opens java.base/sun.net=ALL-UNNAMED --add-opens java.management/sun.management=ALL-UNNAMED
  -Djute.maxbuffer=10485760 -Djava.net.preferIPv4Stack=true
  -Dio.netty.tryReflectionSetAccessible=true -Dlog4j2.is.webapp=false
  -Dbookkeeper.metadata.bookie.drivers=org.apache.pulsar.metadata.bookkeeper.PulsarMetadataBookieDriver
  -Dbookkeeper.metadata.client.drivers=org.apache.pulsar.metadata.bookkeeper.PulsarMetadataClientDriver
)

# Launches the broker in the background (does not wait).
start_pulsar() {
  PULSAR_STARTED=0
  ensure_tls_certs
  ensure_pulsar_token
  mkdir -p "$STATE/pulsar"
  local wanted=$STATE/pulsar/standalone.conf.new
  write_pulsar_config "$wanted"
  if our_pid pulsar PulsarStandaloneStarter >/dev/null; then
    if cmp -s "$wanted" "$STATE/pulsar/standalone.conf" && ((TLS_REGENERATED == 0)); then
      rm -f "$wanted"
      log "pulsar: already running (pid $(our_pid pulsar PulsarStandaloneStarter))"
      return
    fi
    log "pulsar: configuration changed, restarting"
    stop_pid pulsar PulsarStandaloneStarter
  fi
  mv -f "$wanted" "$STATE/pulsar/standalone.conf"
  rm -f "$STATE/pulsar.pid"
  if port_open $PULSAR_HTTP_PORT || port_open $PULSAR_BIN_PORT; then
    if pulsar_ready; then log "pulsar: reusing a broker already answering on $PULSAR_ADMIN"; return; fi
    die "port $PULSAR_HTTP_PORT or $PULSAR_BIN_PORT is taken by a process that is not a ready Pulsar broker"
  fi
  ensure_pulsar_classpath
  local data=$STATE/pulsar/data f wipe=(--wipe-data)
  if ((${PULSAR_KEEP_DATA:-0})); then
    wipe=() # a restart: topics, subscriptions and schemas survive
  else
    rm -rf "$data"
  fi
  for f in pulsar.log pulsar.out; do
    if [[ -f $LOGS/$f ]]; then mv -f "$LOGS/$f" "$LOGS/$f.prev"; fi
  done
  mkdir -p "$data"
  log "pulsar: starting $(sed -n 's:.*<pulsar.version>\(.*\)</pulsar.version>.*:\1:p' "$PULSAR_DIR/pom.xml") with $("$JAVA_HOME/bin/java" -version 2>&1 | head -1)"
  local opts=(
    -Xms256m -Xmx1g -XX:MaxDirectMemorySize=1g "${PULSAR_JVM_FLAGS[@]}"
    -Dlog4j.configurationFile="$PULSAR_DIR/log4j2.xml" -Dpulsar.log.dir="$LOGS"
  )
  launch pulsar "$data" "$JAVA_HOME/bin/java" "${opts[@]}" -cp "$PULSAR_CP" \
    org.apache.pulsar.PulsarStandaloneStarter --config "$STATE/pulsar/standalone.conf" \
    -nfw -nss "${wipe[@]}" -a 127.0.0.1 \
    --metadata-dir "$data/metadata" --bookkeeper-dir "$data/bookkeeper"
  PULSAR_STARTED=1
  PULSAR_T0=$(date +%s)
}

pulsar_log_tail() {
  echo "---- $LOGS/pulsar.out (tail)" >&2
  tail -n 30 "$LOGS/pulsar.out" >&2 2>/dev/null || true
  echo "---- $LOGS/pulsar.log (tail)" >&2
  tail -n 40 "$LOGS/pulsar.log" 2>/dev/null | cut -c1-400 >&2 || true
}

wait_pulsar() {
  local pid i
  if ((${PULSAR_STARTED:-0})); then
    pid=$(tr -dc '0-9' <"$STATE/pulsar.pid")
  elif ! pid=$(our_pid pulsar PulsarStandaloneStarter); then
    pulsar_ready && return 0
    die "pulsar: not running"
  fi
  for ((i = 0; i < PULSAR_WAIT; i++)); do
    if pulsar_ready; then
      if ((${PULSAR_STARTED:-0})); then
        log "pulsar: ready in $(($(date +%s) - PULSAR_T0)) s (pid $pid)"
      else
        log "pulsar: ready (pid $pid)"
      fi
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      log "pulsar: broker exited during startup; last log lines:" >&2
      pulsar_log_tail
      rm -f "$STATE/pulsar.pid"
      exit 1
    fi
    sleep 1
  done
  log "pulsar: not ready after $PULSAR_WAIT s; last log lines:" >&2
  pulsar_log_tail
  exit 1
}

# ---------------------------------------------------------------- second cluster (start-geo)

# The first broker's cluster name, as its running config says (standalone.conf's last value).
pulsar_a_cluster() {
  local name
  name=$(sed -n 's/^clusterName=//p' "$STATE/pulsar/standalone.conf" 2>/dev/null | tail -1)
  echo "${name:-standalone}"
}

pulsar_b_ready() {
  [[ $(http_code "$PULSAR_B_ADMIN/admin/v2/namespaces/public/default") == 200 ]] &&
    [[ $(curl -s -m 20 "$PULSAR_B_ADMIN/admin/v2/brokers/health" 2>/dev/null || true) == ok ]]
}

# The second broker's config: the repository's standalone.conf (no auth, no TLS) with its own
# cluster name and ports; the bookie takes a free port as in the first one, the metadata
# store is RocksDB in its data folder. Replicated subscriptions are on by default in 4.0
# (checked on the first broker's /admin/v2/brokers/configuration/runtime); set here so that
# both clusters snapshot at the same interval. The transaction coordinator is on for the
# transaction-marker tests of issue 33 (the first broker has it off).
write_pulsar_b_config() {
  {
    cat "$PULSAR_DIR/standalone.conf"
    cat <<EOC

# ---- added by scripts/services.sh start-geo: the second cluster of the geo-replication tests
clusterName=$PULSAR_B_CLUSTER
brokerServicePort=$PULSAR_B_BIN_PORT
webServicePort=$PULSAR_B_HTTP_PORT
enableReplicatedSubscriptions=true
replicatedSubscriptionsSnapshotFrequencyMillis=1000
transactionCoordinatorEnabled=true
EOC
  } >"$1"
}

# Launches the second broker if it is not running with the wanted config (does not wait).
start_pulsar_b() {
  PULSAR_B_STARTED=0
  mkdir -p "$PULSAR_B_DIR" "$LOGS/pulsar-b"
  local wanted=$PULSAR_B_DIR/standalone.conf.new
  write_pulsar_b_config "$wanted"
  if our_pid pulsar-b "$PULSAR_B_MARKER" >/dev/null; then
    if cmp -s "$wanted" "$PULSAR_B_DIR/standalone.conf"; then
      rm -f "$wanted"
      log "pulsar-b: already running (pid $(our_pid pulsar-b "$PULSAR_B_MARKER"))"
      return
    fi
    log "pulsar-b: configuration changed, restarting"
    stop_pid pulsar-b "$PULSAR_B_MARKER"
  fi
  mv -f "$wanted" "$PULSAR_B_DIR/standalone.conf"
  if port_open $PULSAR_B_HTTP_PORT || port_open $PULSAR_B_BIN_PORT; then
    die "port $PULSAR_B_HTTP_PORT or $PULSAR_B_BIN_PORT is taken by a process this script did not start as pulsar-b"
  fi
  ensure_pulsar_classpath
  local data=$PULSAR_B_DIR/data f
  rm -rf "$data"
  mkdir -p "$data"
  for f in pulsar-b/pulsar.log pulsar-b.out; do
    if [[ -f $LOGS/$f ]]; then mv -f "$LOGS/$f" "$LOGS/$f.prev"; fi
  done
  log "pulsar-b: starting cluster $PULSAR_B_CLUSTER on pulsar://127.0.0.1:$PULSAR_B_BIN_PORT $PULSAR_B_ADMIN"
  local opts=(
    -Xms128m -Xmx512m -XX:MaxDirectMemorySize=512m "${PULSAR_JVM_FLAGS[@]}"
    -Dlog4j.configurationFile="$PULSAR_DIR/log4j2.xml" -Dpulsar.log.dir="$LOGS/pulsar-b"
  )
  launch pulsar-b "$data" "$JAVA_HOME/bin/java" "${opts[@]}" -cp "$PULSAR_CP" \
    org.apache.pulsar.PulsarStandaloneStarter --config "$PULSAR_B_DIR/standalone.conf" \
    -nfw -nss --wipe-data -a 127.0.0.1 \
    --metadata-dir "$data/metadata" --bookkeeper-dir "$data/bookkeeper"
  PULSAR_B_STARTED=1
  PULSAR_B_T0=$(date +%s)
}

wait_pulsar_b() {
  local pid i
  pid=$(tr -dc '0-9' <"$STATE/pulsar-b.pid")
  for ((i = 0; i < PULSAR_WAIT; i++)); do
    if pulsar_b_ready; then
      if ((PULSAR_B_STARTED)); then
        log "pulsar-b: ready in $(($(date +%s) - PULSAR_B_T0)) s (pid $pid)"
      fi
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      log "pulsar-b: broker exited during startup; last log lines:" >&2
      tail -n 30 "$LOGS/pulsar-b.out" >&2 2>/dev/null || true
      tail -n 40 "$LOGS/pulsar-b/pulsar.log" 2>/dev/null | cut -c1-400 >&2 || true
      rm -f "$STATE/pulsar-b.pid"
      exit 1
    fi
    sleep 1
  done
  log "pulsar-b: not ready after $PULSAR_WAIT s; see $LOGS/pulsar-b/pulsar.log" >&2
  exit 1
}

# admin_put_or_post BASE PATH JSON: creates with PUT; when it exists (409), updates with POST
# (clusters, tenants), so that running start-geo again converges on the wanted values.
admin_put_or_post() {
  local code
  code=$(http_code -X PUT -H 'Content-Type: application/json' -d "$3" "$1$2")
  if [[ $code == 409 ]]; then
    code=$(http_code -X POST -H 'Content-Type: application/json' -d "$3" "$1$2")
  fi
  [[ $code == 20? ]] || die "geo: PUT/POST $1$2 answered HTTP $code"
}

# admin_call METHOD BASE PATH [JSON]: fails unless 2xx (409 is fine for a PUT that creates)
admin_call() {
  local code args=(-X "$1")
  if (($# > 3)); then args+=(-H 'Content-Type: application/json' -d "$4"); fi
  code=$(http_code "${args[@]}" "$2$3")
  [[ $code == 20? || ($1 == PUT && $code == 409) ]] || die "geo: $1 $2$3 answered HTTP $code"
}

# Both clusters know each other; tenant geo allows both; geo/features replicates to both and
# keeps everything. Each broker has its own metadata store, so everything is done on both.
configure_geo() {
  local a_cluster clusters admin
  a_cluster=$(pulsar_a_cluster)
  [[ $a_cluster != "$PULSAR_B_CLUSTER" ]] || die "geo: the first broker's cluster is also named $PULSAR_B_CLUSTER"
  clusters="[\"$a_cluster\",\"$PULSAR_B_CLUSTER\"]"
  admin_put_or_post "$PULSAR_ADMIN" "/admin/v2/clusters/$PULSAR_B_CLUSTER" \
    "{\"serviceUrl\":\"$PULSAR_B_ADMIN\",\"brokerServiceUrl\":\"pulsar://127.0.0.1:$PULSAR_B_BIN_PORT\"}"
  admin_put_or_post "$PULSAR_B_ADMIN" "/admin/v2/clusters/$a_cluster" \
    "{\"serviceUrl\":\"$PULSAR_ADMIN\",\"brokerServiceUrl\":\"pulsar://127.0.0.1:$PULSAR_BIN_PORT\"}"
  for admin in "$PULSAR_ADMIN" "$PULSAR_B_ADMIN"; do
    admin_put_or_post "$admin" "/admin/v2/tenants/$GEO_TENANT" "{\"adminRoles\":[],\"allowedClusters\":$clusters}"
    admin_call PUT "$admin" "/admin/v2/namespaces/$GEO_NAMESPACE"
    admin_call POST "$admin" "/admin/v2/namespaces/$GEO_NAMESPACE/replication" "$clusters"
    admin_call POST "$admin" "/admin/v2/namespaces/$GEO_NAMESPACE/retention" \
      '{"retentionTimeInMinutes":-1,"retentionSizeInMB":-1}'
  done
  log "geo: $GEO_NAMESPACE replicated between $a_cluster ($PULSAR_ADMIN) and $PULSAR_B_CLUSTER ($PULSAR_B_ADMIN), retention infinite"
}

# Exports of the second cluster (env only has them while it runs).
geo_env() {
  cat <<EOF
export PULSAR_B_URL=pulsar://127.0.0.1:$PULSAR_B_BIN_PORT
export PULSAR_B_ADMIN_URL=$PULSAR_B_ADMIN
export PULSAR_A_CLUSTER=$(pulsar_a_cluster)
export PULSAR_B_CLUSTER=$PULSAR_B_CLUSTER
export FC_TEST_GEO_NAMESPACE=$GEO_NAMESPACE
EOF
}

# Rewrites the geo exports of $STATE/env in place (the other lines unchanged); with "off",
# only removes them.
update_geo_env() {
  local tmp=$STATE/env.tmp
  if [[ -f $STATE/env ]]; then
    grep -vE '^export (PULSAR_B_URL|PULSAR_B_ADMIN_URL|PULSAR_A_CLUSTER|PULSAR_B_CLUSTER|FC_TEST_GEO_NAMESPACE)=' \
      "$STATE/env" >"$tmp" || true
  else
    : >"$tmp"
  fi
  if [[ ${1:-on} == on ]]; then geo_env >>"$tmp"; fi
  mv -f "$tmp" "$STATE/env"
}

cmd_start_geo() {
  mkdir -p "$STATE" "$LOGS"
  exec 9>"$STATE/.lock"
  flock -w 600 9 || die "another services.sh holds $STATE/.lock"
  pulsar_ready || die "the first broker does not answer on $PULSAR_ADMIN: run $0 start (or start-quick) first"
  check_disk
  pick_java || die "no JDK found (run $0 packages first)"
  start_pulsar_b
  wait_pulsar_b
  configure_geo
  update_geo_env on
  log "second cluster up (env: source $STATE/env)"
}

cmd_stop_geo() {
  mkdir -p "$STATE"
  exec 9>"$STATE/.lock"
  flock -w 120 9 || die "another services.sh holds $STATE/.lock"
  stop_pid pulsar-b "$PULSAR_B_MARKER"
  update_geo_env off
}

# ---------------------------------------------------------------- redis

start_redis() {
  if our_pid redis redis-server >/dev/null && redis_ping; then
    log "redis: already running (pid $(our_pid redis redis-server))"; return
  fi
  if redis_ping; then log "redis: reusing a server already answering PING on $REDIS_PORT"; return; fi
  port_open $REDIS_PORT && die "port $REDIS_PORT is taken by something that does not answer Redis PING"
  mkdir -p "$STATE/redis"
  rm -f "$STATE/redis.pid"
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --daemonize yes \
    --pidfile "$STATE/redis.pid" --dir "$STATE/redis" --logfile "$LOGS/redis.log" \
    --save '' --appendonly no </dev/null >/dev/null 9>&-
  local i
  for ((i = 0; i < 100; i++)); do
    redis_ping && { log "redis: ready on 127.0.0.1:$REDIS_PORT (pid $(cat "$STATE/redis.pid" 2>/dev/null))"; return; }
    sleep 0.1
  done
  tail -n 20 "$LOGS/redis.log" >&2 || true
  die "redis: did not answer PING within 10 s"
}

# ---------------------------------------------------------------- redis cluster

# rcli PORT ARGS...: redis-cli against 127.0.0.1:PORT (plain TCP), errors silenced
rcli() { local port=$1; shift; timeout 5 redis-cli -h 127.0.0.1 -p "$port" "$@" 2>/dev/null; }
node_ping() { local r; r=$(rcli "$1" ping) || return 1; [[ $r == PONG ]]; }
# cluster_field PORT FIELD: one value of CLUSTER INFO on that node
cluster_field() { local r; r=$(rcli "$1" cluster info) || return 0; tr -d '\r' <<<"$r" | sed -n "s/^$2://p"; }
cluster_ok() {
  local p
  for p in "${CLUSTER_PORTS[@]}"; do [[ $(cluster_field "$p" cluster_state) == ok ]] || return 1; done
}
# every node alone and without slots: `redis-cli --cluster create` has not run yet
cluster_pristine() {
  local p
  for p in "${CLUSTER_PORTS[@]}"; do
    [[ $(cluster_field "$p" cluster_known_nodes) == 1 && $(cluster_field "$p" cluster_slots_assigned) == 0 ]] || return 1
  done
}
cluster_urls() { local p u=(); for p in "${CLUSTER_PORTS[@]}"; do u+=("redis://127.0.0.1:$p"); done; (IFS=,; echo "${u[*]}"); }
cluster_pids() {
  local p pid out=()
  for p in "${CLUSTER_PORTS[@]}"; do pid=$(our_pid "redis-cluster-$p" "redis-server 127.0.0.1:$p") || return 1; out+=("$pid"); done
  (IFS=,; echo "${out[*]}")
}

start_redis_cluster() {
  local p n_ours=0 n_up=0 i t0
  for p in "${CLUSTER_PORTS[@]}"; do
    if our_pid "redis-cluster-$p" "redis-server 127.0.0.1:$p" >/dev/null && node_ping "$p"; then n_ours=$((n_ours + 1)); fi
    if node_ping "$p"; then n_up=$((n_up + 1)); fi
  done
  if ((n_ours == 3)) && cluster_ok; then
    log "redis-cluster: already running (pids $(cluster_pids))"; return
  fi
  if ((n_ours == 0 && n_up == 3)) && cluster_ok; then
    log "redis-cluster: reusing a cluster already answering on ${CLUSTER_PORTS[*]}"; return
  fi
  t0=$(date +%s)
  if ((n_ours < 3)); then
    # Nodes keep no data, so a partial cluster is rebuilt from scratch: stop what is left of
    # ours, wipe the node configs (stale node ids/slots would block `--cluster create`).
    if ((n_ours > 0)); then
      log "redis-cluster: only $n_ours of 3 nodes up, re-forming from scratch"
      for p in "${CLUSTER_PORTS[@]}"; do stop_pid "redis-cluster-$p" "redis-server 127.0.0.1:$p" & done
      wait
    fi
    for p in "${CLUSTER_PORTS[@]}"; do
      if port_open "$p" || port_open $((p + 10000)); then
        die "port $p or $((p + 10000)) is taken by something that is not this script's cluster node"
      fi
    done
    rm -rf "$CLUSTER_DIR"
    for p in "${CLUSTER_PORTS[@]}"; do
      mkdir -p "$CLUSTER_DIR/$p"
      rm -f "$STATE/redis-cluster-$p.pid"
      redis-server --bind 127.0.0.1 --port "$p" --daemonize yes \
        --cluster-enabled yes --cluster-config-file "$CLUSTER_DIR/nodes-$p.conf" \
        --pidfile "$STATE/redis-cluster-$p.pid" --dir "$CLUSTER_DIR/$p" \
        --logfile "$LOGS/redis-cluster-$p.log" \
        --save '' --appendonly no </dev/null >/dev/null 9>&-
    done
    for p in "${CLUSTER_PORTS[@]}"; do
      for ((i = 0; i < 100; i++)); do node_ping "$p" && break; sleep 0.1; done
      node_ping "$p" || { tail -n 20 "$LOGS/redis-cluster-$p.log" >&2 || true; die "redis-cluster: node $p did not answer PING within 10 s"; }
    done
  fi
  if cluster_pristine; then
    local addrs=()
    for p in "${CLUSTER_PORTS[@]}"; do addrs+=("127.0.0.1:$p"); done
    timeout 60 redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes \
      </dev/null >"$LOGS/redis-cluster-create.log" 2>&1 ||
      { tail -n 30 "$LOGS/redis-cluster-create.log" >&2; die "redis-cli --cluster create failed"; }
  fi
  for ((i = 0; i < 300; i++)); do cluster_ok && break; sleep 0.1; done
  if ! cluster_ok; then
    for p in "${CLUSTER_PORTS[@]}"; do echo "---- 127.0.0.1:$p cluster info" >&2; rcli "$p" cluster info >&2 || true; done
    die "redis-cluster: cluster_state is not ok after 30 s (try: $0 stop; $0 start)"
  fi
  log "redis-cluster: ready in $(($(date +%s) - t0)) s on $(cluster_urls) (pids $(cluster_pids || echo '?'))"
}

# ---------------------------------------------------------------- redis over tls

tls_ping() {
  local r
  r=$(timeout 5 redis-cli --tls --cacert "$TLS_DIR/ca.crt" -h 127.0.0.1 -p "$REDIS_TLS_PORT" \
        --user "$REDIS_TLS_USER" --pass "$REDIS_TLS_PASS" --no-auth-warning ping 2>/dev/null) || return 1
  [[ $r == PONG ]]
}

tls_certs_valid() {
  local f
  for f in ca.crt ca.key server.crt server.key client.crt client.key; do [[ -s $TLS_DIR/$f ]] || return 1; done
  openssl verify -CAfile "$TLS_DIR/ca.crt" "$TLS_DIR/server.crt" "$TLS_DIR/client.crt" >/dev/null 2>&1 &&
    openssl x509 -noout -checkend 86400 -in "$TLS_DIR/server.crt" >/dev/null 2>&1 &&
    openssl x509 -noout -checkend 86400 -in "$TLS_DIR/client.crt" >/dev/null 2>&1
}

# Self-signed CA plus a server certificate (SAN 127.0.0.1, localhost) and a client
# certificate, generated once into $TLS_DIR (again only when missing, invalid or expiring).
ensure_tls_certs() {
  # Once per run: the broker and the TLS Redis both use these, and both must learn of a
  # regeneration (TLS_REGENERATED stays set for the second caller).
  if ((${TLS_CHECKED:-0})); then return 0; fi
  TLS_CHECKED=1
  TLS_REGENERATED=0
  tls_certs_valid && return 0
  log "redis-tls: generating a test CA and server/client certificates in $TLS_DIR"
  local tmp
  tmp=$(mktemp -d "$STATE/tls.XXXXXX")
  cat >"$tmp/openssl.cnf" <<'EOF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = feature-connector test CA
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1,DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
EOF
  if ! (
    set -e
    cd "$tmp"
    openssl req -x509 -new -nodes -newkey rsa:2048 -sha256 -days 3650 -config openssl.cnf \
      -extensions ca -keyout ca.key -out ca.crt
    for who in server client; do
      cn=127.0.0.1; [[ $who == client ]] && cn=$REDIS_TLS_USER
      openssl req -new -nodes -newkey rsa:2048 -sha256 -subj "/CN=$cn" -keyout "$who.key" -out "$who.csr"
      openssl x509 -req -sha256 -days 3650 -in "$who.csr" -CA ca.crt -CAkey ca.key \
        -set_serial "0x$(openssl rand -hex 15)" -extfile openssl.cnf -extensions "$who" -out "$who.crt"
    done
    rm -f ./*.csr
    chmod 600 ./*.key
  ) >"$LOGS/openssl.log" 2>&1; then
    tail -n 20 "$LOGS/openssl.log" >&2; rm -rf "$tmp"; die "redis-tls: openssl could not create the certificates"
  fi
  rm -rf "$TLS_DIR"
  mv "$tmp" "$TLS_DIR"
  TLS_REGENERATED=1
}

start_redis_tls() {
  local marker="redis-server 127.0.0.1:$REDIS_TLS_PORT" i t0
  ensure_tls_certs
  if our_pid redis-tls "$marker" >/dev/null; then
    if ((TLS_REGENERATED)); then
      log "redis-tls: certificates changed, restarting"
      stop_pid redis-tls "$marker"
    elif tls_ping; then
      log "redis-tls: already running (pid $(our_pid redis-tls "$marker"))"; return
    fi
  fi
  if tls_ping; then log "redis-tls: reusing a server already answering TLS+AUTH PING on $REDIS_TLS_PORT"; return; fi
  if our_pid redis-tls "$marker" >/dev/null; then stop_pid redis-tls "$marker"; fi # ours but not answering
  port_open $REDIS_TLS_PORT && die "port $REDIS_TLS_PORT is taken by something that does not answer TLS+AUTH PING"
  t0=$(date +%s)
  mkdir -p "$STATE/redis-tls"
  rm -f "$STATE/redis-tls.pid"
  # TLS only (plain port 0); clients need no certificate but must AUTH as user app.
  if ! redis-server --bind 127.0.0.1 --port 0 --tls-port "$REDIS_TLS_PORT" --daemonize yes \
      --tls-cert-file "$TLS_DIR/server.crt" --tls-key-file "$TLS_DIR/server.key" \
      --tls-ca-cert-file "$TLS_DIR/ca.crt" --tls-auth-clients no \
      --user default off --user "$REDIS_TLS_USER" on ">$REDIS_TLS_PASS" '~*' '&*' '+@all' \
      --pidfile "$STATE/redis-tls.pid" --dir "$STATE/redis-tls" --logfile "$LOGS/redis-tls.log" \
      --save '' --appendonly no </dev/null >"$LOGS/redis-tls.out" 2>&1 9>&-; then
    tail -n 20 "$LOGS/redis-tls.out" "$LOGS/redis-tls.log" >&2 2>/dev/null || true
    die "redis-tls: redis-server refused the TLS configuration (does this build support TLS?)"
  fi
  for ((i = 0; i < 100; i++)); do
    tls_ping && { log "redis-tls: ready in $(($(date +%s) - t0)) s on rediss://127.0.0.1:$REDIS_TLS_PORT (pid $(cat "$STATE/redis-tls.pid" 2>/dev/null))"; return; }
    sleep 0.1
  done
  tail -n 20 "$LOGS/redis-tls.log" >&2 || true
  die "redis-tls: no PONG over TLS with AUTH $REDIS_TLS_USER within 10 s"
}

# ---------------------------------------------------------------- s3 (moto)

s3_answers() { [[ $(http_code "$S3_URL/") == 200 ]]; }

start_s3() {
  if our_pid s3 moto >/dev/null && s3_answers; then
    log "s3: already running (pid $(our_pid s3 moto))"
  elif s3_answers; then
    log "s3: reusing a server already answering on $S3_URL"
  else
    port_open $S3_PORT && die "port $S3_PORT is taken by something that does not answer HTTP like S3"
    ensure_moto
    launch s3 "$STATE" "${MOTO_CMD[@]}" -H 127.0.0.1 -p "$S3_PORT"
    local i
    for ((i = 0; i < 300; i++)); do
      s3_answers && break
      kill -0 "$(cat "$STATE/s3.pid")" 2>/dev/null || { tail -n 20 "$LOGS/s3.out" >&2; die "s3: moto_server exited"; }
      sleep 0.1
    done
    s3_answers || { tail -n 20 "$LOGS/s3.out" >&2; die "s3: no answer on $S3_URL within 30 s"; }
    log "s3: ready on $S3_URL (pid $(cat "$STATE/s3.pid"))"
  fi
  local code
  code=$(http_code -X PUT "$S3_URL/$S3_BUCKET")
  case $code in
    200 | 409) log "s3: bucket $S3_BUCKET present" ;;
    *) die "s3: creating bucket $S3_BUCKET answered HTTP $code" ;;
  esac
}

# ---------------------------------------------------------------- commands

write_env() {
  cat >"$STATE/env" <<EOF
export PULSAR_URL=pulsar://127.0.0.1:$PULSAR_BIN_PORT
export PULSAR_ADMIN_URL=$PULSAR_ADMIN
export FC_TEST_PULSAR_TLS_URL=pulsar+ssl://127.0.0.1:$PULSAR_TLS_PORT
export FC_TEST_PULSAR_TLS_ADMIN_URL=https://127.0.0.1:$PULSAR_HTTPS_PORT
export FC_TEST_PULSAR_TOKEN_FILE=$PULSAR_AUTH_DIR/token
export FC_TEST_PULSAR_BAD_TOKEN_FILE=$PULSAR_AUTH_DIR/bad-token
export REDIS_URL=redis://127.0.0.1:$REDIS_PORT
export REDIS_CLUSTER_URLS=$(cluster_urls)
export REDIS_TLS_URL=rediss://$REDIS_TLS_USER:$REDIS_TLS_PASS@127.0.0.1:$REDIS_TLS_PORT
export REDIS_TLS_CA=$TLS_DIR/ca.crt
export S3_ENDPOINT=$S3_URL
export S3_BUCKET=$S3_BUCKET
export AWS_ACCESS_KEY_ID=testing
export AWS_SECRET_ACCESS_KEY=testing
export AWS_REGION=us-east-1
export AWS_ALLOW_HTTP=true
EOF
  auth_env >>"$STATE/env"
  if our_pid pulsar-b "$PULSAR_B_MARKER" >/dev/null; then geo_env >>"$STATE/env"; fi
}

cmd_start() {
  mkdir -p "$STATE" "$LOGS"
  exec 9>"$STATE/.lock"
  flock -w 600 9 || die "another services.sh holds $STATE/.lock"
  check_disk
  ensure_packages
  start_pulsar   # slowest: launched first, awaited last
  ensure_pulsar_client_certs
  start_hydra
  ensure_oauth2_clients
  start_redis
  start_redis_cluster
  start_redis_tls
  start_s3
  wait_pulsar
  start_pulsar_proxy
  write_env
  log "all services up (env: source $STATE/env)"
}

# The quickstart's services: the broker (configured as for the suite, so that a later `start`
# keeps it running) and Redis.
cmd_start_quick() {
  mkdir -p "$STATE" "$LOGS"
  exec 9>"$STATE/.lock"
  flock -w 600 9 || die "another services.sh holds $STATE/.lock"
  check_disk
  ensure_packages
  start_pulsar
  start_redis
  wait_pulsar
  write_env
  log "broker and redis up (env: source $STATE/env)"
}

cmd_stop() {
  mkdir -p "$STATE"
  exec 9>"$STATE/.lock"
  flock -w 120 9 || die "another services.sh holds $STATE/.lock"
  stop_pid pulsar PulsarStandaloneStarter &
  if [[ -f $STATE/pulsar-b.pid ]]; then stop_pid pulsar-b "$PULSAR_B_MARKER" & fi
  stop_pid s3 moto &
  stop_pid redis redis-server &
  local p
  for p in "${CLUSTER_PORTS[@]}"; do stop_pid "redis-cluster-$p" "redis-server 127.0.0.1:$p" & done
  stop_pid redis-tls "redis-server 127.0.0.1:$REDIS_TLS_PORT" &
  auth_stop &
  wait
}

cmd_status() {
  local down=0 pid
  if pid=$(our_pid pulsar PulsarStandaloneStarter); then
    if pulsar_ready; then echo "pulsar         up    pid $pid  pulsar://127.0.0.1:$PULSAR_BIN_PORT  $PULSAR_ADMIN"
    else echo "pulsar         starting/unhealthy  pid $pid"; down=1; fi
  elif pulsar_ready; then echo "pulsar         up    (not started by this script)  $PULSAR_ADMIN"
  else echo "pulsar         down"; down=1; fi
  # The second cluster is on demand: not started is not a failure, started but unhealthy is.
  if pid=$(our_pid pulsar-b "$PULSAR_B_MARKER"); then
    if pulsar_b_ready; then echo "pulsar-b       up    pid $pid  pulsar://127.0.0.1:$PULSAR_B_BIN_PORT  $PULSAR_B_ADMIN  cluster $PULSAR_B_CLUSTER"
    else echo "pulsar-b       starting/unhealthy  pid $pid"; down=1; fi
  else echo "pulsar-b       not started (on demand: $0 start-geo)"; fi
  if pid=$(our_pid redis redis-server) && redis_ping; then echo "redis          up    pid $pid  redis://127.0.0.1:$REDIS_PORT"
  elif redis_ping; then echo "redis          up    (not started by this script)  redis://127.0.0.1:$REDIS_PORT"
  else echo "redis          down"; down=1; fi
  if pid=$(cluster_pids) && cluster_ok; then echo "redis-cluster  up    pids $pid  $(cluster_urls)  cluster_state:ok"
  elif cluster_ok; then echo "redis-cluster  up    (not started by this script)  $(cluster_urls)"
  else
    local p up=()
    for p in "${CLUSTER_PORTS[@]}"; do if node_ping "$p"; then up+=("$p:$(cluster_field "$p" cluster_state)"); fi; done
    echo "redis-cluster  down  (${#up[@]} of 3 nodes answer${up[*]:+: ${up[*]}})"; down=1
  fi
  if pid=$(our_pid redis-tls "redis-server 127.0.0.1:$REDIS_TLS_PORT") && tls_ping; then
    echo "redis-tls      up    pid $pid  rediss://$REDIS_TLS_USER:***@127.0.0.1:$REDIS_TLS_PORT  CA $TLS_DIR/ca.crt"
  elif tls_ping; then echo "redis-tls      up    (not started by this script)  rediss://127.0.0.1:$REDIS_TLS_PORT"
  else echo "redis-tls      down"; down=1; fi
  if pid=$(our_pid s3 moto) && s3_answers; then echo "s3             up    pid $pid  $S3_URL  bucket $S3_BUCKET"
  elif s3_answers; then echo "s3             up    (not started by this script)  $S3_URL"
  else echo "s3             down"; down=1; fi
  auth_status || down=1
  local headroom
  headroom=$(disk_headroom_mb)
  if ((headroom < 1024)); then
    echo "disk           FULL  ${headroom} MB left before the broker stops taking writes (99 %)"; down=1
  else echo "disk           ok    $((headroom / 1024)) GB left before the broker stops taking writes (99 %)"; fi
  return $((down ? 3 : 0))
}

case ${1:-start} in
  start) cmd_start ;;
  start-quick) cmd_start_quick ;;
  start-geo) cmd_start_geo ;;
  stop-geo) cmd_stop_geo ;;
  restart-pulsar)
    # For the chaos suite: stop the broker and start it again on the same data.
    mkdir -p "$STATE" "$LOGS"
    pick_java || die "no JDK found (run scripts/services.sh start first)"
    stop_pid pulsar PulsarStandaloneStarter
    PULSAR_KEEP_DATA=1 start_pulsar
    wait_pulsar ;;
  # The build's own needs (protoc for the pulsar crate) without starting a service.
  packages) mkdir -p "$STATE" "$LOGS" && ensure_packages ;;
  stop) cmd_stop ;;
  status) rc=0 && { cmd_status || rc=$?; } && exit "$rc" ;;
  env) mkdir -p "$STATE" && write_env && cat "$STATE/env" ;;
  -h | --help | help) sed -n '2,/^[^#]/{/^#/p}' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' ;;
  *) echo "usage: $0 [start|start-quick|start-geo|stop-geo|stop|status|env|packages|restart-pulsar]" >&2; exit 2 ;;
esac
