#!/usr/bin/env bash
# A schema registry with Confluent's REST API on loopback, without Docker: Apicurio Registry
# (the Quarkus app distribution from Maven Central), in-memory storage, its Confluent-compatible
# API under /apis/ccompat/v7. For onceflow's schema-registry serde test (src/serde/) and for
# trying the serde by hand; not one of the pipeline's services (scripts/services.sh).
#
#   scripts/schema-registry.sh up       install if missing, start if stopped, wait; prints the URL
#   scripts/schema-registry.sh down     stop cleanly (SIGTERM, then SIGKILL after 60 s)
#   scripts/schema-registry.sh status   one line; exit 0 iff up
#   scripts/schema-registry.sh url      print the URL (also in $RUN/schema-registry/url while up)
#
# `up` prints the URL, e.g. http://127.0.0.1:8081/apis/ccompat/v7, as its only stdout line (logs
# go to stderr), so `url=$(scripts/schema-registry.sh up)` works. It is idempotent and safe to
# run concurrently (a lock serialises starts). Storage is in memory: a restart forgets every
# schema, so whoever uses it registers its schemas first.
#
# The download (about 110 MB, checked against Maven Central's SHA-1) is cached in $ONCEFLOW_HOME
# (default ~/.cache/onceflow); the pid, log and URL file live in $ONCEFLOW_RUN_DIR/schema-registry
# (default $ONCEFLOW_HOME/run). Port: $ONCEFLOW_SCHEMA_REGISTRY_PORT, else $ONCEFLOW_PORT_BASE+81
# (the isolated second stack of scripts/services.sh), else 8081. A port held by a process that
# is not ours is reported and left alone.
set -euo pipefail

ONCEFLOW_HOME=${ONCEFLOW_HOME:-$HOME/.cache/onceflow}
RUN=${ONCEFLOW_RUN_DIR:-$ONCEFLOW_HOME/run}
BASE=${ONCEFLOW_PORT_BASE:-}

APICURIO_VERSION=${ONCEFLOW_APICURIO_VERSION:-3.0.9}
APICURIO_URL=https://repo1.maven.org/maven2/io/apicurio/apicurio-registry-app/$APICURIO_VERSION/apicurio-registry-app-$APICURIO_VERSION-all.zip
APICURIO_DIR=$ONCEFLOW_HOME/apicurio-registry-$APICURIO_VERSION
APICURIO_JAR=$APICURIO_DIR/apicurio-registry-app-$APICURIO_VERSION-runner.jar

PORT=${ONCEFLOW_SCHEMA_REGISTRY_PORT:-${BASE:+$((BASE + 81))}}; PORT=${PORT:-8081}
DIR=$RUN/schema-registry
URL=http://127.0.0.1:$PORT/apis/ccompat/v7

log() { printf '[schema-registry] %s\n' "$*" >&2; }
die() { printf '[schema-registry] error: %s\n' "$*" >&2; exit 1; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
pid_of() { [[ -f $DIR/pid ]] && cat "$DIR/pid" || true; }
# shellcheck source=scripts/process.sh
source "$(dirname "${BASH_SOURCE[0]}")/process.sh"
alive() { ours "$(pid_of)" "$DIR"; }
# Ready: the Confluent-compatible API answers (and with JSON, so it is a registry on that port).
ready() { curl -fsS --max-time 2 "$URL/subjects" 2>/dev/null | grep -q '^\['; }

install() {
  [[ -f $APICURIO_JAR ]] && return
  command -v java >/dev/null || die "Java 17+ is needed to run Apicurio Registry; install a JDK"
  command -v curl >/dev/null && command -v unzip >/dev/null || die "curl and unzip are needed to fetch Apicurio Registry"
  mkdir -p "$ONCEFLOW_HOME"
  local zip=$ONCEFLOW_HOME/apicurio-registry-app-$APICURIO_VERSION-all.zip
  if [[ ! -f $zip ]]; then
    log "downloading Apicurio Registry $APICURIO_VERSION from Maven Central (first time only, ~110 MB)"
    curl -fsSL --retry 3 -o "$zip.part" "$APICURIO_URL"
    local want got
    want=$(curl -fsSL --retry 3 "$APICURIO_URL.sha1" | cut -c1-40)
    got=$(sha1sum "$zip.part" | cut -c1-40)
    [[ $want == "$got" ]] || { rm -f "$zip.part"; die "checksum mismatch for $APICURIO_URL (want $want, got $got)"; }
    mv "$zip.part" "$zip"
  fi
  rm -rf "$APICURIO_DIR.tmp"
  unzip -q "$zip" -d "$APICURIO_DIR.tmp"
  [[ -f $APICURIO_DIR.tmp/$(basename "$APICURIO_JAR") ]] || die "$zip has no $(basename "$APICURIO_JAR"); see its contents with unzip -l"
  rm -rf "$APICURIO_DIR"
  mv "$APICURIO_DIR.tmp" "$APICURIO_DIR"
  rm -f "$zip" # the unpacked copy is what runs
}

up() {
  install
  mkdir -p "$DIR"
  if alive; then
    if ready; then echo "$URL" >"$DIR/url"; return; fi
  else
    port_open "$PORT" && die "port $PORT is held by a process that is not onceflow's schema registry (no pid file of ours is alive). Stop that process, free the port or set ONCEFLOW_SCHEMA_REGISTRY_PORT; onceflow never kills what it did not start."
    log "starting Apicurio Registry $APICURIO_VERSION on 127.0.0.1:$PORT (in-memory storage)"
    # Own session (setsid), so `down` reaches the whole tree; cwd is the run dir, so nothing
    # lands in the caller's directory.
    # fd 9 (the lock) is closed for it, or the lock would live as long as the registry.
    cd "$DIR"
    setsid java -Xms128m -Xmx512m \
      -Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port="$PORT" \
      -Dquarkus.log.console.color=false \
      -jar "$APICURIO_JAR" >>"$DIR/schema-registry.log" 2>&1 </dev/null 9>&- &
    echo $! >"$DIR/pid"
  fi
  local deadline=$((SECONDS + 120))
  until ready; do
    alive || { tail -n 30 "$DIR/schema-registry.log" >&2 || true; die "Apicurio Registry exited during start-up; log: $DIR/schema-registry.log"; }
    ((SECONDS < deadline)) || die "Apicurio Registry not ready after 120s; log: $DIR/schema-registry.log"
    sleep 0.5
  done
  echo "$URL" >"$DIR/url"
}

down() {
  local p; p=$(pid_of)
  rm -f "$DIR/url"
  if ! ours "$p" "$DIR"; then rm -f "$DIR/pid"; return; fi
  stop_group "$p" "Apicurio Registry" "$PORT"
  rm -f "$DIR/pid"
}

status() {
  if alive && ready; then echo "schema-registry up    $URL  (Apicurio Registry $APICURIO_VERSION, in memory)  log $DIR/schema-registry.log"; return 0; fi
  if port_open "$PORT" && ! alive; then echo "schema-registry foreign  port $PORT is held by a process that is not onceflow's"; else echo "schema-registry down"; fi
  return 1
}

# One `up` or `down` at a time (tests may start the registry concurrently).
locked() { mkdir -p "$DIR"; exec 9>"$DIR/lock"; flock -w 300 9 || die "another schema-registry.sh held $DIR/lock for 300 s"; "$@"; }

cmd=${1:-status}
case $cmd in
  up) locked up; echo "$URL" ;;
  down) locked down ;;
  status) status ;;
  url) echo "$URL" ;;
  *) die "unknown command '$cmd' (expected up, down, status or url)" ;;
esac
