#!/usr/bin/env bash
# onceflow's three real services on loopback, without Docker:
#   Temporal dev server + Web UI (Temporal CLI built with `go install`),
#   Apache Kafka (KRaft, 1 or 3 nodes, jars from Maven Central),
#   MariaDB (Debian package).
#
#   scripts/services.sh up      [service ...]   install if missing, start if stopped, wait
#   scripts/services.sh install [service ...]   install (build/download) only, start nothing
#   scripts/services.sh down    [service ...]   stop cleanly (SIGTERM, then SIGKILL after 60 s)
#   scripts/services.sh kill    <service ...>   SIGKILL (fault injection)
#   scripts/services.sh restart <service ...> [--hard]   down (or kill with --hard), then up
#   scripts/services.sh status                  one line per service (per Kafka node); exit 0 iff all up
#   scripts/services.sh diagnose                status, and for each service that is down the end of
#                                               its log and any JVM crash file; disk and memory free
#   scripts/services.sh env                     print the endpoints/credentials file path
#   scripts/services.sh pid     <service>       the pid (process-group leader) of a running service
#   scripts/services.sh bin     temporal        the path of the Temporal CLI that install builds
#   scripts/services.sh grant <pipeline> <source>[,<source>...] <output> [--principal <name>] [--no-txn]
#                                               Kafka ACLs for one pipeline (secured stack only)
# Services: temporal, kafka (every Kafka node), kafka-0, kafka-1, kafka-2 (one node), mariadb.
#
# Builds and downloads are cached in $ONCEFLOW_HOME (default ~/.cache/onceflow), outside the
# checkout, so a fresh clone on a warm machine starts in seconds. Data and logs live in
# $ONCEFLOW_RUN_DIR (default $ONCEFLOW_HOME/run) and survive restarts. A port held by a
# process that is not ours is reported and left alone.
#
# A second, isolated stack (the fault campaign and the benchmark use one, so they never
# disturb the development services) takes its own run directory and ports:
#   ONCEFLOW_RUN_DIR=/tmp/stack2 ONCEFLOW_PORT_BASE=17000 scripts/services.sh up
# puts Temporal on 17233 (UI 17234), Kafka on 17092 (controller 17093), MariaDB on 17306.
#
# Kafka version: ONCEFLOW_KAFKA_VERSION (default 3.9.1; 4.x works too, e.g. 4.4.0).
# Kafka nodes: ONCEFLOW_KAFKA_NODES=1 (default) or 3. Three nodes are a KRaft cluster of
# combined broker+controller nodes, a 3-voter quorum, replication factor 3 and min.insync.replicas
# 2 by default (transaction and offsets topics too), no unclean leader election. Node i listens
# for clients on BASE+92+100*i and for the quorum on BASE+93+100*i (no base: 9092/9093,
# 9192/9193, 9292/9293); data and log in $RUN/kafka-<i>. One node keeps $RUN/kafka.
# ONCEFLOW_KAFKA_CONTROLLERS=3 (with ONCEFLOW_KAFKA_NODES=3; default 0): Kafka's production layout
# instead — the 3 nodes are brokers only, and 3 more nodes are KRaft controllers only (services
# kafka-3, kafka-4, kafka-5; node ids 4-6), each listening for the quorum only, on BASE+93+100*i.
# A killed broker then restarts from metadata a controller quorum it was never part of hands it.
# Plain stack only.
# The node count, controller layout and version a run directory was started with are kept in
# $RUN/kafka.conf and are the defaults there later (its data was formatted for them); the
# variables override.
#
# ONCEFLOW_KAFKA_PROXY_LISTENERS=<listenPort>:<advertisedPort>[,...] adds broker listeners
# PROXIED0, PROXIED1, ... on 127.0.0.1:<listenPort> that advertise 127.0.0.1:<advertisedPort>,
# where a TCP proxy (the fault campaign's) forwards to <listenPort>. A client bootstrapping
# through the proxy is then told to keep talking to the proxy. Unset: no extra listener.
# One Kafka node, plain stack only.
#
# --secure (anywhere on the command line) or ONCEFLOW_SECURE=1: the secured stack, beside the
# plain one: run directory $ONCEFLOW_HOME/run-secure, port base 27000 (Temporal 27233, UI 27234,
# Kafka 27092, controller 27093, MariaDB 27306) unless ONCEFLOW_RUN_DIR/ONCEFLOW_PORT_BASE say
# otherwise. Certificates from scripts/certs.sh in $RUN/certs. Kafka: one SASL_SSL listener
# (SCRAM-SHA-512) advertised as localhost, the controller listener mutual TLS on loopback,
# StandardAuthorizer with no ACL meaning no access; SCRAM users admin (super user), onceflow and
# onceflow-nottx, with random passwords in $RUN/secrets/*.password (mode 600; never printed).
# The demo pipeline's ACLs are granted on the first start. MariaDB: TLS required, user onceflow
# REQUIRE SSL. Temporal: scripts/temporal-server.sh (mTLS). Files: $RUN/services.env (the
# pipeline's settings), $RUN/admin.env (the same as the Kafka admin, for test set-up),
# $RUN/secrets/kafka-{admin,onceflow,onceflow-nottx}.properties (Kafka CLI client configs).
set -euo pipefail

log() { printf '[services] %s\n' "$*" >&2; }
die() { printf '[services] error: %s\n' "$*" >&2; exit 1; }

SECURE=0
case ${ONCEFLOW_SECURE:-} in 1 | true | yes) SECURE=1 ;; esac
args=()
for a in "$@"; do if [[ $a == --secure ]]; then SECURE=1; else args+=("$a"); fi; done
set -- ${args[@]+"${args[@]}"}
[[ ${1:-} == grant ]] && SECURE=1

ONCEFLOW_HOME=${ONCEFLOW_HOME:-$HOME/.cache/onceflow}
if ((SECURE)); then
  RUN=${ONCEFLOW_RUN_DIR:-$ONCEFLOW_HOME/run-secure}
  BASE=${ONCEFLOW_PORT_BASE:-27000}
else
  RUN=${ONCEFLOW_RUN_DIR:-$ONCEFLOW_HOME/run}
  BASE=${ONCEFLOW_PORT_BASE:-}
fi
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CERTS=$RUN/certs
SECRETS=$RUN/secrets

TEMPORAL_VERSION=${ONCEFLOW_TEMPORAL_CLI_VERSION:-v1.5.1}
TEMPORAL_BIN=$ONCEFLOW_HOME/temporal-$TEMPORAL_VERSION/temporal
TEMPORAL_PORT=${BASE:+$((BASE + 233))}; TEMPORAL_PORT=${TEMPORAL_PORT:-7233}
TEMPORAL_UI_PORT=${BASE:+$((BASE + 234))}; TEMPORAL_UI_PORT=${TEMPORAL_UI_PORT:-8233}
TEMPORAL_SERVER_SH=$SCRIPT_DIR/temporal-server.sh

KAFKA_CONF=$RUN/kafka.conf
saved() { [[ -f $KAFKA_CONF ]] && sed -n "s/^$1=//p" "$KAFKA_CONF" || true; }
KAFKA_VERSION=${ONCEFLOW_KAFKA_VERSION:-$(saved ONCEFLOW_KAFKA_VERSION)}; KAFKA_VERSION=${KAFKA_VERSION:-3.9.1}
KAFKA_NODES=${ONCEFLOW_KAFKA_NODES:-$(saved ONCEFLOW_KAFKA_NODES)}; KAFKA_NODES=${KAFKA_NODES:-1}
[[ $KAFKA_NODES == 1 || $KAFKA_NODES == 3 ]] || die "ONCEFLOW_KAFKA_NODES must be 1 or 3 (a quorum of 3 voters tolerates one node down), got '$KAFKA_NODES'"
KAFKA_CONTROLLERS=${ONCEFLOW_KAFKA_CONTROLLERS:-$(saved ONCEFLOW_KAFKA_CONTROLLERS)}; KAFKA_CONTROLLERS=${KAFKA_CONTROLLERS:-0}
[[ $KAFKA_CONTROLLERS == 0 || ($KAFKA_CONTROLLERS == 3 && $KAFKA_NODES == 3) ]] ||
  die "ONCEFLOW_KAFKA_CONTROLLERS must be 0 (combined broker+controller nodes) or 3 (three dedicated controllers, with ONCEFLOW_KAFKA_NODES=3), got '$KAFKA_CONTROLLERS'"
((KAFKA_CONTROLLERS == 0 || !SECURE)) || die "ONCEFLOW_KAFKA_CONTROLLERS=3 is for the plain stack; the secured stack runs combined nodes"
# Every Kafka process: the brokers (0 … KAFKA_NODES-1), then any dedicated controllers.
KAFKA_PROCS=$((KAFKA_NODES + KAFKA_CONTROLLERS))
is_controller_only() { ((KAFKA_CONTROLLERS > 0 && $1 >= KAFKA_NODES)); }
[[ $KAFKA_VERSION =~ ^([0-9]+)\.[0-9]+\.[0-9]+$ ]] || die "ONCEFLOW_KAFKA_VERSION must look like 3.9.1 or 4.4.0, got '$KAFKA_VERSION'"
KAFKA_MAJOR=${BASH_REMATCH[1]}
KAFKA_LIBS=$ONCEFLOW_HOME/kafka-$KAFKA_VERSION/libs
KBASE=${BASE:-9000}
kafka_port() { echo $((KBASE + 92 + 100 * $1)); }
kafka_controller_port() { echo $((KBASE + 93 + 100 * $1)); }
# The port that says a node is up: a broker's client port, a dedicated controller's quorum port.
kafka_client_or_controller_port() { if is_controller_only "$1"; then kafka_controller_port "$1"; else kafka_port "$1"; fi; }
KAFKA_PORT=$(kafka_port 0)
# The secured listener is reached by the name in the server certificate.
if ((SECURE)); then KAFKA_HOST=localhost; else KAFKA_HOST=127.0.0.1; fi
# The node's service (and run-directory) name: one node keeps today's "kafka".
knode() { if ((KAFKA_NODES == 1)); then echo kafka; else echo "kafka-$1"; fi; }
kafka_brokers() { local i out=; for ((i = 0; i < KAFKA_NODES; i++)); do out+="${out:+,}$KAFKA_HOST:$(kafka_port $i)"; done; echo "$out"; }
if ((KAFKA_MAJOR >= 4)); then ACL_CLASS=org.apache.kafka.tools.AclCommand; else ACL_CLASS=kafka.admin.AclCommand; fi

MYSQL_PORT=${BASE:+$((BASE + 306))}; MYSQL_PORT=${MYSQL_PORT:-3306}
MYSQL_DB=onceflow
MYSQL_USER=onceflow

ALL=(temporal kafka mariadb)
ENV_FILE=$RUN/services.env
ADMIN_ENV_FILE=$RUN/admin.env

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
pid_of() { local f=$RUN/$1/pid; [[ -f $f ]] && cat "$f" || true; }
# shellcheck source=scripts/process.sh
source "$SCRIPT_DIR/process.sh"
alive() { ours "$(pid_of "$1")" "$RUN"; }
logfile() { echo "$RUN/$1/$1.log"; }

wait_for() { # name seconds command...
  local name=$1 secs=$2; shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    alive "$name" || { tail -n 30 "$(logfile "$name")" >&2 || true; die "$name exited during start-up; log: $(logfile "$name")"; }
    ((SECONDS < deadline)) || die "$name not ready after ${secs}s; log: $(logfile "$name")"
    sleep 0.5
  done
}

# Refuse to start over a port someone else holds.
check_ports_free() { # name ports...
  local name=$1; shift
  for p in "$@"; do
    if port_open "$p"; then
      die "port $p is held by a process that is not onceflow's $name (no pid file of ours is alive). Stop that process or free the port; onceflow never kills what it did not start."
    fi
    # Not listening, but bound as the local end of a connection: a port in Linux's ephemeral
    # range (net.ipv4.ip_local_port_range, usually 32768-60999) that some client was given.
    if command -v ss >/dev/null && [[ -n $(ss -Htan state established state syn-sent "sport = :$p" 2>/dev/null) ]]; then
      die "port $p is the local port of an open connection (an ephemeral port, range $(tr '\t' - </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null)), so $name cannot listen on it until that connection closes; choose an ONCEFLOW_PORT_BASE whose ports lie below that range (e.g. 17000 or 27000)"
    fi
  done
}

# The line spawn writes into a service's log before each start (diagnose reads what follows the last).
START_MARK='----- scripts/services.sh starts it'
spawn() { # name command...  (own session, so a kill reaches the whole tree)
  local name=$1; shift
  mkdir -p "$RUN/$name"
  echo "$START_MARK $(date -u +%FT%TZ): $*" >>"$(logfile "$name")"
  setsid "$@" >>"$(logfile "$name")" 2>&1 </dev/null &
  echo $! >"$RUN/$name/pid"
}

# ---------------------------------------------------------------- secrets (secured stack)
# A random password per name, made once, kept in $RUN/secrets/<name>.password (mode 600).
secret_file() { echo "$SECRETS/$1.password"; }
secret() {
  local f; f=$(secret_file "$1")
  if [[ ! -s $f ]]; then
    (umask 077; mkdir -p "$SECRETS"; head -c 18 /dev/urandom | base64 | tr -d '/+=\n' >"$f")
  fi
  cat "$f"
}

secure_prepare() {
  ((SECURE)) || return 0
  command -v openssl >/dev/null || die "openssl is needed for the secured stack's certificates"
  (umask 077; mkdir -p "$SECRETS")
  chmod 700 "$SECRETS"
  bash "$SCRIPT_DIR/certs.sh" "$CERTS"
}

# ---------------------------------------------------------------- Temporal
install_temporal() {
  [[ -x $TEMPORAL_BIN ]] && return
  command -v go >/dev/null || die "Go is needed to build the Temporal CLI (go install); install Go 1.22+"
  log "building Temporal CLI $TEMPORAL_VERSION with go install (first time only, several minutes)"
  mkdir -p "$(dirname "$TEMPORAL_BIN")"
  GOBIN=$(dirname "$TEMPORAL_BIN") CGO_ENABLED=0 GOFLAGS=-mod=mod \
    go install "github.com/temporalio/cli/cmd/temporal@$TEMPORAL_VERSION"
}

temporal_ready() { "$TEMPORAL_BIN" operator cluster health --address "127.0.0.1:$TEMPORAL_PORT" | grep -q SERVING; }

# The secured stack's Temporal is a real server with mTLS, run by scripts/temporal-server.sh.
temporal_secure() { # up|down|kill|status|build
  [[ -f $TEMPORAL_SERVER_SH ]] || {
    printf '[services] error: the secured Temporal is run by scripts/temporal-server.sh (a Temporal server with mTLS), which is not in this checkout; start the rest with: scripts/services.sh up --secure kafka mariadb\n' >&2
    return 1
  }
  ONCEFLOW_RUN_DIR=$RUN ONCEFLOW_CERTS=$CERTS ONCEFLOW_TEMPORAL_PORT=$TEMPORAL_PORT ONCEFLOW_TEMPORAL_UI_PORT=$TEMPORAL_UI_PORT \
    bash "$TEMPORAL_SERVER_SH" "$1"
}

up_temporal() {
  if ((SECURE)); then secure_prepare; temporal_secure up >/dev/null; return; fi
  install_temporal
  if alive temporal; then temporal_ready && return; else check_ports_free temporal $TEMPORAL_PORT $TEMPORAL_UI_PORT; fi
  if ! alive temporal; then
    mkdir -p "$RUN/temporal"
    log "starting Temporal dev server"
    # Search attributes used by onceflow (pipeline, partition, epoch, phase) are registered at start.
    # Eager activity execution (off by default in Temporal): an activity scheduled by a workflow
    # task is handed back in the response to that task's completion, skipping a matching round
    # trip per activity (docs/performance.md measures it).
    # A poll a worker left open is handed tasks until it expires, also when the worker is frozen
    # (a GC pause, a suspended VM): 10 s instead of the default minute bounds how long a frozen
    # worker can keep taking work that a healthy one would run (docs/deploy.md §7.3).
    spawn temporal "$TEMPORAL_BIN" server start-dev \
      --dynamic-config-value system.enableActivityEagerExecution=true \
      --dynamic-config-value 'matching.longPollExpirationInterval="10s"' \
      --ip 127.0.0.1 --port $TEMPORAL_PORT --ui-port $TEMPORAL_UI_PORT \
      --db-filename "$RUN/temporal/temporal.db" --namespace default \
      --search-attribute OnceflowPipeline=Keyword \
      --search-attribute OnceflowPartition=Int \
      --search-attribute OnceflowEpoch=Int \
      --search-attribute OnceflowPhase=Keyword \
      --log-level warn
  fi
  wait_for temporal 120 temporal_ready
}

# ---------------------------------------------------------------- Kafka
install_kafka() {
  [[ -f $KAFKA_LIBS/kafka_2.13-$KAFKA_VERSION.jar ]] && return
  command -v mvn >/dev/null || die "Maven is needed to fetch Kafka's jars; install maven"
  command -v java >/dev/null || die "Java 17+ is needed to run Kafka; install a JDK"
  log "fetching Kafka $KAFKA_VERSION jars from Maven Central (first time only)"
  local logging=reload4j
  ((KAFKA_MAJOR >= 4)) && logging=log4j2 # Kafka 4 dropped log4j 1
  rm -rf "$KAFKA_LIBS.partial"
  mkdir -p "$KAFKA_LIBS.partial"
  mvn -q -B -Dstyle.color=never -f "$SCRIPT_DIR/kafka/pom.xml" -Dkafka.version="$KAFKA_VERSION" -Dkafka.logging=$logging \
    dependency:copy-dependencies -DoutputDirectory="$KAFKA_LIBS.partial" -DincludeScope=runtime
  rm -rf "$KAFKA_LIBS"
  mv "$KAFKA_LIBS.partial" "$KAFKA_LIBS"
}

# The JVM options every Kafka process gets; each logging backend reads its own property
# (3.x: log4j 1 via reload4j, 4.x: log4j2).
kafka_log_opts() { # broker|tools
  local prefix=; [[ $1 == tools ]] && prefix=tools-
  echo "-Dlog4j.configuration=file:$SCRIPT_DIR/kafka/${prefix}log4j.properties -Dlog4j2.configurationFile=$SCRIPT_DIR/kafka/${prefix}log4j2.properties"
}
# A Kafka command-line tool (storage format, ACLs, topics, features); warnings go to stderr.
# shellcheck disable=SC2046
kafka_tool() { java -Xms64m -Xmx512m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC $(kafka_log_opts tools) -cp "$KAFKA_LIBS/*" "$@"; }

kafka_config() { # node index
  local i=$1 name; name=$(knode "$1")
  local dir=$RUN/$name port cport
  port=$(kafka_port "$i"); cport=$(kafka_controller_port "$i")
  mkdir -p "$dir/data"
  local voters= j first=0 last=$KAFKA_NODES
  ((KAFKA_CONTROLLERS)) && { first=$KAFKA_NODES; last=$KAFKA_PROCS; }
  for ((j = first; j < last; j++)); do voters+="${voters:+,}$((j + 1))@$KAFKA_HOST:$(kafka_controller_port $j)"; done
  local listeners advertised protocols interbroker security=
  if ((SECURE)); then
    listeners="SASL_SSL://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport"
    advertised="SASL_SSL://localhost:$port"
    protocols="SASL_SSL:SASL_SSL,CONTROLLER:SSL"
    interbroker=SASL_SSL
    # Clients: SASL_SSL with SCRAM-SHA-512 (server certificate only). Brokers among
    # themselves: the same listener as admin. Controller quorum and broker→controller: mutual
    # TLS with the server certificate (principal User:CN=localhost), so no port takes an
    # unauthenticated connection.
    security="ssl.keystore.type=PEM
ssl.keystore.location=$SECRETS/kafka-keystore.pem
ssl.truststore.type=PEM
ssl.truststore.location=$CERTS/ca.crt
ssl.client.auth=none
listener.name.controller.ssl.client.auth=required
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"admin\" password=\"$(secret kafka-admin)\";
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:admin;User:CN=localhost"
  else
    listeners="PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport"
    advertised="PLAINTEXT://127.0.0.1:$port"
    protocols="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
    interbroker=PLAINTEXT
  fi
  if [[ -n ${ONCEFLOW_KAFKA_PROXY_LISTENERS:-} ]]; then
    local k=0 pair
    IFS=',' read -ra pairs <<<"$ONCEFLOW_KAFKA_PROXY_LISTENERS"
    for pair in "${pairs[@]}"; do
      [[ $pair =~ ^([0-9]+):([0-9]+)$ ]] || die "ONCEFLOW_KAFKA_PROXY_LISTENERS: '$pair' is not <listenPort>:<advertisedPort>"
      listeners+=",PROXIED$k://127.0.0.1:${BASH_REMATCH[1]}"
      advertised+=",PROXIED$k://127.0.0.1:${BASH_REMATCH[2]}"
      protocols+=",PROXIED$k:PLAINTEXT"
      k=$((k + 1))
    done
  fi
  local replication
  if ((KAFKA_NODES == 1)); then
    replication="offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1"
  else
    replication="default.replication.factor=3
min.insync.replicas=2
offsets.topic.replication.factor=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
unclean.leader.election.enable=false"
  fi
  local roles=broker,controller node_listeners
  node_listeners="listeners=$listeners
advertised.listeners=$advertised
inter.broker.listener.name=$interbroker"
  if is_controller_only "$i"; then
    roles=controller
    node_listeners="listeners=CONTROLLER://127.0.0.1:$cport"
  elif ((KAFKA_CONTROLLERS)); then
    roles=broker
    node_listeners="listeners=${listeners/,CONTROLLER:\/\/127.0.0.1:$cport/}
advertised.listeners=$advertised
inter.broker.listener.name=$interbroker"
  fi
  (umask 077; cat >"$dir/server.properties" <<EOF
process.roles=$roles
node.id=$((i + 1))
controller.quorum.voters=$voters
$node_listeners
controller.listener.names=CONTROLLER
listener.security.protocol.map=$protocols
log.dirs=$dir/data
num.partitions=1
auto.create.topics.enable=false
$replication
offsets.topic.num.partitions=4
transaction.state.log.num.partitions=4
group.initial.rebalance.delay.ms=0
# onceflow's redo path makes a short transaction timeout safe; the cap is raised so users may pick long ones.
transaction.max.timeout.ms=3600000
# Abort timed-out transactions promptly (default 10 s) so the LSO is not held back for long.
transaction.abort.timed.out.transaction.cleanup.interval.ms=2000
log.retention.hours=168
${security}
EOF
  )
}

# Formats a node's storage once, with the cluster id every node of this run directory shares
# (and, secured, the SCRAM users: KRaft takes them at format time).
kafka_format() { # node index
  local name; name=$(knode "$1")
  [[ -f $RUN/$name/data/meta.properties ]] && return
  local idf=$RUN/kafka.cluster-id
  [[ -s $idf ]] || kafka_tool kafka.tools.StorageTool random-uuid >"$idf"
  local fmt=(format -t "$(cat "$idf")" -c "$RUN/$name/server.properties" --ignore-formatted) u
  if ((SECURE)); then
    for u in admin onceflow onceflow-nottx; do fmt+=(--add-scram "SCRAM-SHA-512=[name=$u,password=$(secret "kafka-$u")]"); done
  fi
  if ((KAFKA_NODES == 1)); then log "formatting Kafka storage"; else log "formatting Kafka storage of $name"; fi
  kafka_tool kafka.tools.StorageTool "${fmt[@]}" >>"$(logfile "$name")" 2>&1 ||
    die "formatting $name's storage failed; log: $(logfile "$name")"
}

# The secured stack's Kafka key material and CLI client configs.
kafka_secure_files() {
  ((SECURE)) || return 0
  (umask 077; cat "$CERTS/server.key" "$CERTS/server.crt" >"$SECRETS/kafka-keystore.pem")
  local u
  for u in admin onceflow onceflow-nottx; do
    (umask 077; cat >"$SECRETS/kafka-$u.properties" <<EOF
# Kafka CLI client config for User:$u on the secured stack (--command-config / --producer.config).
bootstrap.servers=$(kafka_brokers)
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="$u" password="$(secret "kafka-$u")";
ssl.truststore.type=PEM
ssl.truststore.location=$CERTS/ca.crt
EOF
    )
  done
}

# One node layout per run directory: refuse to start one while the other runs.
kafka_layout_check() {
  local i was
  was=$(saved ONCEFLOW_KAFKA_CONTROLLERS); was=${was:-0}
  if ((was != KAFKA_CONTROLLERS)) && [[ -f $RUN/$(knode 0)/data/meta.properties ]]; then
    die "$RUN was formatted with ONCEFLOW_KAFKA_CONTROLLERS=$was; use another ONCEFLOW_RUN_DIR for $KAFKA_CONTROLLERS, or remove that directory's kafka-* folders"
  fi
  if ((KAFKA_NODES == 1)); then
    for i in 0 1 2; do alive "kafka-$i" && die "a 3-node Kafka runs in $RUN (kafka-$i is up); stop it first (ONCEFLOW_KAFKA_NODES=3 scripts/services.sh down kafka) or set ONCEFLOW_KAFKA_NODES=3"; done
  else
    alive kafka && die "a single-node Kafka runs in $RUN; stop it first (ONCEFLOW_KAFKA_NODES=1 scripts/services.sh down kafka) or set ONCEFLOW_KAFKA_NODES=1"
  fi
  return 0
}

up_kafka() { # node indexes
  install_kafka
  if [[ -n ${ONCEFLOW_KAFKA_PROXY_LISTENERS:-} ]]; then
    ((KAFKA_NODES == 1)) || die "ONCEFLOW_KAFKA_PROXY_LISTENERS works with one Kafka node only (ONCEFLOW_KAFKA_NODES=1): the proxied listeners advertise one broker"
    ((SECURE)) && die "ONCEFLOW_KAFKA_PROXY_LISTENERS adds plaintext listeners; the secured stack refuses them"
  fi
  kafka_layout_check
  secure_prepare
  kafka_secure_files
  mkdir -p "$RUN"
  printf 'ONCEFLOW_KAFKA_NODES=%s\nONCEFLOW_KAFKA_CONTROLLERS=%s\nONCEFLOW_KAFKA_VERSION=%s\n' "$KAFKA_NODES" "$KAFKA_CONTROLLERS" "$KAFKA_VERSION" >"$KAFKA_CONF"
  local i name fresh=0
  # Start every stopped node first, then wait: a node of a 3-node cluster opens its client
  # port only once the quorum has a leader, which needs a second node.
  for i in "$@"; do
    name=$(knode "$i")
    if alive "$name"; then continue; fi
    if is_controller_only "$i"; then check_ports_free "$name" "$(kafka_controller_port "$i")"; else check_ports_free "$name" "$(kafka_port "$i")" "$(kafka_controller_port "$i")"; fi
    kafka_config "$i"
    [[ -f $RUN/$name/data/meta.properties ]] || fresh=1
    kafka_format "$i"
    if ((KAFKA_NODES == 1)); then log "starting Kafka $KAFKA_VERSION"; elif is_controller_only "$i"; then log "starting Kafka $KAFKA_VERSION controller $((i - KAFKA_NODES)) of $KAFKA_CONTROLLERS ($name)"; else log "starting Kafka $KAFKA_VERSION node $i of $KAFKA_NODES ($name)"; fi
    # shellcheck disable=SC2046
    spawn "$name" java -Xms256m -Xmx1g -XX:+UseG1GC "-XX:ErrorFile=$RUN/$name/hs_err_pid%p.log" $(kafka_log_opts broker) \
      -cp "$KAFKA_LIBS/*" kafka.Kafka "$RUN/$name/server.properties"
  done
  for i in "$@"; do wait_for "$(knode "$i")" 120 port_open "$(kafka_client_or_controller_port "$i")"; done
  if ((SECURE)) && { ((fresh)) || [[ ! -f $RUN/kafka-demo-granted ]]; }; then
    # The demo pipeline (scripts/demo.ts): onceflow with, onceflow-nottx without the transactional-id ACL.
    grant_acls flink-compare-demo flink_input flink_output onceflow 1
    grant_acls flink-compare-demo flink_input flink_output onceflow-nottx 0
    touch "$RUN/kafka-demo-granted"
  fi
}

# ACLs for one onceflow pipeline, named as src/spec.ts names things.
grant_acls() { # pipeline sources(comma-separated) output principal with-txn(1|0)
  local pipeline=$1 sources=$2 output=$3 principal=$4 txn=$5 t
  local admin=$SECRETS/kafka-admin.properties
  [[ -f $admin ]] || die "no $admin: start the secured Kafka first (scripts/services.sh up --secure kafka)"
  port_open "$KAFKA_PORT" || die "the secured Kafka is not up on $KAFKA_PORT (scripts/services.sh up --secure kafka)"
  local acl=(kafka_tool "$ACL_CLASS" --bootstrap-server "$(kafka_brokers)" --command-config "$admin" --add --allow-principal "User:$principal")
  local srcs=()
  IFS=',' read -ra list <<<"$sources"
  for t in "${list[@]}"; do srcs+=(--topic "$t"); done
  local progress=onceflow.progress.$pipeline dlq=$pipeline.dlq
  local what="transactional ids onceflow.$pipeline.*"
  ((txn)) || what="no transactional id"
  log "granting User:$principal the ACLs of pipeline '$pipeline' (sources $sources, output $output, dead letters $dlq, progress $progress, group onceflow.$pipeline, $what)"
  # Sources and the consumer group: read and describe.
  "${acl[@]}" --operation Read --operation Describe "${srcs[@]}" --group "onceflow.$pipeline" >/dev/null
  # Output, dead-letter and progress topics: created if missing, written, read back.
  "${acl[@]}" --operation Read --operation Write --operation Describe --operation Create \
    --topic "$output" --topic "$dlq" --topic "$progress" >/dev/null
  # The progress topic grows with the source partitions (createPartitions).
  "${acl[@]}" --operation Alter --topic "$progress" >/dev/null
  if ((txn)); then
    "${acl[@]}" --operation Write --operation Describe --transactional-id "onceflow.$pipeline." --resource-pattern-type prefixed >/dev/null
  fi
}

grant_cmd() {
  local principal=onceflow txn=1 pos=()
  while (($#)); do
    case $1 in
      --principal) principal=${2:?--principal needs a name}; shift 2 ;;
      --principal=*) principal=${1#*=}; shift ;;
      --no-txn) txn=0; shift ;;
      -*) die "grant: unknown option '$1'" ;;
      *) pos+=("$1"); shift ;;
    esac
  done
  ((${#pos[@]} == 3)) || die "usage: scripts/services.sh grant <pipeline> <source-topic>[,<source-topic>...] <output-topic> [--principal <name>] [--no-txn]"
  local n
  for n in "${pos[@]}"; do [[ $n =~ ^[A-Za-z0-9._,-]+$ ]] || die "grant: '$n' is not a Kafka topic or pipeline name"; done
  install_kafka
  grant_acls "${pos[0]}" "${pos[1]}" "${pos[2]}" "$principal" "$txn"
  log "granted"
}

# ---------------------------------------------------------------- MariaDB
install_mariadb() {
  command -v mariadbd >/dev/null && command -v mariadb >/dev/null && return
  command -v apt-get >/dev/null || die "MariaDB is missing and there is no apt-get; install mariadb-server 10.5+ yourself"
  log "installing MariaDB from Debian packages (first time only)"
  if ! apt-cache show mariadb-server >/dev/null 2>&1; then apt-get update -qq; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mariadb-server mariadb-client >/dev/null
}

mysql_root() { mariadb --no-defaults --socket="$RUN/mariadb/mysqld.sock" -uroot "$@"; }

mysql_password() {
  if ((SECURE)); then secret mysql-onceflow; return; fi
  local f=$RUN/mariadb/password
  if [[ -n ${ONCEFLOW_MYSQL_PASSWORD:-} ]]; then printf '%s' "$ONCEFLOW_MYSQL_PASSWORD"; return; fi
  if [[ ! -s $f ]]; then (umask 077; mkdir -p "$RUN/mariadb"; head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$f"); fi
  cat "$f"
}

up_mariadb() {
  install_mariadb
  local dir=$RUN/mariadb
  if alive mariadb; then port_open $MYSQL_PORT && return; else check_ports_free mariadb $MYSQL_PORT; fi
  secure_prepare
  if ! alive mariadb; then
    mkdir -p "$dir"
    if [[ ! -d $dir/data/mysql ]]; then
      log "initialising MariaDB data directory"
      mariadb-install-db --no-defaults --datadir="$dir/data" --user="$(id -un)" \
        --auth-root-authentication-method=socket >>"$(logfile mariadb)" 2>&1
    fi
    local tls=()
    # Secured: TLS with the server certificate, and no TCP connection without it (the root
    # login over the Unix socket counts as secure transport).
    ((SECURE)) && tls=(--ssl-ca="$CERTS/ca.crt" --ssl-cert="$CERTS/server.crt" --ssl-key="$CERTS/server.key" --require-secure-transport=ON)
    log "starting MariaDB"
    spawn mariadb mariadbd --no-defaults --datadir="$dir/data" --socket="$dir/mysqld.sock" \
      --port=$MYSQL_PORT --bind-address=127.0.0.1 --user="$(id -un)" --pid-file="$dir/mariadbd.pid" \
      --log-error="$(logfile mariadb)" --innodb-buffer-pool-size=256M --max-connections=500 \
      --skip-name-resolve --character-set-server=utf8mb4 --collation-server=utf8mb4_bin ${tls[@]+"${tls[@]}"}
  fi
  wait_for mariadb 60 mysql_root -e 'SELECT 1'
  local pw require=; pw=$(mysql_password)
  ((SECURE)) && require=' REQUIRE SSL'
  mysql_root <<SQL
CREATE DATABASE IF NOT EXISTS \`$MYSQL_DB\`;
CREATE USER IF NOT EXISTS '$MYSQL_USER'@'127.0.0.1' IDENTIFIED BY '$pw'$require;
CREATE USER IF NOT EXISTS '$MYSQL_USER'@'localhost' IDENTIFIED BY '$pw'$require;
ALTER USER '$MYSQL_USER'@'127.0.0.1' IDENTIFIED BY '$pw'$require;
ALTER USER '$MYSQL_USER'@'localhost' IDENTIFIED BY '$pw'$require;
GRANT ALL PRIVILEGES ON \`$MYSQL_DB\`.* TO '$MYSQL_USER'@'127.0.0.1';
GRANT ALL PRIVILEGES ON \`$MYSQL_DB\`.* TO '$MYSQL_USER'@'localhost';
FLUSH PRIVILEGES;
SQL
  wait_for mariadb 30 port_open $MYSQL_PORT
}

# ---------------------------------------------------------------- common
write_env() {
  mkdir -p "$RUN"
  if ((SECURE)); then write_secure_env; return; fi
  (umask 077; cat >"$ENV_FILE" <<EOF
# Written by scripts/services.sh; read by onceflow's config when the variables are not set.
ONCEFLOW_TEMPORAL_ADDRESS=127.0.0.1:$TEMPORAL_PORT
ONCEFLOW_TEMPORAL_NAMESPACE=default
ONCEFLOW_TEMPORAL_UI=http://127.0.0.1:$TEMPORAL_UI_PORT
ONCEFLOW_KAFKA_BROKERS=$(kafka_brokers)
ONCEFLOW_MYSQL_HOST=127.0.0.1
ONCEFLOW_MYSQL_PORT=$MYSQL_PORT
ONCEFLOW_MYSQL_DATABASE=$MYSQL_DB
ONCEFLOW_MYSQL_USER=$MYSQL_USER
ONCEFLOW_MYSQL_PASSWORD=$(mysql_password)
ONCEFLOW_KAFKA_LIBS=$KAFKA_LIBS
ONCEFLOW_TEMPORAL_BIN=$TEMPORAL_BIN
EOF
  )
}

# The secured stack: no password in the env files, only the paths of the files holding them.
secure_env() { # kafka-user kafka-password-file
  cat <<EOF
ONCEFLOW_TEMPORAL_ADDRESS=127.0.0.1:$TEMPORAL_PORT
ONCEFLOW_TEMPORAL_NAMESPACE=default
ONCEFLOW_TEMPORAL_UI=http://127.0.0.1:$TEMPORAL_UI_PORT
ONCEFLOW_TEMPORAL_TLS=true
ONCEFLOW_TEMPORAL_TLS_CA_FILE=$CERTS/ca.crt
ONCEFLOW_TEMPORAL_TLS_CERT_FILE=$CERTS/client.crt
ONCEFLOW_TEMPORAL_TLS_KEY_FILE=$CERTS/client.key
ONCEFLOW_TEMPORAL_TLS_SERVER_NAME=localhost
ONCEFLOW_KAFKA_BROKERS=$(kafka_brokers)
ONCEFLOW_KAFKA_SSL=true
ONCEFLOW_KAFKA_SSL_CA_FILE=$CERTS/ca.crt
ONCEFLOW_KAFKA_SASL_MECHANISM=scram-sha-512
ONCEFLOW_KAFKA_SASL_USERNAME=$1
ONCEFLOW_KAFKA_SASL_PASSWORD_FILE=$2
ONCEFLOW_MYSQL_HOST=localhost
ONCEFLOW_MYSQL_PORT=$MYSQL_PORT
ONCEFLOW_MYSQL_DATABASE=$MYSQL_DB
ONCEFLOW_MYSQL_USER=$MYSQL_USER
ONCEFLOW_MYSQL_PASSWORD_FILE=$(secret_file mysql-onceflow)
ONCEFLOW_MYSQL_SSL=true
ONCEFLOW_MYSQL_SSL_CA_FILE=$CERTS/ca.crt
ONCEFLOW_KAFKA_LIBS=$KAFKA_LIBS
ONCEFLOW_TEMPORAL_BIN=$TEMPORAL_BIN
EOF
}

write_secure_env() {
  local u
  for u in kafka-admin kafka-onceflow kafka-onceflow-nottx mysql-onceflow; do secret "$u" >/dev/null; done
  (umask 077
    { echo "# Written by scripts/services.sh --secure: the pipeline's settings (User:onceflow). Passwords are in the *_FILE files."
      secure_env onceflow "$(secret_file kafka-onceflow)"; } >"$ENV_FILE"
    { echo "# Written by scripts/services.sh --secure: test set-up with Kafka admin rights (super user). Not for pipelines."
      secure_env admin "$(secret_file kafka-admin)"
      echo "ONCEFLOW_SECURE_NOTTX_USERNAME=onceflow-nottx"
      echo "ONCEFLOW_SECURE_NOTTX_PASSWORD_FILE=$(secret_file kafka-onceflow-nottx)"
      echo "ONCEFLOW_SECURE_KAFKA_ADMIN_CONFIG=$SECRETS/kafka-admin.properties"; } >"$ADMIN_ENV_FILE")
  chmod 600 "$ENV_FILE" "$ADMIN_ENV_FILE"
}

stop_one() { # name signal port
  local name=$1 sig=$2 port=$3 p
  p=$(pid_of "$name")
  if ! ours "$p" "$RUN"; then rm -f "$RUN/$name/pid"; return; fi
  stop_group "$p" "$name" "$port" "$sig"
  rm -f "$RUN/$name/pid"
}

stop_service() { # service-token signal (Kafka nodes: stop_kafka_nodes)
  local sig=$2
  case $1 in
    temporal)
      if ((SECURE)); then
        if [[ $sig == KILL ]]; then temporal_secure kill; else temporal_secure down; fi
      else stop_one temporal "$sig" $TEMPORAL_PORT; fi ;;
    mariadb) stop_one mariadb "$sig" $MYSQL_PORT ;;
  esac
}

# Kafka nodes are signalled together, then awaited: a node of a 3-node cluster stopping alone
# waits for the quorum, which the next node to stop would leave.
# Whether a pid is ours is asked before the signal: a process that is exiting has no command
# line left to read, so asking after it would take a dying node for another process.
stop_kafka_nodes() { # signal node-indexes...
  local sig=$1 i p name; shift
  local -A signalled=()
  for i in "$@"; do
    p=$(pid_of "$(knode "$i")")
    if ours "$p" "$RUN"; then
      signal_group "$p" "$(knode "$i")" "$sig"
      signalled[$i]=$p
    fi
  done
  for i in "$@"; do
    name=$(knode "$i")
    [[ -n ${signalled[$i]:-} ]] && wait_stopped "${signalled[$i]}" "$name" "$(kafka_client_or_controller_port "$i")"
    rm -f "$RUN/$name/pid"
  done
}

status_kafka_node() { # index
  local i=$1 name port; name=$(knode "$1"); port=$(kafka_client_or_controller_port "$1")
  local extra="(Kafka $KAFKA_VERSION, KRaft"
  if is_controller_only "$i"; then extra+=", dedicated controller $((i - KAFKA_NODES)) of $KAFKA_CONTROLLERS"
  elif ((KAFKA_CONTROLLERS)); then extra+=", broker $i of $KAFKA_NODES (controllers on nodes of their own)"
  elif ((KAFKA_NODES > 1)); then extra+=", node $i of $KAFKA_NODES, controller :$(kafka_controller_port "$i")"; fi
  ((SECURE)) && extra+=", SASL_SSL SCRAM-SHA-512"
  extra+=")"
  if alive "$name" && port_open "$port"; then
    echo "$(printf '%-9s' "$name") up    $KAFKA_HOST:$port  $extra  log $(logfile "$name")"
    return 0
  fi
  if port_open "$port"; then echo "$(printf '%-9s' "$name") foreign  port $port is held by a process that is not onceflow's"; else echo "$(printf '%-9s' "$name") down"; fi
  return 1
}

status_one() {
  local name=$1 port
  case $name in
    kafka:*) status_kafka_node "${name#kafka:}"; return ;;
    temporal)
      if ((SECURE)); then
        if [[ ! -f $TEMPORAL_SERVER_SH ]]; then echo "temporal  missing  scripts/temporal-server.sh (the secured Temporal) is not in this checkout"; return 1; fi
        temporal_secure status; return
      fi
      port=$TEMPORAL_PORT ;;
    mariadb) port=$MYSQL_PORT ;;
  esac
  if alive "$name" && port_open "$port"; then
    case $name in
      temporal) echo "temporal  up    127.0.0.1:$TEMPORAL_PORT  Web UI http://127.0.0.1:$TEMPORAL_UI_PORT  log $(logfile temporal)" ;;
      mariadb)
        if ((SECURE)); then echo "mariadb   up    localhost:$MYSQL_PORT  database $MYSQL_DB user $MYSQL_USER, TLS required (password file in $ENV_FILE)  log $(logfile mariadb)"
        else echo "mariadb   up    127.0.0.1:$MYSQL_PORT  database $MYSQL_DB user $MYSQL_USER (password in $ENV_FILE)  log $(logfile mariadb)"; fi ;;
    esac
    return 0
  fi
  if port_open "$port"; then echo "$(printf '%-9s' "$name") foreign  port $port is held by a process that is not onceflow's"; else echo "$(printf '%-9s' "$name") down"; fi
  return 1
}

# Service names → tokens: temporal, mariadb, kafka:<node> (each once, in the order given).
pick() {
  local s i
  (($#)) || set -- "${ALL[@]}"
  for s in "$@"; do
    case $s in
      temporal | mariadb) echo "$s" ;;
      kafka) for ((i = 0; i < KAFKA_PROCS; i++)); do echo "kafka:$i"; done ;;
      kafka-[0-9])
        i=${s#kafka-}
        ((i < KAFKA_PROCS)) || die "no service '$s': this stack's Kafka has $KAFKA_PROCS node(s) (ONCEFLOW_KAFKA_NODES, ONCEFLOW_KAFKA_CONTROLLERS; saved in $KAFKA_CONF)"
        echo "kafka:$i" ;;
      --hard) ;;
      *) die "unknown service '$s' (expected temporal, kafka, kafka-<node>, mariadb)" ;;
    esac
  done | awk '!seen[$0]++'
}

# Runs "<verb>_<service>" per token; the Kafka nodes named go to one up_kafka call.
up_services() {
  local s knodes=() kdone=0 failed=0
  for s in "$@"; do [[ $s == kafka:* ]] && knodes+=("${s#kafka:}"); done
  for s in "$@"; do
    case $s in
      temporal) if ((SECURE)); then up_temporal || failed=1; else up_temporal; fi ;;
      mariadb) up_mariadb ;;
      kafka:*) ((kdone)) || up_kafka "${knodes[@]}"; kdone=1 ;;
    esac
  done
  return $failed
}

cmd=${1:-status}; shift || true
case $cmd in
  up)
    out=$(pick "$@") || exit 1
    mapfile -t svcs <<<"$out"
    rc=0
    up_services "${svcs[@]}" || rc=1
    write_env
    for s in "${svcs[@]}"; do status_one "$s" || rc=1; done
    exit $rc
    ;;
  install)
    out=$(pick "$@") || exit 1
    mapfile -t svcs <<<"$out"
    for s in "${svcs[@]}"; do
      case $s in
        temporal) install_temporal; if ((SECURE)) && [[ -f $TEMPORAL_SERVER_SH ]]; then temporal_secure build; fi ;;
        mariadb) install_mariadb ;;
        kafka:*) install_kafka ;;
      esac
    done
    if [[ " ${svcs[*]} " == *" kafka:"* ]]; then log "Kafka $KAFKA_VERSION jars: $KAFKA_LIBS"; fi
    ;;
  down | kill)
    [[ $cmd == kill ]] && { (($#)) || die "kill needs a service name"; }
    sig=TERM; [[ $cmd == kill ]] && sig=KILL
    out=$(pick "$@") || exit 1
    mapfile -t svcs <<<"$out"
    knodes=()
    for s in "${svcs[@]}"; do [[ $s == kafka:* ]] && knodes+=("${s#kafka:}"); done
    rc=0
    for s in "${svcs[@]}"; do [[ $s == kafka:* ]] || stop_service "$s" $sig || rc=1; done
    ((${#knodes[@]})) && stop_kafka_nodes $sig "${knodes[@]}"
    exit $rc
    ;;
  restart)
    out=$(pick "$@") || exit 1
    mapfile -t svcs <<<"$out"
    sig=TERM; for a in "$@"; do [[ $a == --hard ]] && sig=KILL; done
    knodes=()
    for s in "${svcs[@]}"; do [[ $s == kafka:* ]] && knodes+=("${s#kafka:}"); done
    for s in "${svcs[@]}"; do [[ $s == kafka:* ]] || stop_service "$s" $sig; done
    ((${#knodes[@]})) && stop_kafka_nodes $sig "${knodes[@]}"
    rc=0
    up_services "${svcs[@]}" || rc=1
    write_env
    exit $rc
    ;;
  status)
    rc=0
    out=$(pick) || exit 1
    mapfile -t svcs <<<"$out"
    for s in "${svcs[@]}"; do status_one "$s" || rc=1; done
    exit $rc
    ;;
  diagnose)
    out=$(pick "$@") || exit 1
    mapfile -t svcs <<<"$out"
    for s in "${svcs[@]}"; do
      status_one "$s" && continue
      case $s in kafka:*) n=$(knode "${s#kafka:}") ;; *) n=$s ;; esac
      p=$(pid_of "$n")
      if [[ -n $p ]]; then echo "  pid file names $p, $(if ours "$p" "$RUN"; then echo 'which is alive'; elif kill -0 "$p" 2>/dev/null; then echo 'now another process (a stale pid file)'; else echo 'which is gone'; fi)"; else echo "  no pid file (never started here, or stopped by scripts/services.sh down or kill)"; fi
      if [[ -f $(logfile "$n") ]]; then
        echo "  $(logfile "$n") since its last start: the last warnings and errors, then the last lines"
        since=$(awk -v m="$START_MARK" 'index($0, m) == 1 {n = 0} {l[n++] = $0} END {for (i = 0; i < n; i++) print l[i]}' "$(logfile "$n")")
        { head -n 1 <<<"$since"; tail -n +2 <<<"$since" | grep -aiE 'warn|error|fatal|exception|out of memory|halt' | tail -n 15; echo '...'; tail -n 6 <<<"$since"; } | cut -c1-300 | sed 's/^/    /'
      fi
      for f in "$RUN/$n"/hs_err_pid*.log; do [[ -f $f ]] && { echo "  JVM crash file $f:"; head -n 15 "$f" | sed 's/^/    /'; }; done
    done
    d=$RUN; while [[ ! -d $d ]]; do d=$(dirname "$d"); done
    echo "disk: $(df -h "$d" | awk 'NR == 2 {print $4 " free of " $2 " on " $6}')   memory: $(free -m | awk '/^Mem:/ {print $7 " MiB available of " $2}')"
    ;;
  env) echo "$ENV_FILE" ;;
  pid)
    out=$(pick "${1:?pid needs a service}") || exit 1
    mapfile -t svcs <<<"$out"
    rc=0
    for s in "${svcs[@]}"; do
      case $s in kafka:*) n=$(knode "${s#kafka:}") ;; *) n=$s ;; esac
      if alive "$n"; then pid_of "$n"; else rc=1; fi
    done
    exit $rc
    ;;
  grant) grant_cmd "$@" ;;
  bin)
    [[ ${1:-} == temporal ]] || die "bin: expected 'temporal' (the only tool whose path is asked for), got '${1:-}'"
    echo "$TEMPORAL_BIN"
    ;;
  *) die "unknown command '$cmd' (expected up, install, down, kill, restart, status, diagnose, env, pid, bin or grant)" ;;
esac
