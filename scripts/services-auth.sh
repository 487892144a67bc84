# shellcheck shell=bash
# Sourced by scripts/services.sh (uses its helpers and variables): the services that test
# Pulsar authentication beyond the broker's own JWT.
#
#   OAuth2 server (ORY Hydra)   issuer http://127.0.0.1:4444 (admin API :4445), client
#                               credentials in <state>/oauth2/*.json; the broker validates its
#                               tokens (AuthenticationProviderOpenID, audience `pulsar`)
#   Pulsar proxy, mutual TLS    pulsar+ssl://127.0.0.1:6652  https://127.0.0.1:8444: requires a
#                               client certificate signed by the test CA (AuthenticationProviderTls)
#
# Why Hydra: an established open-source OAuth2 server that is one Go binary (built once from
# the Go module proxy, services/hydra/go.mod), ready in well under a second, ~60 MB of
# memory; Keycloak (a ~200 MB Maven zip, a JVM) would take tens of seconds and ~500 MB on
# every start on 2 cores.
#
# Why a proxy: the broker's TLS listeners take clients without a certificate (every other
# test uses them), and Pulsar's "require a client certificate" setting is per process, not
# per listener. A Pulsar proxy in front of the same broker requires one on its own listeners.

HYDRA_VERSION=v2.3.0
HYDRA_PUBLIC_PORT=4444
HYDRA_ADMIN_PORT=4445
HYDRA_ISSUER=http://127.0.0.1:$HYDRA_PUBLIC_PORT
HYDRA_ADMIN=http://127.0.0.1:$HYDRA_ADMIN_PORT
OAUTH2_DIR=$STATE/oauth2
OAUTH2_AUDIENCE=pulsar
# Lifetime of the short-lived client's tokens (the refresh test); FC_OAUTH2_SHORT_TTL overrides.
OAUTH2_SHORT_TTL=${FC_OAUTH2_SHORT_TTL:-8}
PROXY_DIR=$ROOT/services/pulsar-proxy
PROXY_TLS_PORT=6652
PROXY_HTTPS_PORT=8444

# ---------------------------------------------------------------- broker additions

# Lines appended to the broker's configuration: JWTs of the broker's own key (as before) or
# of the OAuth2 server, and client certificates. The broker asks clients for fresh
# credentials (or drops them) within 2 s of their token expiring, so the refresh test is quick.
pulsar_auth_config() {
  cat <<EOF
authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderToken,org.apache.pulsar.broker.authentication.oidc.AuthenticationProviderOpenID,org.apache.pulsar.broker.authentication.AuthenticationProviderTls
openIDAllowedTokenIssuers=$HYDRA_ISSUER
openIDAllowedAudiences=$OAUTH2_AUDIENCE
openIDRequireIssuersUseHttps=false
openIDRoleClaim=sub
authenticationRefreshCheckSeconds=2
EOF
}

# ---------------------------------------------------------------- client certificates

# A client certificate of the test CA (role feature-connector-tls) and one of another CA, for
# the refusal test; keys PKCS#8 as pulsar-rs needs them.
ensure_pulsar_client_certs() {
  local d=$PULSAR_AUTH_DIR
  mkdir -p "$d"
  if [[ -s $d/client-tls.crt && -s $d/untrusted-client.crt ]] &&
     openssl verify -CAfile "$TLS_DIR/ca.crt" "$d/client-tls.crt" >/dev/null 2>&1; then
    return 0
  fi
  log "pulsar-auth: issuing client certificates from the test CA and from an untrusted one"
  if ! (
    set -e
    cd "$d"
    printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' >client.ext
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out client-tls.key
    openssl req -new -key client-tls.key -subj "/CN=feature-connector-tls" -out client-tls.csr
    openssl x509 -req -sha256 -days 3650 -in client-tls.csr -CA "$TLS_DIR/ca.crt" -CAkey "$TLS_DIR/ca.key" \
      -set_serial "0x$(openssl rand -hex 15)" -extfile client.ext -out client-tls.crt
    openssl req -x509 -new -nodes -newkey rsa:2048 -sha256 -days 3650 -subj "/CN=untrusted test CA" \
      -keyout untrusted-ca.key -out untrusted-ca.crt
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out untrusted-client.key
    openssl req -new -key untrusted-client.key -subj "/CN=feature-connector-tls" -out untrusted-client.csr
    openssl x509 -req -sha256 -days 3650 -in untrusted-client.csr -CA untrusted-ca.crt -CAkey untrusted-ca.key \
      -set_serial "0x$(openssl rand -hex 15)" -extfile client.ext -out untrusted-client.crt
    rm -f ./*.csr client.ext
    chmod 600 ./*.key
  ) >"$LOGS/openssl-client.log" 2>&1; then
    tail -n 20 "$LOGS/openssl-client.log" >&2; die "pulsar-auth: openssl could not issue the client certificates"
  fi
}

# ---------------------------------------------------------------- oauth2 server (hydra)

# Sets HYDRA_BIN, building it once per services/hydra/go.{mod,sum}.
ensure_hydra() {
  local key t0
  key=$(cat "$ROOT/services/hydra/go.mod" "$ROOT/services/hydra/go.sum" | sha256sum | cut -c1-16)
  HYDRA_BIN=$STATE/hydra/hydra-$HYDRA_VERSION-$key
  [[ -x $HYDRA_BIN ]] && return 0
  command -v go >/dev/null || die "hydra: building ORY Hydra needs the Go toolchain (1.26+) on PATH"
  command -v gcc >/dev/null || die "hydra: building ORY Hydra (SQLite, cgo) needs gcc (apt-get install gcc)"
  mkdir -p "$STATE/hydra"
  t0=$(date +%s)
  log "hydra: building ORY Hydra $HYDRA_VERSION from the Go module proxy (once; a few minutes on 2 cores)"
  # A test server: no inlining, SQLite at -O1 without debug info, no DWARF in the binary.
  # A third less CPU to build (148 instead of 222 s on 2 cores) for a server that answers a
  # few token requests.
  (cd "$ROOT/services/hydra" && CGO_ENABLED=1 CGO_CFLAGS="-O1 -g0" go build -trimpath \
     -tags sqlite,sqlite_omit_load_extension -gcflags=all=-l \
     -ldflags "-s -w -X github.com/ory/hydra/v2/driver/config.Version=$HYDRA_VERSION" \
     -o "$HYDRA_BIN.tmp" github.com/ory/hydra/v2) </dev/null >"$LOGS/hydra-build.log" 2>&1 ||
    { tail -n 30 "$LOGS/hydra-build.log" >&2; die "hydra: go build failed"; }
  find "$STATE/hydra" -maxdepth 1 -name 'hydra-v*' ! -name "$(basename "$HYDRA_BIN").tmp" -delete
  mv "$HYDRA_BIN.tmp" "$HYDRA_BIN"
  log "hydra: built in $(($(date +%s) - t0)) s"
}

hydra_ready() { [[ $(http_code "$HYDRA_ISSUER/health/ready") == 200 ]]; }

start_hydra() {
  local t0 i pid secret dsn
  if our_pid hydra "serve all" >/dev/null && hydra_ready; then
    log "hydra: already running (pid $(our_pid hydra "serve all"))"; return
  fi
  if our_pid hydra "serve all" >/dev/null; then stop_pid hydra "serve all"; fi
  if port_open $HYDRA_PUBLIC_PORT || port_open $HYDRA_ADMIN_PORT; then
    die "port $HYDRA_PUBLIC_PORT or $HYDRA_ADMIN_PORT is taken by a process this script did not start"
  fi
  ensure_hydra
  # SQLite on disk: the signing keys (JWKS) and clients survive a restart, so the broker's
  # cached keys stay valid.
  [[ -s $STATE/hydra/system.secret ]] || openssl rand -hex 24 >"$STATE/hydra/system.secret"
  secret=$(<"$STATE/hydra/system.secret")
  dsn="sqlite://$STATE/hydra/hydra.sqlite?_fk=true"
  DSN=$dsn "$HYDRA_BIN" migrate sql up -e --yes </dev/null >"$LOGS/hydra-migrate.log" 2>&1 ||
    { tail -n 20 "$LOGS/hydra-migrate.log" >&2; die "hydra: database migration failed"; }
  t0=$(date +%s%N)
  launch hydra "$STATE/hydra" env DSN="$dsn" URLS_SELF_ISSUER="$HYDRA_ISSUER" \
    STRATEGIES_ACCESS_TOKEN=jwt SECRETS_SYSTEM="$secret" LOG_LEVEL=warn \
    SERVE_PUBLIC_HOST=127.0.0.1 SERVE_PUBLIC_PORT=$HYDRA_PUBLIC_PORT \
    SERVE_ADMIN_HOST=127.0.0.1 SERVE_ADMIN_PORT=$HYDRA_ADMIN_PORT \
    "$HYDRA_BIN" serve all --dev
  pid=$(tr -dc '0-9' <"$STATE/hydra.pid")
  for ((i = 0; i < 300; i++)); do
    hydra_ready && break
    kill -0 "$pid" 2>/dev/null || { tail -n 20 "$LOGS/hydra.out" >&2; die "hydra: exited during startup"; }
    sleep 0.1
  done
  hydra_ready || { tail -n 20 "$LOGS/hydra.out" >&2; die "hydra: not ready within 30 s"; }
  log "hydra: ready in $(( ($(date +%s%N) - t0) / 1000000 )) ms, RSS $(( $(ps -o rss= -p "$pid") / 1024 )) MB (issuer $HYDRA_ISSUER, pid $pid)"
}

# upsert_client ID SECRET AUDIENCES_JSON LIFESPAN: creates or replaces an OAuth2 client.
upsert_client() {
  local body code
  body=$(printf '{"client_id":"%s","client_secret":"%s","grant_types":["client_credentials"],"token_endpoint_auth_method":"client_secret_post","audience":%s,"access_token_strategy":"jwt"}' "$1" "$2" "$3")
  if [[ $(http_code "$HYDRA_ADMIN/admin/clients/$1") == 200 ]]; then
    code=$(http_code -X PUT -H 'content-type: application/json' -d "$body" "$HYDRA_ADMIN/admin/clients/$1")
  else
    code=$(http_code -X POST -H 'content-type: application/json' -d "$body" "$HYDRA_ADMIN/admin/clients")
  fi
  [[ $code == 200 || $code == 201 ]] || die "hydra: registering client $1 answered HTTP $code"
  code=$(http_code -X PUT -H 'content-type: application/json' \
    -d "{\"client_credentials_grant_access_token_lifespan\":\"$4\"}" "$HYDRA_ADMIN/admin/clients/$1/lifespans")
  [[ $code == 200 ]] || die "hydra: setting the token lifespan of $1 answered HTTP $code"
}

# The test clients and their credentials files ({"client_id", "client_secret"}):
#   credentials.json        audiences pulsar and other-service, tokens for 1 h
#   wrong-secret.json       the same client id with a wrong secret
#   short-credentials.json  audience pulsar, tokens for OAUTH2_SHORT_TTL seconds
ensure_oauth2_clients() {
  local secret short_secret
  mkdir -p "$OAUTH2_DIR"
  [[ -s $OAUTH2_DIR/client.secret ]] || openssl rand -hex 24 >"$OAUTH2_DIR/client.secret"
  [[ -s $OAUTH2_DIR/short.secret ]] || openssl rand -hex 24 >"$OAUTH2_DIR/short.secret"
  secret=$(<"$OAUTH2_DIR/client.secret")
  short_secret=$(<"$OAUTH2_DIR/short.secret")
  upsert_client feature-connector "$secret" "[\"$OAUTH2_AUDIENCE\",\"other-service\"]" 1h
  upsert_client feature-connector-short "$short_secret" "[\"$OAUTH2_AUDIENCE\"]" "${OAUTH2_SHORT_TTL}s"
  printf '{"client_id":"feature-connector","client_secret":"%s"}\n' "$secret" >"$OAUTH2_DIR/credentials.json"
  printf '{"client_id":"feature-connector","client_secret":"%s"}\n' "wrong-$secret" >"$OAUTH2_DIR/wrong-secret.json"
  printf '{"client_id":"feature-connector-short","client_secret":"%s"}\n' "$short_secret" >"$OAUTH2_DIR/short-credentials.json"
  chmod 600 "$OAUTH2_DIR"/*
  log "hydra: clients feature-connector and feature-connector-short (tokens for ${OAUTH2_SHORT_TTL} s) registered"
}

# ---------------------------------------------------------------- pulsar proxy (mutual TLS)

proxy_ready() {
  [[ $(http_code --cacert "$TLS_DIR/ca.crt" --cert "$PULSAR_AUTH_DIR/client-tls.crt" \
         --key "$PULSAR_AUTH_DIR/client-tls.key" "https://127.0.0.1:$PROXY_HTTPS_PORT/admin/v2/clusters") == 200 ]]
}

# write_proxy_config FILE CLASSPATH_KEY (the key is recorded so a new classpath restarts it)
write_proxy_config() {
  cat >"$1" <<EOF
# Written by scripts/services-auth.sh: a proxy in front of the test broker whose listeners
# take only clients with a certificate of the test CA. Classpath $2.
clusterName=standalone
brokerServiceURL=pulsar://127.0.0.1:$PULSAR_BIN_PORT
brokerWebServiceURL=http://127.0.0.1:$PULSAR_HTTP_PORT
bindAddress=127.0.0.1
advertisedAddress=127.0.0.1
servicePort=
servicePortTls=$PROXY_TLS_PORT
webServicePort=
webServicePortTls=$PROXY_HTTPS_PORT
tlsCertificateFilePath=$TLS_DIR/server.crt
tlsKeyFilePath=$TLS_DIR/server.key
tlsTrustCertsFilePath=$TLS_DIR/ca.crt
tlsRequireTrustedClientCertOnConnect=true
authenticationEnabled=true
authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderTls
authorizationEnabled=false
numIOThreads=2
numAcceptorThreads=1
EOF
}

start_pulsar_proxy() {
  local marker=ProxyServiceStarter key cp cpfile conf=$STATE/pulsar-proxy/proxy.conf i pid t0
  mkdir -p "$STATE/pulsar-proxy"
  key=$(cat "$PROXY_DIR/pom.xml" "$PROXY_DIR/settings.xml" | sha256sum | cut -c1-16)
  write_proxy_config "$conf.new" "$key"
  if our_pid pulsar-proxy "$marker" >/dev/null; then
    if cmp -s "$conf.new" "$conf" && proxy_ready; then
      rm -f "$conf.new"; log "pulsar-proxy: already running (pid $(our_pid pulsar-proxy "$marker"))"; return
    fi
    stop_pid pulsar-proxy "$marker"
  fi
  mv -f "$conf.new" "$conf"
  if port_open $PROXY_TLS_PORT || port_open $PROXY_HTTPS_PORT; then
    die "port $PROXY_TLS_PORT or $PROXY_HTTPS_PORT is taken by a process this script did not start"
  fi
  cpfile=$STATE/pulsar-proxy/classpath-$key.txt
  if [[ ! -s $cpfile ]]; then
    log "pulsar-proxy: resolving its classpath with Maven"
    (cd "$PROXY_DIR" && mvn -B -q -s settings.xml -f pom.xml dependency:build-classpath \
       -Dmdep.includeScope=runtime -Dmdep.outputFile="$cpfile.tmp") </dev/null >"$LOGS/mvn-proxy.log" 2>&1 ||
      { tail -30 "$LOGS/mvn-proxy.log"; die "mvn could not resolve the Pulsar proxy's classpath"; }
    rm -f "$STATE"/pulsar-proxy/classpath-*.txt
    mv "$cpfile.tmp" "$cpfile"
  fi
  cp=$(<"$cpfile")
  t0=$(date +%s)
  launch pulsar-proxy "$STATE/pulsar-proxy" "$JAVA_HOME/bin/java" -Xms64m -Xmx256m -XX:+UseSerialGC \
    -Dlog4j.configurationFile="$PULSAR_DIR/log4j2.xml" -Dpulsar.log.dir="$LOGS/pulsar-proxy" \
    -Djava.net.preferIPv4Stack=true -Dio.netty.tryReflectionSetAccessible=true \
    --add-opens java.base/sun.net=ALL-UNNAMED --add-opens java.base/java.nio=ALL-UNNAMED \
    -cp "$cp" org.apache.pulsar.proxy.server.ProxyServiceStarter --config "$conf"
  pid=$(tr -dc '0-9' <"$STATE/pulsar-proxy.pid")
  for ((i = 0; i < 120; i++)); do
    proxy_ready && break
    kill -0 "$pid" 2>/dev/null || { tail -n 30 "$LOGS/pulsar-proxy.out" >&2; die "pulsar-proxy: exited during startup"; }
    sleep 0.5
  done
  proxy_ready || { tail -n 30 "$LOGS/pulsar-proxy.out" >&2; die "pulsar-proxy: not ready within 60 s"; }
  log "pulsar-proxy: ready in $(($(date +%s) - t0)) s on pulsar+ssl://127.0.0.1:$PROXY_TLS_PORT, https://127.0.0.1:$PROXY_HTTPS_PORT (client certificate required; pid $pid)"
}

# ---------------------------------------------------------------- env, status, stop

auth_env() {
  cat <<EOF
export FC_TEST_OAUTH2_ISSUER=$HYDRA_ISSUER
export FC_TEST_OAUTH2_AUDIENCE=$OAUTH2_AUDIENCE
export FC_TEST_OAUTH2_CREDENTIALS=$OAUTH2_DIR/credentials.json
export FC_TEST_OAUTH2_WRONG_SECRET=$OAUTH2_DIR/wrong-secret.json
export FC_TEST_OAUTH2_SHORT_CREDENTIALS=$OAUTH2_DIR/short-credentials.json
export FC_TEST_OAUTH2_SHORT_TTL=$OAUTH2_SHORT_TTL
export FC_TEST_PULSAR_MTLS_URL=pulsar+ssl://127.0.0.1:$PROXY_TLS_PORT
export FC_TEST_PULSAR_MTLS_ADMIN_URL=https://127.0.0.1:$PROXY_HTTPS_PORT
export FC_TEST_PULSAR_CLIENT_CERT=$PULSAR_AUTH_DIR/client-tls.crt
export FC_TEST_PULSAR_CLIENT_KEY=$PULSAR_AUTH_DIR/client-tls.key
export FC_TEST_PULSAR_UNTRUSTED_CERT=$PULSAR_AUTH_DIR/untrusted-client.crt
export FC_TEST_PULSAR_UNTRUSTED_KEY=$PULSAR_AUTH_DIR/untrusted-client.key
EOF
}

auth_status() {
  local down=0 pid
  if pid=$(our_pid hydra "serve all") && hydra_ready; then echo "hydra (oauth2) up    pid $pid  $HYDRA_ISSUER"
  else echo "hydra (oauth2) down"; down=1; fi
  if pid=$(our_pid pulsar-proxy ProxyServiceStarter) && proxy_ready; then
    echo "pulsar-proxy   up    pid $pid  pulsar+ssl://127.0.0.1:$PROXY_TLS_PORT (client certificate required)"
  else echo "pulsar-proxy   down"; down=1; fi
  return $down
}

auth_stop() {
  stop_pid hydra "serve all" &
  stop_pid pulsar-proxy ProxyServiceStarter &
  wait
}
