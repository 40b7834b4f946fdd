#!/usr/bin/env bash
# onceflow's three real services on loopback, without Docker:
#   Temporal dev server + Web UI (Temporal CLI built with `go install`),
#   Apache Kafka (KRaft, single node, jars from Maven Central),
#   MariaDB (Debian package).
#
#   scripts/services.sh up     [temporal|kafka|mariadb ...]   install if missing, start if stopped, wait
#   scripts/services.sh down   [temporal|kafka|mariadb ...]   stop cleanly (SIGTERM, then SIGKILL after 60 s)
#   scripts/services.sh kill   <service ...>                  SIGKILL (fault injection)
#   scripts/services.sh restart <service ...> [--hard]        down (or kill with --hard), then up
#   scripts/services.sh status                                one line per service; exit 0 iff all up
#   scripts/services.sh env                                   print the endpoints/credentials file path
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
# ONCEFLOW_KAFKA_PROXY_LISTENERS=<listenPort>:<advertisedPort>[,...] adds broker listeners
# PROXIED0, PROXIED1, ... on 127.0.0.1:<listenPort> that advertise 127.0.0.1:<advertisedPort>,
# where a TCP proxy (the fault campaign's) forwards to <listenPort>. A client bootstrapping
# through the proxy is then told to keep talking to the proxy. Unset: no extra listener.
set -euo pipefail

ONCEFLOW_HOME=${ONCEFLOW_HOME:-$HOME/.cache/onceflow}
RUN=${ONCEFLOW_RUN_DIR:-$ONCEFLOW_HOME/run}
BASE=${ONCEFLOW_PORT_BASE:-}
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

TEMPORAL_VERSION=${ONCEFLOW_TEMPORAL_CLI_VERSION:-v1.5.1}
TEMPORAL_BIN=$ONCEFLOW_HOME/temporal-$TEMPORAL_VERSION/temporal
TEMPORAL_PORT=${BASE:+$((BASE + 233))}; TEMPORAL_PORT=${TEMPORAL_PORT:-7233}
TEMPORAL_UI_PORT=${BASE:+$((BASE + 234))}; TEMPORAL_UI_PORT=${TEMPORAL_UI_PORT:-8233}

KAFKA_VERSION=${ONCEFLOW_KAFKA_VERSION:-3.9.1}
KAFKA_LIBS=$ONCEFLOW_HOME/kafka-$KAFKA_VERSION/libs
KAFKA_PORT=${BASE:+$((BASE + 92))}; KAFKA_PORT=${KAFKA_PORT:-9092}
KAFKA_CONTROLLER_PORT=${BASE:+$((BASE + 93))}; KAFKA_CONTROLLER_PORT=${KAFKA_CONTROLLER_PORT:-9093}

MYSQL_PORT=${BASE:+$((BASE + 306))}; MYSQL_PORT=${MYSQL_PORT:-3306}
MYSQL_DB=onceflow
MYSQL_USER=onceflow

ALL=(temporal kafka mariadb)
ENV_FILE=$RUN/services.env

log() { printf '[services] %s\n' "$*" >&2; }
die() { printf '[services] error: %s\n' "$*" >&2; exit 1; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
pid_of() { local f=$RUN/$1/pid; [[ -f $f ]] && cat "$f" || true; }
# shellcheck source=scripts/process.sh
source "$(dirname "${BASH_SOURCE[0]}")/process.sh"
alive() { local p; p=$(pid_of "$1"); [[ -n $p ]] && kill -0 "$p" 2>/dev/null; }
main_port() { case $1 in temporal) echo $TEMPORAL_PORT ;; kafka) echo $KAFKA_PORT ;; mariadb) echo $MYSQL_PORT ;; esac; }
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
  done
}

spawn() { # name command...  (own session, so a kill reaches the whole tree)
  local name=$1; shift
  mkdir -p "$RUN/$name"
  setsid "$@" >>"$(logfile "$name")" 2>&1 </dev/null &
  echo $! >"$RUN/$name/pid"
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

up_temporal() {
  install_temporal
  if alive temporal; then temporal_ready && return; else check_ports_free temporal $TEMPORAL_PORT $TEMPORAL_UI_PORT; fi
  if ! alive temporal; then
    mkdir -p "$RUN/temporal"
    log "starting Temporal dev server"
    # Search attributes used by onceflow (pipeline, partition, epoch, phase) are registered at start.
    # Eager activity execution (off by default in Temporal): an activity scheduled by a workflow
    # task is handed back in the response to that task's completion, skipping a matching round
    # trip per activity (docs/performance.md measures it).
    spawn temporal "$TEMPORAL_BIN" server start-dev \
      --dynamic-config-value system.enableActivityEagerExecution=true \
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
  mkdir -p "$KAFKA_LIBS"
  mvn -q -B -f "$SCRIPT_DIR/kafka/pom.xml" -Dkafka.version="$KAFKA_VERSION" \
    dependency:copy-dependencies -DoutputDirectory="$KAFKA_LIBS" -DincludeScope=runtime
}

kafka_config() {
  local dir=$RUN/kafka
  mkdir -p "$dir/data"
  local listeners="PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT"
  local advertised="PLAINTEXT://127.0.0.1:$KAFKA_PORT"
  local protocols="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
  if [[ -n ${ONCEFLOW_KAFKA_PROXY_LISTENERS:-} ]]; then
    local i=0 pair
    IFS=',' read -ra pairs <<<"$ONCEFLOW_KAFKA_PROXY_LISTENERS"
    for pair in "${pairs[@]}"; do
      [[ $pair =~ ^([0-9]+):([0-9]+)$ ]] || die "ONCEFLOW_KAFKA_PROXY_LISTENERS: '$pair' is not <listenPort>:<advertisedPort>"
      listeners+=",PROXIED$i://127.0.0.1:${BASH_REMATCH[1]}"
      advertised+=",PROXIED$i://127.0.0.1:${BASH_REMATCH[2]}"
      protocols+=",PROXIED$i:PLAINTEXT"
      i=$((i + 1))
    done
  fi
  cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=$listeners
advertised.listeners=$advertised
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=$protocols
log.dirs=$dir/data
num.partitions=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
group.initial.rebalance.delay.ms=0
# onceflow's redo path makes a short transaction timeout safe; the cap is raised so users may pick long ones.
transaction.max.timeout.ms=3600000
# Abort timed-out transactions promptly (default 10 s) so the LSO is not held back for long.
transaction.abort.timed.out.transaction.cleanup.interval.ms=2000
log.retention.hours=168
EOF
  cat >"$dir/log4j.properties" <<EOF
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.org.apache.kafka.controller=WARN
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.log.LogCleaner=WARN
EOF
}

kafka_java() { java -Xms256m -Xmx1g -Dlog4j.configuration="file:$RUN/kafka/log4j.properties" -cp "$KAFKA_LIBS/*" "$@"; }

up_kafka() {
  install_kafka
  if alive kafka; then port_open $KAFKA_PORT && return; else check_ports_free kafka $KAFKA_PORT $KAFKA_CONTROLLER_PORT; fi
  if ! alive kafka; then
    kafka_config
    if [[ ! -f $RUN/kafka/data/meta.properties ]]; then
      log "formatting Kafka storage"
      kafka_java kafka.tools.StorageTool format -t "$(kafka_java kafka.tools.StorageTool random-uuid)" \
        -c "$RUN/kafka/server.properties" --ignore-formatted >>"$(logfile kafka)" 2>&1
    fi
    log "starting Kafka $KAFKA_VERSION"
    spawn kafka java -Xms256m -Xmx1g -XX:+UseG1GC -Dlog4j.configuration="file:$RUN/kafka/log4j.properties" \
      -cp "$KAFKA_LIBS/*" kafka.Kafka "$RUN/kafka/server.properties"
  fi
  wait_for kafka 120 port_open $KAFKA_PORT
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
  local f=$RUN/mariadb/password
  if [[ -n ${ONCEFLOW_MYSQL_PASSWORD:-} ]]; then printf '%s' "$ONCEFLOW_MYSQL_PASSWORD"; return; fi
  if [[ ! -s $f ]]; then (umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$f"); fi
  cat "$f"
}

up_mariadb() {
  install_mariadb
  local dir=$RUN/mariadb
  if alive mariadb; then port_open $MYSQL_PORT && return; else check_ports_free mariadb $MYSQL_PORT; fi
  if ! alive mariadb; then
    mkdir -p "$dir"
    if [[ ! -d $dir/data/mysql ]]; then
      log "initialising MariaDB data directory"
      mariadb-install-db --no-defaults --datadir="$dir/data" --user="$(id -un)" \
        --auth-root-authentication-method=socket >>"$(logfile mariadb)" 2>&1
    fi
    log "starting MariaDB"
    spawn mariadb mariadbd --no-defaults --datadir="$dir/data" --socket="$dir/mysqld.sock" \
      --port=$MYSQL_PORT --bind-address=127.0.0.1 --user="$(id -un)" --pid-file="$dir/mariadbd.pid" \
      --log-error="$(logfile mariadb)" --innodb-buffer-pool-size=256M --max-connections=500 \
      --skip-name-resolve --character-set-server=utf8mb4 --collation-server=utf8mb4_bin
  fi
  wait_for mariadb 60 mysql_root -e 'SELECT 1'
  local pw; pw=$(mysql_password)
  mysql_root <<SQL
CREATE DATABASE IF NOT EXISTS \`$MYSQL_DB\`;
CREATE USER IF NOT EXISTS '$MYSQL_USER'@'127.0.0.1' IDENTIFIED BY '$pw';
CREATE USER IF NOT EXISTS '$MYSQL_USER'@'localhost' IDENTIFIED BY '$pw';
ALTER USER '$MYSQL_USER'@'127.0.0.1' IDENTIFIED BY '$pw';
ALTER USER '$MYSQL_USER'@'localhost' IDENTIFIED BY '$pw';
GRANT ALL PRIVILEGES ON \`$MYSQL_DB\`.* TO '$MYSQL_USER'@'127.0.0.1';
GRANT ALL PRIVILEGES ON \`$MYSQL_DB\`.* TO '$MYSQL_USER'@'localhost';
FLUSH PRIVILEGES;
SQL
  wait_for mariadb 30 port_open $MYSQL_PORT
}

# ---------------------------------------------------------------- common
write_env() {
  mkdir -p "$RUN"
  (umask 077; cat >"$ENV_FILE" <<EOF
# Written by scripts/services.sh; read by onceflow's config when the variables are not set.
ONCEFLOW_TEMPORAL_ADDRESS=127.0.0.1:$TEMPORAL_PORT
ONCEFLOW_TEMPORAL_NAMESPACE=default
ONCEFLOW_KAFKA_BROKERS=127.0.0.1:$KAFKA_PORT
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

stop_one() { # name signal
  local name=$1 sig=$2 p
  p=$(pid_of "$name")
  if [[ -z $p ]] || ! kill -0 "$p" 2>/dev/null; then rm -f "$RUN/$name/pid"; return; fi
  stop_group "$p" "$name" "$(main_port "$name")" "$sig"
  rm -f "$RUN/$name/pid"
}

status_one() {
  local name=$1 port; port=$(main_port "$name")
  if alive "$name" && port_open "$port"; then
    case $name in
      temporal) echo "temporal  up    127.0.0.1:$TEMPORAL_PORT  Web UI http://127.0.0.1:$TEMPORAL_UI_PORT  log $(logfile temporal)" ;;
      kafka) echo "kafka     up    127.0.0.1:$KAFKA_PORT  (Kafka $KAFKA_VERSION, KRaft)  log $(logfile kafka)" ;;
      mariadb) echo "mariadb   up    127.0.0.1:$MYSQL_PORT  database $MYSQL_DB user $MYSQL_USER (password in $ENV_FILE)  log $(logfile mariadb)" ;;
    esac
    return 0
  fi
  if port_open "$port"; then echo "$(printf '%-9s' "$name") foreign  port $port is held by a process that is not onceflow's"; else echo "$(printf '%-9s' "$name") down"; fi
  return 1
}

pick() { if (($#)); then for s in "$@"; do case $s in temporal | kafka | mariadb) echo "$s" ;; --hard) ;; *) die "unknown service '$s' (expected temporal, kafka or mariadb)" ;; esac; done; else printf '%s\n' "${ALL[@]}"; fi; }

cmd=${1:-status}; shift || true
case $cmd in
  up)
    mapfile -t svcs < <(pick "$@")
    for s in "${svcs[@]}"; do "up_$s"; done
    write_env
    for s in "${svcs[@]}"; do status_one "$s"; done
    ;;
  down)
    mapfile -t svcs < <(pick "$@")
    for s in "${svcs[@]}"; do stop_one "$s" TERM; done
    ;;
  kill)
    (($#)) || die "kill needs a service name"
    mapfile -t svcs < <(pick "$@")
    for s in "${svcs[@]}"; do stop_one "$s" KILL; done
    ;;
  restart)
    mapfile -t svcs < <(pick "$@")
    sig=TERM; for a in "$@"; do [[ $a == --hard ]] && sig=KILL; done
    for s in "${svcs[@]}"; do stop_one "$s" "$sig"; "up_$s"; done
    write_env
    ;;
  status)
    rc=0
    for s in "${ALL[@]}"; do status_one "$s" || rc=1; done
    exit $rc
    ;;
  env) echo "$ENV_FILE" ;;
  pid) alive "${1:?pid needs a service}" && pid_of "$1" ;;
  *) die "unknown command '$cmd' (expected up, down, kill, restart, status, env or pid)" ;;
esac
